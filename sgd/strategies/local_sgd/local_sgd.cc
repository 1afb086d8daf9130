#include "sgd/strategies/local_sgd/local_sgd.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sgd/registry.h"

namespace gossip::sgd {

Result<OuterOptimizer::Kind> parse_outer_kind(const std::string& name) {
  if (name == "none") return OuterOptimizer::Kind::kNone;
  if (name == "nesterov") return OuterOptimizer::Kind::kNesterov;
  return Status::invalid(fmt::format("unknown outer optimizer '{}' (valid: none, nesterov)", name));
}

LocalSgd::LocalSgd(AllReduce& all_reduce, OuterOptimizer outer, const compression::Codec* codec,
                   bool error_feedback, compression::ThreadPool* pool, bool clip)
    : all_reduce_(all_reduce),
      outer_(outer),
      codec_(codec),
      error_feedback_(error_feedback),
      pool_(pool),
      clip_(clip) {}

StrategyState LocalSgd::save_state() const {
  StrategyState s;
  if (previous_.empty()) return s;  // before the first round
  s.tensors["local_sgd.previous"] = previous_;
  s.tensors["local_sgd.momentum"] = momentum_;
  if (residual_) {
    const auto r = residual_->residual();
    s.tensors["local_sgd.residual"] = std::vector<float>(r.begin(), r.end());
  }
  return s;
}

Status LocalSgd::load_state(const StrategyState& state) {
  if (state.empty()) return Status::ok();
  auto previous = state.tensor("local_sgd.previous", 0);
  if (!previous) return previous.status();
  const size_t n = (*previous)->size();
  auto momentum = state.tensor("local_sgd.momentum", n);
  if (!momentum) return momentum.status();
  if (state.tensors.count("local_sgd.residual")) {
    auto r = state.tensor("local_sgd.residual", n);
    if (!r) return r.status();
    if (!error_feedback_ || !codec_)
      return Status::invalid(
          "the checkpoint has an error-feedback residual but this node runs without error "
          "feedback");
    residual_ = std::make_unique<compression::ErrorFeedback>(*codec_, n);
    residual_->restore(**r);
  }
  previous_ = **previous;
  momentum_ = **momentum;
  return Status::ok();
}

void LocalSgd::took_model(std::span<const float> model, std::span<const float> shared) {
  residual_.reset();                        // this node's own error, of the model it no longer has
  if (plain() && !sends_changes()) return;  // rounds average the models themselves
  previous_.assign(model.begin(), model.end());
  if (nesterov() && shared.size() == model.size()) {
    momentum_.assign(shared.begin(), shared.end());
    return;
  }
  if (nesterov())
    spdlog::warn("took a model without the members' outer momentum: it restarts at zero here");
  momentum_.assign(model.size(), 0.0f);
}

void LocalSgd::started_from(std::span<const float> model) {
  // Uncompressed rounds average the models themselves and need no common x_prev.
  if (sends_changes()) start_point_.assign(model.begin(), model.end());
}

bool LocalSgd::take_start_point(uint64_t round, size_t numel) {
  // Only nodes of a fresh cluster run round 0, and start-up gave each of them node
  // 0's model, the same bits: the change since it is all that must travel, as in
  // every later round. A node that did not start (a trainer that kept its own model)
  // averages the models exactly, and the round fails on the first message of the
  // other kind (see first_round_hint).
  const bool take = round == 0 && start_point_.size() == numel;
  if (take) {
    previous_ = std::move(start_point_);
    momentum_.assign(numel, 0.0f);
  }
  start_point_ = {};
  return take;
}

std::span<const float> LocalSgd::shared_state() const {
  // Before the first round there is none; the state transfer offers no state then.
  if (!nesterov() || momentum_.size() != previous_.size()) return {};
  return momentum_;
}

Result<StrategyState> LocalSgd::keep_own_state(const StrategyState& saved) {
  // The residual is the mass this node's updates have not delivered yet: its own,
  // whoever's model it goes on from. The outer momentum is not: every member applies
  // the same one to the same averaged delta, so a stale copy from the checkpoint
  // would set this replica apart from the others' for good; took_model() took the
  // members' with their model.
  StrategyState kept;
  if (saved.empty() || !saved.tensors.count("local_sgd.residual") || !error_feedback_ || !codec_)
    return kept;
  auto previous = saved.tensor("local_sgd.previous", 0);
  if (!previous) return previous.status();
  const size_t n = (*previous)->size();
  auto r = saved.tensor("local_sgd.residual", n);
  if (!r) return r.status();
  residual_ = std::make_unique<compression::ErrorFeedback>(*codec_, n);
  residual_->restore(**r);
  kept.tensors["local_sgd.residual"] = **r;
  return kept;
}

namespace {

// Nodes that average round 0 in two ways fail it on a message of the other kind, or
// on a connection another algorithm never made (auto picks by the exact round's size):
// any failure of a compressed round 0 may be that, and says so.
Status first_round_hint(const Status& st, uint64_t round) {
  if (st.is_ok() || round != 0) return st;
  return st.with_context(
      "the first round (where some trainers started from node 0's model and others kept their "
      "own, initial=\"own\", the nodes average it in two ways: start every trainer alike)");
}

}  // namespace

Status LocalSgd::synchronize(std::span<float> model, uint64_t round,
                             const RoundOptions& round_options) {
  if (all_reduce_.take_merge()) forget_sync_point();
  Status st = synchronize_round(model, round, round_options);
  // The ring merged inside the round, which it ended unaveraged: run it again as the
  // union's first round. Right after a partition heals, the links across come back
  // one by one, and the union may grow over a few re-formings; the round's deadline
  // bounds them.
  while (!st.is_ok() && all_reduce_.take_merge()) {
    forget_sync_point();
    st = synchronize_round(model, round, round_options);
  }
  return sends_changes() ? first_round_hint(st, round) : st;
}

void LocalSgd::forget_sync_point() {
  // The union's members hold two sides' x_prev: its first round averages the models
  // themselves, and the outer momentum (of each side's own trajectory) restarts at
  // zero on every member alike. The error-feedback residual is this node's own
  // undelivered change and stays.
  spdlog::info(
      "local-sgd: merged with nodes that trained apart: the next round averages the models");
  previous_.clear();
  momentum_.clear();
  start_point_.clear();
  started_.clear();
  started_elems_ = 0;
  whole_synced_ = false;
}

Status LocalSgd::synchronize_round(std::span<float> model, uint64_t round,
                                   const RoundOptions& round_options) {
  CollectiveOptions options;
  options.deadline = round_options.deadline;
  options.cancel = round_options.cancel;
  if (round_options.offset != 0 ||
      (round_options.model_numel != 0 && round_options.model_numel != model.size()))
    return synchronize_fragment(model, round, round_options.offset, round_options.model_numel,
                                options);
  if (!started_.empty() && started_elems_ < model.size()) {
    // The whole model after streamed fragment rounds (a sync() at the end of a run)
    // before every fragment had its first: its exact average, from which every
    // fragment's next round goes on. Once all have, x_prev is whole and the round
    // below sends the compressed change since it.
    GOSSIP_RETURN_IF_ERROR(all_reduce_.all_reduce_mean(model, round, options));
    previous_.assign(model.begin(), model.end());
    whole_synced_ = true;
    return Status::ok();
  }
  bool first = previous_.size() != model.size();
  if (first && take_start_point(round, model.size())) first = false;
  if (first || !sends_changes()) {
    GOSSIP_RETURN_IF_ERROR(all_reduce_.all_reduce_mean(model, round, options));
    if (first) {
      if (!plain() || sends_changes()) {
        previous_.assign(model.begin(), model.end());
        momentum_.assign(model.size(), 0.0f);
      }
      return Status::ok();
    }
    if (plain()) return Status::ok();
    delta_.resize(model.size());
    for (size_t i = 0; i < model.size(); ++i) delta_[i] = model[i] - previous_[i];
    apply(model, delta_, previous_, momentum_);
    return Status::ok();
  }

  delta_.resize(model.size());
  for (size_t i = 0; i < model.size(); ++i) delta_[i] = model[i] - previous_[i];
  if (compressed() && error_feedback_ && !residual_)
    residual_ = std::make_unique<compression::ErrorFeedback>(*codec_, model.size());
  CollectiveOptions opts = options;
  if (!round_options.uncompressed) opts.compression = {codec_, residual_.get(), pool_};
  opts.deltas = true;
  GOSSIP_RETURN_IF_ERROR(all_reduce_.all_reduce_mean(delta_, round, opts));
  apply(model, delta_, previous_, momentum_);
  return Status::ok();
}

Status LocalSgd::synchronize_fragment(std::span<float> model, uint64_t round, uint64_t offset,
                                      uint64_t model_numel, const CollectiveOptions& options) {
  const uint64_t n = model.size();
  if (model_numel < offset + n)
    return Status::invalid(fmt::format("local-sgd: fragment [{}, {}) of a model of {} elements",
                                       offset, offset + n, model_numel));
  if (previous_.size() != model_numel) {
    previous_.assign(model_numel, 0.0f);
    momentum_.assign(model_numel, 0.0f);
    started_.clear();
    started_elems_ = 0;
    whole_synced_ = take_start_point(round, model_numel);
  }
  const auto previous = std::span<float>(previous_).subspan(offset, n);
  const auto momentum = std::span<float>(momentum_).subspan(offset, n);
  const bool first = !whole_synced_ && !started_.count(offset);
  if (first || !sends_changes()) {
    GOSSIP_RETURN_IF_ERROR(all_reduce_.all_reduce_mean(model, round, options));
    if (first) {
      std::copy(model.begin(), model.end(), previous.begin());
      std::fill(momentum.begin(), momentum.end(), 0.0f);
      if (started_.insert(offset).second) started_elems_ += n;
      return Status::ok();
    }
    if (plain()) return Status::ok();
    delta_.resize(n);
    for (size_t i = 0; i < n; ++i) delta_[i] = model[i] - previous[i];
    apply(model, delta_, previous, momentum);
    return Status::ok();
  }
  delta_.resize(n);
  for (size_t i = 0; i < n; ++i) delta_[i] = model[i] - previous[i];
  auto& residual = fragment_residuals_[offset];
  if (compressed() && error_feedback_ && !residual)
    residual = std::make_unique<compression::ErrorFeedback>(*codec_, n);
  CollectiveOptions opts = options;
  opts.compression = {codec_, residual.get(), pool_};
  opts.deltas = true;
  GOSSIP_RETURN_IF_ERROR(all_reduce_.all_reduce_mean(delta_, round, opts));
  apply(model, delta_, previous, momentum);
  return Status::ok();
}

void LocalSgd::apply(std::span<float> model, std::span<const float> delta,
                     std::span<float> previous, std::span<float> momentum) {
  // Pseudo-gradient g = x_prev - x_avg = -delta. Every node holds the same x_prev
  // and the same averaged delta, so every node takes the same step.
  const float lr = static_cast<float>(outer_.lr);
  const float mu = static_cast<float>(outer_.momentum);
  const bool with_momentum = nesterov();
  for (size_t i = 0; i < model.size(); ++i) {
    float g = -delta[i];
    float step = g;
    if (with_momentum) {
      momentum[i] = mu * momentum[i] + g;
      step = g + mu * momentum[i];
    }
    float x = previous[i] - lr * step;
    model[i] = x;
    previous[i] = x;
  }
}

StrategyDescriptor local_sgd_strategy() {
  StrategyDescriptor d;
  d.name = "local-sgd";
  d.summary = "average the models every `period` steps, with an optional outer optimizer (DiLoCo)";
  d.fabric = Fabric::kAllReduce;
  d.takes_nodes_back = true;
  d.options = {"outer", "trim", "clip", "fragments", "tune"};
  d.make = [](const StrategyResources& r, std::string*) -> Result<std::unique_ptr<Strategy>> {
    return std::unique_ptr<Strategy>(std::make_unique<LocalSgd>(
        *r.all_reduce, r.params.outer, r.codec, r.error_feedback, r.pool, r.params.clip));
  };
  return d;
}

}  // namespace gossip::sgd

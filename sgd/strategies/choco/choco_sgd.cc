#include "sgd/strategies/choco/choco_sgd.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/mix.h"
#include "sgd/registry.h"

namespace gossip::sgd {

double default_choco_gamma(const compression::Codec* codec) {
  if (!codec) return 1.0;
  switch (codec->id()) {
    case proto::CodecId::kNone:
    case proto::CodecId::kFp16:
    case proto::CodecId::kBf16:
    case proto::CodecId::kInt8:
      return 1.0;
    case proto::CodecId::kQsgd:
    case proto::CodecId::kSign:
      return 0.5;
    case proto::CodecId::kTopk:
    case proto::CodecId::kRandk:
    case proto::CodecId::kChain: {
      // γ ~ 4 × the kept fraction: on an 8-node ring with top-k 1%, 0.04 reaches
      // 1e-3 of the initial distance in ~460 rounds, 0.06 stalls and 0.2 diverges
      // (simulated, and measured by tests/integration/gossip_consensus_test).
      const std::string spec = codec->spec();
      const double ratio = std::strtod(spec.c_str() + spec.find(':') + 1, nullptr);
      return std::clamp(4.0 * ratio, 0.01, 1.0);
    }
  }
  return 0.5;
}

StrategyState ChocoSgd::save_state() const {
  // The neighbors' copies are not kept: a node that resumes resynchronizes them.
  if (public_self_.empty()) return {};
  return {{{"choco.public_self", public_self_}}, {}};
}

Status ChocoSgd::load_state(const StrategyState& state) {
  if (state.empty()) return Status::ok();  // saved before its first round
  auto pub = state.tensor("choco.public_self", 0);
  if (!pub) return pub.status();
  public_self_ = **pub;
  started_ = false;
  return Status::ok();
}

void ChocoSgd::start(std::span<const float> model, uint64_t round, const peers::MixingWeights& row,
                     std::span<const uint32_t> out) {
  const size_t n = model.size();
  copies_.assign(row.peers.size(), {});
  for (size_t s = 0; s < row.peers.size(); ++s) {
    copies_[s].node = row.peers[s].node;
    copies_[s].x.assign(n, 0.0f);
  }
  if (!started_ && round == 0 && public_self_.empty()) {
    // A cluster that starts: x̂^0 = 0 on every node, as in the paper, so every copy
    // agrees without a word.
    public_self_.assign(n, 0.0f);
    for (auto& c : copies_) c.in_sync = true;
  } else {
    // Joined, resumed or caught up: the neighbors' copies of x̂_i and ours of theirs
    // do not agree any more. Starting x̂_i at the model makes the first correction 0.
    if (public_self_.size() != n) public_self_.assign(model.begin(), model.end());
    owe_copy_.assign(out.begin(), out.end());
    std::string who;
    for (auto& c : copies_) {
      // Asked before this round's message goes out, so that the neighbor's next
      // round already brings its copy.
      exchange_.request_copy(c.node, round);
      c.asked = round;
      who += (who.empty() ? "" : ", ") + std::to_string(c.node);
    }
    spdlog::info("round {}: resynchronizing CHOCO's public copies with peers {} ({})", round, who,
                 failed_    ? "the last round failed"
                 : started_ ? "rounds were skipped"
                            : "this node starts mid-run");
  }
  started_ = true;
  failed_ = false;
}

void ChocoSgd::regraph(uint64_t round, const peers::MixingWeights& row,
                       std::span<const uint32_t> out) {
  const size_t n = public_self_.size();
  std::vector<Copy> copies(row.peers.size());
  std::string kept, fresh;
  for (size_t s = 0; s < row.peers.size(); ++s) {
    const uint32_t node = row.peers[s].node;
    auto old =
        std::find_if(copies_.begin(), copies_.end(), [&](const Copy& c) { return c.node == node; });
    if (old != copies_.end()) {
      copies[s] = std::move(*old);
      kept += (kept.empty() ? "" : ", ") + std::to_string(node);
      continue;
    }
    // Both ends of a new edge send their x̂ itself this round and leave the edge out
    // of the mixing until it has arrived, so the mean is kept.
    copies[s].node = node;
    copies[s].x.assign(n, 0.0f);
    exchange_.request_copy(node, round);
    copies[s].asked = round;
    if (std::find(out.begin(), out.end(), node) != out.end()) owe_copy_.push_back(node);
    fresh += (fresh.empty() ? "" : ", ") + std::to_string(node);
  }
  copies_ = std::move(copies);
  spdlog::info("round {}: the graph changed (a node joined): new CHOCO copies of peers {}{}{}",
               round, fresh.empty() ? "none" : fresh, kept.empty() ? "" : ", kept those of ", kept);
}

void ChocoSgd::send(uint64_t round, std::span<const uint32_t> out) {
  std::vector<uint32_t> asked = exchange_.take_copy_requests();
  asked.insert(asked.end(), owe_copy_.begin(), owe_copy_.end());
  owe_copy_.clear();
  std::vector<uint32_t> copy_to, delta_to;
  for (uint32_t peer : out)
    (std::find(asked.begin(), asked.end(), peer) != asked.end() ? copy_to : delta_to)
        .push_back(peer);
  exchange_.send(outgoing_, delta_to);
  if (copy_to.empty()) return;
  public_out_.tensor = proto::kPublicCopyTensor;
  // Raw: the copy must arrive exactly as this node holds it.
  if (auto st =
          public_out_.encode(public_self_, self(), round, options_.chunk_elems, Compression{});
      !st) {
    spdlog::warn("round {}: {}", round, st.message());  // they ask again
    return;
  }
  exchange_.send(public_out_, copy_to);
}

void ChocoSgd::settle(uint64_t round, const std::vector<bool>& complete) {
  const size_t n = public_self_.size();
  for (size_t s = 0; s < copies_.size(); ++s) {
    Copy& c = copies_[s];
    if (complete[s] && c.filled == n) {
      if (!c.in_sync)
        spdlog::info("round {}: CHOCO's public copy of peer {} is resynchronized", round, c.node);
      c.in_sync = true;
      c.asked.reset();
    } else if (!complete[s] && c.in_sync) {
      c.in_sync = false;
      spdlog::warn(
          "round {}: peer {}'s correction is missing, so this node's copy of it is stale: "
          "asking for the copy itself",
          round, c.node);
    }
    // A request can cross the neighbor's next round; one to a dead node is lost, so
    // ask again once it is heard from.
    if (!c.in_sync && (!c.asked || (c.heard && round >= *c.asked + 2))) {
      exchange_.request_copy(c.node, round + 1);
      c.asked = round;
    }
  }
}

Status ChocoSgd::synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) {
  const uint32_t self = this->self();
  const peers::Topology* graph = topology(round);
  if (!graph) {  // joined for a later round: its neighbors' copies start there
    started_ = false;
    return Status::ok();
  }
  const peers::MixingWeights row = graph->mixing_row(self, round);
  const auto out = graph->out_neighbors(self, round);
  const auto start_time = now();
  const size_t n = model.size();
  bool same_neighbors = copies_.size() == row.peers.size();
  for (size_t s = 0; same_neighbors && s < copies_.size(); ++s)
    same_neighbors = copies_[s].node == row.peers[s].node;
  if (!started_ || round != last_round_ + 1 || public_self_.size() != n)
    start(model, round, row, out);
  else if (!same_neighbors)
    regraph(round, row, out);
  last_round_ = round;

  q_.resize(n);
  for (size_t e = 0; e < n; ++e) q_[e] = model[e] - public_self_[e];
  // Error feedback is not used: x̂ already carries what Q dropped into the next round.
  Compression c = options_.compression;
  c.error_feedback = nullptr;
  GOSSIP_RETURN_IF_ERROR(outgoing_.encode(q_, self, round, options_.chunk_elems, c));
  for (size_t e = 0; e < n; ++e) public_self_[e] += q_[e];
  send(round, out);

  std::vector<uint32_t> sources;
  for (auto& copy : copies_) {
    sources.push_back(copy.node);
    copy.filled = 0;
    copy.heard = false;
  }
  auto delivery =
      exchange_.receive(round, sources, n, start_time + options_.patience, options,
                        [&](size_t s, const proto::ModelChunk& h, std::span<const float> v) {
                          Copy& copy = copies_[s];
                          copy.heard = true;
                          float* x = copy.x.data() + h.offset;
                          if (h.tensor == proto::kPublicCopyTensor) {
                            std::copy(v.begin(), v.end(), x);
                            copy.filled += v.size();
                          } else if (copy.in_sync) {
                            for (size_t e = 0; e < v.size(); ++e) x[e] += v[e];
                          }
                        });
  if (!delivery) {
    // Some copies took part of this round's corrections: resynchronize them all.
    started_ = false;
    failed_ = true;
    return delivery.status();
  }
  settle(round, delivery->complete);
  if (!delivery->missing.empty())
    spdlog::warn("round {}: CHOCO round without {}", round, delivery->missing);

  const float gamma = static_cast<float>(gamma_);
  for (size_t s = 0; s < copies_.size(); ++s) {
    if (!copies_[s].in_sync) continue;  // its weight stays with this node's model
    const float w = gamma * static_cast<float>(row.peers[s].weight);
    add_weighted_difference(model.first(n), copies_[s].x, public_self_, w);
  }
  return Status::ok();
}

StrategyDescriptor choco_strategy() {
  StrategyDescriptor d;
  d.name = "choco";
  d.summary = "CHOCO-SGD: compressed gossip through public copies of the neighbors";
  d.static_topology = true;
  d.options = {"gamma"};
  d.make = [](const StrategyResources& r,
              std::string* detail) -> Result<std::unique_ptr<Strategy>> {
    const double gamma = r.params.gamma > 0 ? r.params.gamma : default_choco_gamma(r.codec);
    *detail = fmt::format(", gamma {}", gamma);
    return std::unique_ptr<Strategy>(
        std::make_unique<ChocoSgd>(*r.exchange, *r.overlay, r.gossip, gamma));
  };
  return d;
}

}  // namespace gossip::sgd

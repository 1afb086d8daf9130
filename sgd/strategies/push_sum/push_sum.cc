#include "sgd/strategies/push_sum/push_sum.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "base/refusals.h"
#include "sgd/registry.h"

namespace gossip::sgd {

Status PushSum::load_state(const StrategyState& state) {
  auto w = state.scalar("push_sum.weight");
  if (!w) return w.status();
  if (!(*w > 0.0) || !std::isfinite(*w))
    return Status::invalid(fmt::format("push-sum weight {} is not positive", *w));
  weight_ = *w;
  return Status::ok();
}

bool PushSum::admit(uint32_t from, uint64_t round, double weight, std::span<const float> self,
                    std::vector<float>& x) {
  // The total weight is the node count, so no honest share is larger; a share below
  // 1e-30 would turn x / w into Inf (a denormal one, into NaN).
  const double nodes = static_cast<double>(overlay_.latest().size());
  if (!std::isfinite(weight) || weight < 1e-30 || weight > nodes) {
    count_refusal(Refusal::kBadWeight);
    exchange_.transport().note_dropped(
        from, fmt::format("round {}: push-sum weight {} outside (1e-30, {}]: "
                          "its mass is left out",
                          round, weight, nodes));
    return false;
  }
  // The neighbor's de-biased model, checked and clipped around this node's.
  const float inv = static_cast<float>(1.0 / weight);
  for (float& v : x) v *= inv;
  if (!std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); })) {
    count_refusal(Refusal::kNonFinite);
    exchange_.transport().note_dropped(
        from, fmt::format("round {}: push-sum share with NaN or Inf: left out", round));
    return false;
  }
  if (const double f = clip_ ? clip_->clip(self, x) : 1.0; f < 1.0) {
    count_refusal(Refusal::kClipped);
    spdlog::warn("round {}: push-sum share of node {} clipped to {:.3g} of its distance", round,
                 from, f);
  }
  const float w = static_cast<float>(weight);
  for (float& v : x) v *= w;
  return true;
}

Status PushSum::synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) {
  const uint32_t self = this->self();
  const size_t n = model.size();
  const auto start = now();

  // Push to the out-neighbors that are alive; one that left or is presumed dead gets
  // no share, so no mass is sent into the void, but a hello. One that is only absent
  // (it missed a round, and its heartbeats are fresh) still gets its share: with a
  // hello instead it waited out its patience for our mass and took us for absent in
  // turn, and after a partition healed every node stalled for the patience every
  // few rounds for half a minute (experiments/partition.py), each stall making the
  // next absence.
  std::vector<uint32_t> targets;
  const peers::Topology* graph = topology(round);
  for (uint32_t p : graph ? graph->out_neighbors(self, round) : std::vector<uint32_t>()) {
    if (!exchange_.gone(p))
      targets.push_back(p);
    else
      exchange_.greet(p);
  }
  const double keep = 1.0 / static_cast<double>(targets.size() + 1);
  numerator_.resize(n);
  share_.resize(n);
  const float w = static_cast<float>(weight_);
  const float k = static_cast<float>(keep);
  for (size_t e = 0; e < n; ++e) {
    numerator_[e] = model[e] * w;
    share_[e] = numerator_[e] * k;
  }
  // With a codec the receivers get Q(share); we keep exactly the rest, so Σ x is
  // preserved whatever Q does.
  GOSSIP_RETURN_IF_ERROR(
      outgoing_.encode(share_, self, round, options_.chunk_elems, options_.compression));
  exchange_.send(outgoing_, targets, weight_ * keep);
  const float sent = static_cast<float>(targets.size());
  for (size_t e = 0; e < n; ++e) numerator_[e] -= sent * share_[e];
  weight_ *= keep;

  if (round >= lag_ && topology(round - lag_)) {
    const uint64_t from_round = round - lag_;
    const auto sources = topology(from_round)->in_neighbors(self, from_round);
    staged_.resize(sources.size());
    std::vector<double> weights(sources.size(), 0.0);
    auto delivery = exchange_.receive(
        from_round, sources, n, start + options_.patience, options,
        [&](size_t s, const proto::ModelChunk& h, std::span<const float> v) {
          staged_[s].resize(n);
          std::copy(v.begin(), v.end(), staged_[s].begin() + static_cast<ptrdiff_t>(h.offset));
          weights[s] = h.weight;
        });
    if (!delivery) return delivery.status();
    for (size_t s = 0; s < sources.size(); ++s) {
      if (!delivery->complete[s]) continue;
      if (!admit(sources[s], round, weights[s], model, staged_[s])) continue;
      const float* x = staged_[s].data();
      for (size_t e = 0; e < n; ++e) numerator_[e] += x[e];
      weight_ += weights[s];
    }
    if (!delivery->missing.empty())
      spdlog::warn("round {}: push-sum without the round-{} mass of {}", round, from_round,
                   delivery->missing);
  }
  const float inv = static_cast<float>(1.0 / weight_);
  for (size_t e = 0; e < n; ++e) model[e] = numerator_[e] * inv;
  return Status::ok();
}

StrategyDescriptor push_sum_strategy() {
  StrategyDescriptor d;
  d.name = "push-sum";
  d.summary = "SGP: push-sum on a directed, time-varying graph, messages `delay` rounds in flight";
  d.default_topology = "one-peer-exponential";
  d.options = {"delay", "clip"};
  d.make = [](const StrategyResources& r,
              std::string* detail) -> Result<std::unique_ptr<Strategy>> {
    *detail = fmt::format(", delay {}{}", r.params.delay, r.params.clip ? ", clipped" : "");
    return std::unique_ptr<Strategy>(std::make_unique<PushSum>(*r.exchange, *r.overlay, r.gossip,
                                                               r.params.delay, r.params.clip));
  };
  return d;
}

}  // namespace gossip::sgd

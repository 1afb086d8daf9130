#include "sgd/strategies/async_gossip/async_gossip.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/mix.h"
#include "sgd/registry.h"

namespace gossip::sgd {

AsyncGossip::AsyncGossip(NeighborExchange& exchange, const Overlay& overlay, GossipOptions options,
                         uint64_t staleness)
    : GossipStrategy(exchange, overlay, options, /*lag=*/staleness),
      step_(staleness == 0 ? 1.0f
                           : static_cast<float>(0.9 * std::sin(std::numbers::pi /
                                                               (2.0 * (2.0 * staleness + 1.0))))),
      sent_(staleness + 1),
      sent_round_(staleness + 1, UINT64_MAX) {}

Status AsyncGossip::synchronize(std::span<float> model, uint64_t round,
                                const RoundOptions& options) {
  const uint32_t self = this->self();
  const size_t n = model.size();
  const auto start = now();

  // What this round sends, which is also what the receivers of round `round` will
  // subtract our part with: with a codec, Q(x_i).
  const peers::Topology* graph = topology(round);
  if (!graph) return Status::ok();  // joined for a later round
  std::vector<float>& sent = sent_[round % sent_.size()];
  sent.assign(model.begin(), model.end());
  sent_round_[round % sent_.size()] = round;
  GOSSIP_RETURN_IF_ERROR(
      outgoing_.encode(sent, self, round, options_.chunk_elems, options_.compression));
  exchange_.send(outgoing_, graph->out_neighbors(self, round));
  if (round < lag_ || !topology(round - lag_)) return Status::ok();  // nothing is due yet

  const uint64_t due = round - lag_;
  const peers::MixingWeights row = topology(due)->mixing_row(self, due);
  // A node that skipped ahead (catch_up_round) never ran round `due`: its current
  // model stands in for what it would have sent.
  const std::vector<float>& own =
      sent_round_[due % sent_.size()] == due ? sent_[due % sent_.size()] : sent;
  std::vector<uint32_t> sources;
  for (const auto& in : row.peers) sources.push_back(in.node);
  mix_.assign(n, 0.0f);
  auto delivery = exchange_.receive(
      due, sources, n, start + options_.patience, options,
      [&](size_t s, const proto::ModelChunk& h, std::span<const float> v) {
        const float w = step_ * static_cast<float>(row.peers[s].weight);
        add_weighted_difference(std::span(mix_).subspan(h.offset, v.size()), v,
                                std::span<const float>(own).subspan(h.offset, v.size()), w);
      });
  if (!delivery) return delivery.status();
  if (!delivery->missing.empty())
    spdlog::warn("round {}: mixing round {} without {}", round, due, delivery->missing);
  for (size_t e = 0; e < n; ++e) model[e] += mix_[e];
  return Status::ok();
}

StrategyDescriptor async_gossip_strategy() {
  StrategyDescriptor d;
  d.name = "async-gossip";
  d.summary = "gossip with bounded staleness: trainers do not wait for the round";
  d.asynchronous = true;
  d.options = {"staleness"};
  d.make = [](const StrategyResources& r,
              std::string* detail) -> Result<std::unique_ptr<Strategy>> {
    *detail = fmt::format(", staleness {}", r.params.staleness);
    return std::unique_ptr<Strategy>(
        std::make_unique<AsyncGossip>(*r.exchange, *r.overlay, r.gossip, r.params.staleness));
  };
  return d;
}

}  // namespace gossip::sgd

#pragma once
// Synchronous gossip, D-PSGD (Lian et al. 2017): after the local steps of a round
// each node mixes with the round's neighbors, x_i <- x_i + sum_j W_ij (x_j - x_i),
// which is sum_j W_ij x_j written so that a neighbor that does not deliver simply
// drops out (its weight stays with x_i) and the mean over nodes is preserved
// whenever W is symmetric.
//
// With a codec, neighbors receive Q(x_i): naive compressed gossip, the baseline
// CHOCO-SGD improves on (for biased codecs it stalls at a distance from consensus).
//
// With trim B > 0 (untrusted peers) the node takes instead, coordinate by coordinate,
// the mean of its own and its neighbors' values without the B largest and the B
// smallest (trimmed mean, Yin et al. 2018; in decentralized form Yang & Bajwa 2019):
// up to B neighbors sending anything at all cannot move a coordinate outside the
// range of the honest values. It is not a weighted average, so the mean over nodes
// is no longer preserved exactly.

#include <vector>

#include "sgd/overlay/gossip_strategy.h"

namespace gossip::sgd {

class Dpsgd final : public GossipStrategy {
 public:
  Dpsgd(NeighborExchange& exchange, const Overlay& overlay, GossipOptions options,
        uint64_t trim = 0)
      : GossipStrategy(exchange, overlay, options), trim_(trim) {}

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;

 private:
  Status trimmed_mean(std::span<float> model, uint64_t round, std::span<const uint32_t> sources,
                      TimePoint start, const RoundOptions& options);

  std::vector<float> public_;  // Q(x_i) when compressing
  std::vector<float> mix_;     // sum_j W_ij (x_j - x_i) as it arrives
  uint64_t trim_;
  std::vector<std::vector<float>> received_;  // trimmed mean: each neighbor's model
};

}  // namespace gossip::sgd

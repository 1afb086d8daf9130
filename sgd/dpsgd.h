#pragma once
// Synchronous gossip, D-PSGD (Lian et al. 2017): after the local steps of a round
// each node mixes with the round's neighbors, x_i <- x_i + sum_j W_ij (x_j - x_i),
// which is sum_j W_ij x_j written so that a neighbor that does not deliver simply
// drops out (its weight stays with x_i) and the mean over nodes is preserved
// whenever W is symmetric.
//
// With a codec, neighbors receive Q(x_i): naive compressed gossip, the baseline
// CHOCO-SGD improves on (for biased codecs it stalls at a distance from consensus).

#include <vector>

#include "sgd/gossip_strategy.h"

namespace gossip::sgd {

class Dpsgd final : public GossipStrategy {
 public:
  Dpsgd(NeighborExchange& exchange, const peers::Topology& topology, GossipOptions options)
      : GossipStrategy(exchange, topology, options) {}

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;

 private:
  std::vector<float> public_;  // Q(x_i) when compressing
  std::vector<float> mix_;     // sum_j W_ij (x_j - x_i) as it arrives
};

}  // namespace gossip::sgd

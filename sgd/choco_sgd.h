#pragma once
// Compressed gossip, CHOCO-SGD (Koloskova, Stich & Jaggi 2019, Alg. 1/2). Every node
// keeps a public copy x̂_j of itself and of each neighbor, identical on all nodes
// that hold it; only compressed corrections travel:
//   q_i = Q(x_i - x̂_i);  x̂_j <- x̂_j + q_j for j in N_i ∪ {i};
//   x_i <- x_i + γ Σ_j W_ij (x̂_j - x̂_i).
// Because x̂ follows x, the error of Q shrinks with the distance it compresses, and
// consensus is reached for any compression ratio with a small enough γ.
//
// Instead of one copy per neighbor we keep x̂_i and s_i = Σ_j W_ij x̂_j (self
// included), updated with the weighted q_j: two model-sized buffers whatever the
// degree. That needs W fixed, so CHOCO runs on static topologies only.
// A neighbor's lost q_j leaves s_i off for good (no resynchronization yet).

#include <vector>

#include "sgd/gossip_strategy.h"

namespace gossip::sgd {

// A consensus step size that works for the codec without tuning: 1 for the
// near-lossless codecs, smaller as the codec keeps less.
double default_choco_gamma(const compression::Codec* codec);

class ChocoSgd final : public GossipStrategy {
 public:
  // The topology must not be time-varying (the daemon's config check refuses it).
  ChocoSgd(NeighborExchange& exchange, const peers::Topology& topology, GossipOptions options,
           double gamma)
      : GossipStrategy(exchange, topology, options), gamma_(gamma) {}

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;
  StrategyState save_state() const override;
  Status load_state(const StrategyState& state) override;

 private:
  double gamma_;
  std::vector<float> public_self_;  // x̂_i
  std::vector<float> mixed_;        // s_i = Σ_j W_ij x̂_j, j in N_i ∪ {i}
  std::vector<float> q_;            // this round's x_i - x̂_i, then Q of it
};

}  // namespace gossip::sgd

#pragma once
// Asynchronous gossip with bounded staleness. Round t of node i mixes with what its
// neighbors sent in round t − s, the stale-synchronous bound: a node runs at most s
// rounds ahead of its slowest neighbor and waits only there, so up to s rounds of
// communication overlap with its own local steps (s = 0 is synchronous D-PSGD).
//
// The mix uses differences of models of the same round,
//   x_i <- x_i + Σ_j W_ij (x_j^(t−s) − x_i^(t−s)),
// so with a symmetric W the nodes' mean is preserved exactly however stale the
// models are (mixing a neighbor's old model with one's own current one would pull the
// mean back in time). Each node keeps its own last s+1 sent models for that.
//
// Feedback that is s rounds late overshoots: x_{t+1} = x_t − η L x_{t−s} (L = I − W,
// eigenvalues μ in [0, 2]) is stable iff η μ < 2 sin(π / (2(2s+1))) for every μ
// (roots of z^{s+1} − z^s + ημ inside the unit circle). Undamped (η = 1) it
// diverges already at s = 1 on a 4-node ring; so η = 0.9 sin(π / (2(2s+1))).
//
// In the daemon the trainer does not wait for the round either: the change the round
// makes is staged and added to the trainer's model at its next synchronization point
// (see Daemon::maybe_start_round), in the spirit of AD-PSGD (Lian et al. 2018).

#include <vector>

#include "sgd/overlay/gossip_strategy.h"

namespace gossip::sgd {

class AsyncGossip final : public GossipStrategy {
 public:
  AsyncGossip(NeighborExchange& exchange, const Overlay& overlay, GossipOptions options,
              uint64_t staleness);

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;

 private:
  float step_;                            // η
  std::vector<std::vector<float>> sent_;  // sent_[t % (s+1)]: this node's model of round t
  std::vector<uint64_t>
      sent_round_;  // the round each slot of sent_ holds (after a catch-up, not every one)
  std::vector<float> public_;  // Q(x_i) when compressing
  std::vector<float> mix_;
};

}  // namespace gossip::sgd

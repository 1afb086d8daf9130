#pragma once
// Compressed gossip, CHOCO-SGD (Koloskova, Stich & Jaggi 2019, Alg. 1). Every node
// keeps a public copy x̂_j of itself and of each neighbor, identical on all nodes
// that hold it; only compressed corrections travel:
//   q_i = Q(x_i - x̂_i);  x̂_j <- x̂_j + q_j for j in N_i ∪ {i};
//   x_i <- x_i + γ Σ_j W_ij (x̂_j - x̂_i).
// Because x̂ follows x, the error of Q shrinks with the distance it compresses, and
// consensus is reached for any compression ratio with a small enough γ.
//
// Copies must agree, and churn breaks that: a correction lost to a missed round, a
// node that restarts (its x̂ starts anew) or skips rounds to catch up. So each copy
// of a neighbor is kept on its own (one model-sized buffer per neighbor, rather than
// the paper's memory-saving sum of them, which cannot be repaired), and a copy that
// missed a correction is resynchronized: this node sends the neighbor a copy-request,
// and the neighbor sends its x̂ itself, raw, in its next round (a model-chunk with
// tensor kPublicCopyTensor). Until then the stale copy is left out of the mixing, its
// weight staying with the node's own model, as D-PSGD does with a missing neighbor.
// A node that starts at a round other than 0, skips rounds or failed a round
// resynchronizes with every neighbor both ways.
//
// The copies are tied to fixed neighbors, so CHOCO runs on static topologies only;
// when a node joins and the graph changes, the copies of the neighbors that remain
// are kept and the new ones resynchronized.

#include <cstdint>
#include <optional>
#include <vector>

#include "sgd/overlay/gossip_strategy.h"

namespace gossip::sgd {

// A consensus step size that works for the codec without tuning: 1 for the
// near-lossless codecs, smaller as the codec keeps less.
double default_choco_gamma(const compression::Codec* codec);

class ChocoSgd final : public GossipStrategy {
 public:
  // The topology must not be time-varying (the daemon's config check refuses it).
  ChocoSgd(NeighborExchange& exchange, const Overlay& overlay, GossipOptions options, double gamma)
      : GossipStrategy(exchange, overlay, options), gamma_(gamma) {
    exchange.accept_public_copies();
  }

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;
  StrategyState save_state() const override;
  Status load_state(const StrategyState& state) override;

 private:
  // This node's copy x̂_j of an in-neighbor's public model.
  struct Copy {
    uint32_t node = 0;
    std::vector<float> x;
    bool in_sync = false;           // holds every correction the neighbor sent
    std::optional<uint64_t> asked;  // the round this node last asked for x̂_j itself
    uint64_t filled = 0;            // this round: elements of x̂_j itself received
    bool heard = false;             // this round: the neighbor delivered something
  };
  // First round of this process, or one after skipped rounds.
  void start(std::span<const float> model, uint64_t round, const peers::MixingWeights& row,
             std::span<const uint32_t> out);
  // The graph changed between two rounds this node ran (a node joined, sgd/overlay/overlay.h):
  // the copies of the neighbors it keeps stay, the new neighbors' are resynchronized.
  void regraph(uint64_t round, const peers::MixingWeights& row, std::span<const uint32_t> out);
  void send(uint64_t round, std::span<const uint32_t> out);
  // After the round's receive: which copies are whole, which went stale, and asking.
  void settle(uint64_t round, const std::vector<bool>& complete);

  double gamma_;
  bool started_ = false;
  bool failed_ = false;  // the last round returned an error
  uint64_t last_round_ = 0;
  std::vector<float> public_self_;  // x̂_i
  std::vector<Copy> copies_;        // in the mixing row's order
  std::vector<float> q_;            // this round's x_i - x̂_i, then Q of it
  std::vector<uint32_t> owe_copy_;  // out-neighbors that get x̂_i itself next round
  OutgoingModel public_out_;        // x̂_i itself, for those that asked
};

}  // namespace gossip::sgd

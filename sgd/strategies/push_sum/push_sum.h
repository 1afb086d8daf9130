#pragma once
// Push-sum gossip, SGP (Assran et al. 2019; Kempe et al. 2003). Each node keeps a
// numerator x_i and a weight w_i, pushes the share 1/(d_out + 1) of both to each
// out-neighbor of a directed, time-varying graph (by default the one-peer
// exponential graph), keeps one share and adds what arrives. The trainer trains on
// the de-biased z_i = x_i / w_i, as in the SGP reference code: x_i = z_i * w_i is
// rebuilt from the trained model at each round.
//
// Σ_i x_i and Σ_i w_i are invariant (counting messages in flight), so z_i tends to
// the average on any strongly connected sequence of graphs. A message is applied
// whole or not at all, so a lost one loses its x and w together and z stays right.
//
// With delay τ > 0 the message a node sends in round t is consumed by its receiver
// in round t + τ: τ rounds of local steps overlap with its flight.
//
// Every share is checked before it is added: a weight that is not finite or lies
// outside (1e-30, n], or values with NaN or Inf, leave the share out (counted and
// logged), so no peer can make a node's weight or model NaN. With --clip on, a
// de-biased model far from the node's own is clipped (sgd/strategies/push_sum/centered_clip.h), so
// no peer moves a node further than the clipping radius in a round; clipping gives up exact mass
// conservation, hence off by default.

#include <optional>
#include <vector>

#include "sgd/overlay/gossip_strategy.h"
#include "sgd/strategies/push_sum/centered_clip.h"

namespace gossip::sgd {

class PushSum final : public GossipStrategy {
 public:
  PushSum(NeighborExchange& exchange, const Overlay& overlay, GossipOptions options, uint64_t delay,
          bool clip = false)
      : GossipStrategy(exchange, overlay, options, /*lag=*/delay) {
    if (clip) clip_.emplace();
  }

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;

  double weight() const { return weight_; }
  StrategyState save_state() const override { return {{}, {{"push_sum.weight", weight_}}}; }
  Status load_state(const StrategyState& state) override;

 private:
  // Checks a neighbor's share (x, weight) and clips it in place; false: left out.
  bool admit(uint32_t from, uint64_t round, double weight, std::span<const float> self,
             std::vector<float>& x);

  double weight_ = 1.0;
  std::optional<CenteredClip> clip_;
  std::vector<float> numerator_;            // x_i
  std::vector<float> share_;                // what each out-neighbor gets
  std::vector<std::vector<float>> staged_;  // per in-neighbor: its message as it arrives
};

}  // namespace gossip::sgd

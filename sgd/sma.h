#pragma once
// Crossbow's synchronous model averaging (Koliousis et al., VLDB 2019): several
// learners per device, each with its own replica and a small batch, follow a central
// average model z. At every synchronization each learner j is pulled towards z by the
// correction c_j = alpha (w_j - z), and z moves by the sum of the corrections plus
// momentum: z <- z + sum_j c_j + mu (z - z_prev). The learners keep their corrected
// replicas (they are not reset to z), which is what lets small batches explore.
//
// In gossipd the learners are the trainers attached to one daemon; the strategy
// `sma` averages the nodes' central models across nodes like local SGD (the round
// runs on z). This class is the node's side, pure arithmetic.

#include <cstdint>
#include <span>
#include <vector>

namespace gossip::sgd {

class CentralModel {
 public:
  // alpha 0: 1 / the number of learners at each sync.
  CentralModel(double alpha, double momentum) : alpha_(alpha), momentum_(momentum) {}

  // At a sync point, with every learner's replica (all of one size): the first time,
  // z <- their mean; after that, corrects each learner in place and moves z. Returns
  // z, on which the round then runs in place.
  std::span<float> sync(std::span<const std::span<float>> learners);
  // Whether the learners take z after this round (true after the first sync only:
  // every learner starts from the same model).
  bool learners_take_central() const { return first_; }
  std::span<float> central() { return z_; }

 private:
  double alpha_, momentum_;
  bool first_ = true;
  std::vector<float> z_, previous_;
};

}  // namespace gossip::sgd

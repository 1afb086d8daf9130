#pragma once
// Crossbow's synchronous model averaging (Koliousis et al., VLDB 2019): several
// learners per device, each with its own replica and a small batch, follow a central
// average model z. At every synchronization z moves by the sum of the learners'
// corrections c_j = alpha (w_j - z) plus momentum, z <- z + sum_j c_j + mu (z - z_prev),
// and each learner is pulled towards the central model by the same factor. The
// learners keep their corrected replicas (they are not reset to z), which is what lets
// small batches explore.
//
// In gossipd the learners are the trainers attached to one daemon; the strategy `sma`
// averages the nodes' central models across nodes like local SGD (the round runs on
// z). The learners are corrected after the round, towards the central model the
// nodes agreed on, where Crossbow (one machine, nothing to wait for) corrects towards
// the z before its update: with one learner per node this makes sma local SGD
// exactly, rather than local SGD one round late. This class is the node's side, pure
// arithmetic.

#include <cstdint>
#include <span>
#include <vector>

namespace gossip::sgd {

class CentralModel {
 public:
  // alpha 0: 1 / the number of learners at each sync.
  CentralModel(double alpha, double momentum) : alpha_(alpha), momentum_(momentum) {}

  // Before the round, with every learner's replica (all of one size): the first time,
  // z <- their mean; after that, z moves by the learners' corrections and momentum.
  // Returns z, on which the round then runs in place.
  std::span<float> update(std::span<const std::span<float>> learners);
  // After the round: each learner is pulled towards z by alpha (the first time, every
  // learner takes z: they all start from one model).
  void correct(std::span<const std::span<float>> learners);
  // The round's result is another node's model (taken back into an elastic ring, or a
  // later round's): z is it, and its momentum starts again from it.
  void took(std::span<const float> z);

 private:
  float alpha(size_t learners) const;

  double alpha_, momentum_;
  bool first_ = true;
  std::vector<float> z_, previous_;
};

}  // namespace gossip::sgd

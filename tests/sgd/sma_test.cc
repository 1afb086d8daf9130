// Crossbow's SMA, the node's side (sgd/strategies/sma/sma.h): the arithmetic of one
// synchronization.
#include "sgd/strategies/sma/sma.h"

#include <gtest/gtest.h>

#include <span>
#include <vector>

namespace gossip::sgd {
namespace {

TEST(CentralModel, StartsFromTheMeanThenMovesByTheCorrectionsAndPullsTheLearners) {
  CentralModel z(0.25, 0.5);
  std::vector<float> a{1.0f, 2.0f}, b{3.0f, 6.0f};
  std::vector<std::span<float>> learners{a, b};
  auto first = z.update(learners);
  EXPECT_EQ(std::vector<float>(first.begin(), first.end()), (std::vector<float>{2.0f, 4.0f}));
  z.correct(learners);
  EXPECT_EQ(a, (std::vector<float>{2.0f, 4.0f})) << "after the first round every learner takes z";
  EXPECT_EQ(b, a);
  // The learners train: z moves by sum_j 0.25 (w_j - z) (and no momentum yet).
  a = {3.0f, 4.0f};  // a - z = (1, 0)
  b = {2.0f, 8.0f};  // b - z = (0, 4)
  auto second = z.update(learners);
  EXPECT_EQ(std::vector<float>(second.begin(), second.end()), (std::vector<float>{2.25f, 5.0f}));
  EXPECT_EQ(a, (std::vector<float>{3.0f, 4.0f})) << "the learners are corrected after the round";
  // The round averaged z with another node's; the learners are pulled towards that.
  second[0] = 2.5f;
  z.correct(learners);
  EXPECT_EQ(a, (std::vector<float>{2.875f, 4.25f}));
  EXPECT_EQ(b, (std::vector<float>{2.125f, 7.25f}));
  // Momentum: 0.5 (z - z_prev), z_prev = (2, 4) the z the second update started from.
  auto third = z.update(learners);
  EXPECT_FLOAT_EQ(third[0], 2.5f + 0.0f + 0.25f);
  EXPECT_FLOAT_EQ(third[1], 5.0f + 0.375f + 0.5f);
}

// A round whose result is the members' model (this node taken back into the ring, or
// a later round's): the next update's momentum starts from it, rather than kicking z
// by the jump from this node's own last z.
TEST(CentralModel, AModelTakenFromTheMembersRestartsTheMomentum) {
  CentralModel z(0.5, 0.9);
  std::vector<float> a{1.0f};
  std::vector<std::span<float>> learners{a};
  z.update(learners);
  z.correct(learners);
  auto second = z.update(learners);  // no change: z stays 1
  second[0] = 100.0f;                // the round's result: the members' z
  z.took(second);
  z.correct(learners);
  a = {100.0f};  // the learner at z: no correction, and no momentum from 1 to 100
  EXPECT_FLOAT_EQ(z.update(learners)[0], 100.0f);
}

TEST(CentralModel, AlphaZeroIsOneOverTheLearnersAndOneLearnerIsLocalSgd) {
  CentralModel four(0.0, 0.0);
  std::vector<float> a{0.0f}, b{0.0f}, c{0.0f}, d{0.0f};
  std::vector<std::span<float>> learners{a, b, c, d};
  four.update(learners);
  four.correct(learners);
  a = {4.0f};
  EXPECT_FLOAT_EQ(four.update(learners)[0], 1.0f);  // z moves to the learners' mean
  four.correct(learners);
  EXPECT_FLOAT_EQ(a[0], 3.25f);  // pulled a quarter of the way to z = 1
  // One learner: alpha 1, z is the learner's model, and after the round the learner
  // takes whatever the nodes averaged z to.
  CentralModel one(0.0, 0.0);
  std::vector<float> w{5.0f};
  std::vector<std::span<float>> alone{w};
  one.update(alone);
  one.correct(alone);
  w = {7.0f};
  auto z = one.update(alone);
  EXPECT_FLOAT_EQ(z[0], 7.0f);
  z[0] = 6.0f;  // the nodes' average
  one.correct(alone);
  EXPECT_FLOAT_EQ(w[0], 6.0f);
}

}  // namespace
}  // namespace gossip::sgd

// Crossbow's SMA, the node's side (sgd/sma.h): the arithmetic of one synchronization.
#include "sgd/sma.h"

#include <gtest/gtest.h>

#include <span>
#include <vector>

namespace gossip::sgd {
namespace {

TEST(CentralModel, StartsFromTheMeanThenCorrectsLearnersAndMovesWithMomentum) {
  CentralModel z(0.25, 0.5);
  std::vector<float> a{1.0f, 2.0f}, b{3.0f, 6.0f};
  std::vector<std::span<float>> learners{a, b};
  auto first = z.sync(learners);
  EXPECT_EQ(std::vector<float>(first.begin(), first.end()), (std::vector<float>{2.0f, 4.0f}));
  EXPECT_TRUE(z.learners_take_central()) << "after the first round every learner starts from z";
  // The learners move on; then c_j = 0.25 (w_j - z), w_j -= c_j, z += sum c_j + 0.5 (z - z_prev).
  a = {3.0f, 4.0f};  // a - z = (1, 0)
  b = {2.0f, 8.0f};  // b - z = (0, 4)
  auto second = z.sync(learners);
  EXPECT_FALSE(z.learners_take_central()) << "later the learners keep their corrected replicas";
  EXPECT_EQ(a, (std::vector<float>{2.75f, 4.0f}));
  EXPECT_EQ(b, (std::vector<float>{2.0f, 7.0f}));
  EXPECT_EQ(std::vector<float>(second.begin(), second.end()), (std::vector<float>{2.25f, 5.0f}));
  // The round replaced z with the nodes' average; the momentum is the change since then.
  second[0] = 2.5f;  // as if the other nodes' central models pulled it up
  a = {2.5f, 5.0f};
  b = {2.5f, 5.0f};
  auto third = z.sync(learners);
  // z_prev = (2, 4) was the z before the second sync: momentum 0.5 * (2.5 - 2, 5 - 4).
  EXPECT_FLOAT_EQ(third[0], 2.5f + 0.0f + 0.25f);
  EXPECT_FLOAT_EQ(third[1], 5.0f + 0.0f + 0.5f);
}

TEST(CentralModel, AlphaZeroMeansOneOverTheLearners) {
  CentralModel z(0.0, 0.0);
  std::vector<float> a{0.0f}, b{0.0f}, c{0.0f}, d{0.0f};
  std::vector<std::span<float>> learners{a, b, c, d};
  z.sync(learners);
  a = {4.0f};
  auto moved = z.sync(learners);
  EXPECT_FLOAT_EQ(a[0], 3.0f);      // pulled a quarter of the way
  EXPECT_FLOAT_EQ(moved[0], 1.0f);  // z moves to the learners' mean
}

}  // namespace
}  // namespace gossip::sgd

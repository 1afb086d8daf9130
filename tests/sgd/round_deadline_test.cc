// The adaptive round deadline (sgd/round_deadline.h): the ceiling until enough
// rounds were timed, then the factor times the longest recent round, clamped.

#include "sgd/round_deadline.h"

#include <gtest/gtest.h>

namespace gossip::sgd {
namespace {

using D = RoundDeadline::Duration;

TEST(RoundDeadline, TheCeilingHoldsUntilEnoughRoundsWereTimed) {
  RoundDeadline d(D(60), 3, D(1));
  for (size_t i = 0; i + 1 < RoundDeadline::kWarmUp; ++i) {
    d.completed(D(0.01));
    EXPECT_EQ(d.next(), D(60));
  }
  d.completed(D(0.01));
  EXPECT_TRUE(d.adapting());
  EXPECT_EQ(d.next(), D(1)) << "3 x 10 ms is under the floor";
}

TEST(RoundDeadline, ItFollowsTheLongestRecentRoundWithinFloorAndCeiling) {
  RoundDeadline d(D(60), 3, D(1));
  for (int i = 0; i < 20; ++i) d.completed(D(0.5));
  d.completed(D(2));  // a round that waited for a peer's evaluation
  EXPECT_DOUBLE_EQ(d.next().count(), 6.0);
  for (size_t i = 0; i < RoundDeadline::kWindow; ++i) d.completed(D(0.5));
  EXPECT_DOUBLE_EQ(d.next().count(), 1.5) << "the long round left the window";
  for (int i = 0; i < 10; ++i) d.completed(D(30));
  EXPECT_EQ(d.next(), D(60)) << "never past the ceiling";
}

// The gossip patience's ask (sgd/overlay/neighbor_exchange.h) follows the 90th
// percentile: one long wait in the last rounds (a death, a pause) does not hold it up
// once ten others are shorter.
TEST(RoundDeadline, AQuantileLeavesOutTheLongestRoundsOfTheWindow) {
  RoundDeadline d(D(60), 3, D(0.1), 0.9);
  for (int i = 0; i < 9; ++i) d.completed(D(0.2));
  d.completed(D(2));
  EXPECT_DOUBLE_EQ(d.next().count(), 6.0) << "ten rounds: the 90th percentile is the longest";
  d.completed(D(0.2));
  EXPECT_NEAR(d.next().count(), 0.6, 1e-12) << "eleven: it is not";
  for (int i = 0; i < 7; ++i) d.completed(D(1));  // 8 of 18 long: the 90th is a 1 s one
  EXPECT_DOUBLE_EQ(d.next().count(), 3.0);
}

TEST(RoundDeadline, FactorZeroIsTheFixedTimeout) {
  RoundDeadline d(D(60), 0, D(1));
  for (int i = 0; i < 100; ++i) d.completed(D(0.01));
  EXPECT_FALSE(d.adapting());
  EXPECT_EQ(d.next(), D(60));
}

TEST(RoundDeadline, AFloorAboveTheCeilingIsTheCeiling) {
  RoundDeadline d(D(2), 3, D(5));
  for (int i = 0; i < 10; ++i) d.completed(D(0.01));
  EXPECT_EQ(d.next(), D(2));
}

}  // namespace
}  // namespace gossip::sgd

// Where the time goes, on a clock the test sets: trainers' waits against their time
// attached, open intervals counted up to now, rounds timed into the histogram with
// the bytes they sent and the share of the trainers' time they left to training.

#include "daemon/time_accounts.h"

#include <gtest/gtest.h>

namespace gossip::daemon {
namespace {

using namespace std::chrono_literals;
using Clock = TimeAccounts::Clock;

TEST(TimeAccounts, WaitsAgainstTimeAttachedWithOpenIntervalsUpToNow) {
  TimeAccounts t(2);
  const Clock::time_point t0{};
  t.attached(0, t0);
  t.attached(1, t0 + 1s);
  t.wait_begins(0, t0 + 2s);
  t.wait_begins(0, t0 + 3s);  // already waiting: the first start counts
  t.wait_ends(0, t0 + 4s);
  t.wait_ends(0, t0 + 5s);  // not waiting: nothing
  t.wait_begins(1, t0 + 6s);
  auto s = t.snapshot(t0 + 7s);
  EXPECT_DOUBLE_EQ(s.trainer_wait_seconds, 2 + 1) << "2 s closed, 1 s open";
  EXPECT_DOUBLE_EQ(s.trainer_attached_seconds, 7 + 6);
  t.detached(1, t0 + 8s);     // ends its wait too
  t.wait_begins(5, t0 + 8s);  // no such slot: ignored
  s = t.snapshot(t0 + 10s);
  EXPECT_DOUBLE_EQ(s.trainer_wait_seconds, 2 + 2);
  EXPECT_DOUBLE_EQ(s.trainer_attached_seconds, 10 + 7);
}

TEST(TimeAccounts, RoundsFillTheHistogramWithTheirBytesAndOverlap) {
  TimeAccounts t(2);
  const Clock::time_point t0{};
  t.attached(0, t0);
  t.attached(1, t0);
  // A blocking round of 20 ms: both trainers wait for all of it.
  t.wait_begins(0, t0);
  t.wait_begins(1, t0);
  t.round_begins(t0, 2, 1000);
  t.wait_ends(0, t0 + 20ms);
  t.wait_ends(1, t0 + 20ms);
  t.round_ends(t0 + 20ms, 1500);
  auto s = t.snapshot(t0 + 20ms);
  EXPECT_EQ(s.rounds, 1u);
  EXPECT_NEAR(s.last_round_seconds, 0.02, 1e-9);
  EXPECT_EQ(s.last_round_payload_bytes, 500u);
  EXPECT_NEAR(s.last_round_overlap, 0.0, 1e-9);
  EXPECT_EQ(s.round_buckets[4], 1u) << "(0.01, 0.025]";
  // A round under the trainers' compute (async): answered at once, 2 s long.
  t.round_begins(t0 + 1s, 2, 1500);
  t.round_ends(t0 + 3s, 1600);
  s = t.snapshot(t0 + 3s);
  EXPECT_EQ(s.rounds, 2u);
  EXPECT_NEAR(s.last_round_overlap, 1.0, 1e-9);
  EXPECT_NEAR(s.round_seconds, 2.02, 1e-9);
  EXPECT_EQ(s.round_buckets[10], 1u) << "(1, 2.5]";
  // A round that outlasts every bucket goes to +Inf; a round_ends without a start, nowhere.
  t.round_begins(t0 + 4s, 1, 0);
  t.round_ends(t0 + 64s, 0);
  t.round_ends(t0 + 65s, 0);
  s = t.snapshot(t0 + 65s);
  EXPECT_EQ(s.rounds, 3u);
  EXPECT_EQ(s.round_buckets.back(), 1u);
}

}  // namespace
}  // namespace gossip::daemon

// --dead-after-factor (peers/dead_after.h): each peer's bound follows the longest
// silence between its messages (peers/traffic.h), within the floor and the ceiling;
// a silence that ended in a restart is not learnt from; until 8 silences were
// measured, and with factor 0, the bound is --dead-after.

#include "peers/dead_after.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace gossip::peers {
namespace {

using namespace std::chrono_literals;

// `n` messages from peer 7, `gap` apart; `starts`: the last one is a hello.
void messages(TrafficCounters& t, int n, std::chrono::milliseconds gap, bool starts = false) {
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(gap);
    t.count_recv(7, 0, 64, starts && i + 1 == n);
  }
}

TEST(DeadAfter, FollowsThePeersLongestSilenceOnceMeasured) {
  TrafficCounters t({7});
  DeadAfter d(3000ms);
  d.factor = 3;
  d.floor = 100ms;
  d.ceiling = 60000ms;
  t.count_recv(7, 0, 64);  // the first message ends no silence
  messages(t, 5, 5ms);
  EXPECT_EQ(t.gaps(7), 5u);
  EXPECT_EQ(d.for_peer(t, 7), 3000ms) << "not yet measured: --dead-after";
  messages(t, 3, 60ms);
  ASSERT_EQ(t.gaps(7), 8u);
  const auto bound = d.for_peer(t, 7);
  EXPECT_GE(bound, 180ms) << "3 times the longest silence, 60 ms";
  EXPECT_LT(bound, 600ms);
  EXPECT_FALSE(d.dead(t, 7, 150));
  EXPECT_TRUE(d.dead(t, 7, 1000)) << "a dead peer is found well before --dead-after";
  EXPECT_FALSE(d.dead(t, 7, proto::ipc::kNeverHeard)) << "never heard is not dead";

  DeadAfter fixed(3000ms);
  EXPECT_EQ(fixed.for_peer(t, 7), 3000ms) << "factor 0: --dead-after";
}

// A gossip peer heartbeats only its neighbors: one that becomes a neighbor (a join, a
// new coordinator) had long silences here, which would set its bound near the
// ceiling. Once forgotten, they and the silence under way are not learnt from.
TEST(DeadAfter, ForgottenSilencesAreNotLearntFrom) {
  TrafficCounters t({7});
  DeadAfter d(3000ms);
  d.factor = 3;
  d.floor = 50ms;
  d.ceiling = 60000ms;
  t.count_recv(7, 0, 64);
  messages(t, 8, 100ms);
  ASSERT_GE(d.for_peer(t, 7), 300ms);
  t.forget_gaps(7);
  EXPECT_EQ(t.gaps(7), 0u);
  EXPECT_EQ(d.for_peer(t, 7), 3000ms) << "nothing measured: --dead-after";
  std::this_thread::sleep_for(250ms);
  messages(t, 9, 5ms);  // the first ends the 250 ms silence under way: not learnt
  EXPECT_EQ(t.gaps(7), 8u);
  EXPECT_LT(d.for_peer(t, 7), 400ms) << "3 times about 5 ms, not 3 times 250 ms";
}

TEST(DeadAfter, IsBoundedByTheFloorAndTheCeiling) {
  TrafficCounters t({7});
  t.count_recv(7, 0, 64);
  messages(t, 8, 1ms);
  DeadAfter d(3000ms);
  d.factor = 2;
  d.floor = 500ms;
  d.ceiling = 800ms;
  EXPECT_EQ(d.for_peer(t, 7), 500ms) << "short silences: the floor";
  messages(t, 1, 450ms);
  EXPECT_EQ(d.for_peer(t, 7), 800ms) << "2 x 450 ms: the ceiling";
}

// A live peer that waits sends a heartbeat a period and nothing else: no bound, learnt
// or fixed, may be shorter than two periods, whatever the floor.
TEST(DeadAfter, IsNeverShorterThanTwoHeartbeats) {
  TrafficCounters t({7});
  t.count_recv(7, 0, 64);
  messages(t, 8, 1ms);  // a fast round's chunks, back to back
  DeadAfter d(3000ms);
  d.factor = 3;
  d.floor = 500ms;
  d.heartbeat = 1000ms;
  EXPECT_EQ(d.for_peer(t, 7), 2000ms);
  EXPECT_FALSE(d.dead(t, 7, 1500)) << "a peer between two heartbeats is alive";
  EXPECT_TRUE(d.dead(t, 7, 2500));
  d.factor = 0;
  d.fixed = 1000ms;
  EXPECT_EQ(d.for_peer(t, 7), 2000ms) << "a fixed bound too";
  d.heartbeat = 200ms;
  EXPECT_EQ(d.for_peer(t, 7), 1000ms) << "heartbeats well inside the bound leave it";
}

TEST(DeadAfter, ARestartIsNotASilenceToLearnFrom) {
  TrafficCounters t({7});
  t.count_recv(7, 0, 64);
  messages(t, 8, 2ms);
  messages(t, 1, 300ms, /*starts=*/true);  // a hello after 300 ms: the peer restarted
  EXPECT_EQ(t.gaps(7), 8u);
  EXPECT_LT(t.longest_gap_ms(7), 100u);
  messages(t, 1, 200ms);
  EXPECT_GE(t.longest_gap_ms(7), 200u) << "a live peer's silence is";
}

}  // namespace
}  // namespace gossip::peers

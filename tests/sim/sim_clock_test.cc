// The simulation's clock (sim/sim_clock.h) and the in-memory hub's link model on it:
// time advances only to events, waits end at exact virtual times, messages arrive when
// the link model says and in order, and a run is the same every time.

#include "sim/sim_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "peers/memory_channel.h"
#include "peers/router.h"

namespace gossip::sim {
namespace {

using namespace std::chrono_literals;

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

TEST(SimClock, SleepsEndAtTheirVirtualTimeWithoutWaitingForReal) {
  SimClock clock;
  std::vector<std::string> order;
  const auto real_start = std::chrono::steady_clock::now();
  clock.run({{"slow",
              [&] {
                clock.sleep_for(3600s);
                order.push_back("slow " + std::to_string(seconds(clock.elapsed())));
              }},
             {"fast", [&] {
                clock.sleep_for(2s);
                order.push_back("fast " + std::to_string(seconds(clock.elapsed())));
                clock.sleep_for(1s);
                order.push_back("fast " + std::to_string(seconds(clock.elapsed())));
              }}});
  EXPECT_EQ(order,
            (std::vector<std::string>{"fast 2.000000", "fast 3.000000", "slow 3600.000000"}));
  EXPECT_EQ(clock.elapsed(), 3600s);
  // An hour of virtual time, in far less than a second of real time.
  EXPECT_LT(std::chrono::steady_clock::now() - real_start, 5s);
}

// A second run() on the same clock goes on from where the first ended; a timer the
// first left behind (a wait that ended early) wakes nobody in the second.
TEST(SimClock, ASecondRunStartsWhereTheFirstEndedWithoutItsTimers) {
  SimClock clock;
  Signal signal(clock);
  bool flag = false;
  clock.run({{"waiter", [&] { clock.wait_until(signal, clock.now() + 10s, [&] { return flag; }); }},
             {"setter", [&] {
                clock.sleep_for(1s);
                flag = true;
                signal.notify();
              }}});
  EXPECT_EQ(clock.elapsed(), 1s);  // the waiter's 10 s timer is left in the queue
  // The sleeper takes the waiter's slot and wait number: the old timer (due at 10 s)
  // must not end its 20 s sleep.
  Duration slept{};
  clock.run({{"sleeper", [&] {
                clock.sleep_for(20s);
                slept = clock.elapsed();
              }}});
  EXPECT_EQ(slept, 21s);
}

TEST(SimClock, AWaitEndsWhenItsSignalMakesItReadyOrAtItsDeadline) {
  SimClock clock;
  Signal signal(clock);
  bool flag = false;
  Duration woke_at{}, timed_out_at{};
  bool woke = false, timed_out = true;
  clock.run({{"waiter",
              [&] {
                woke = clock.wait_until(signal, clock.now() + 5s, [&] { return flag; });
                woke_at = clock.elapsed();
                // Nobody sets it again: this one ends at its deadline, not ready.
                flag = false;
                timed_out = clock.wait_until(signal, clock.now() + 250ms, [&] { return flag; });
                timed_out_at = clock.elapsed();
              }},
             {"setter", [&] {
                clock.sleep_for(1s);
                signal.notify();  // not ready yet: the waiter goes back to waiting
                clock.sleep_for(1s);
                flag = true;
                signal.notify();
              }}});
  EXPECT_TRUE(woke);
  EXPECT_EQ(woke_at, 2s);
  EXPECT_FALSE(timed_out);
  EXPECT_EQ(timed_out_at, 2250ms);
}

TEST(SimClock, ScheduledCallbacksRunInTimeThenSchedulingOrder) {
  SimClock clock;
  std::vector<int> seen;
  std::vector<Duration> when;
  clock.run({{"scheduler", [&] {
                const TimePoint t0 = clock.now();
                for (int i : {3, 1, 2})
                  clock.at(t0 + i * 1s, [&, i] {
                    seen.push_back(i);
                    when.push_back(clock.elapsed());
                  });
                clock.at(t0 + 2s, [&] { seen.push_back(20); });  // same time as 2: after it
                clock.sleep_for(10s);
              }}});
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 20, 3}));
  EXPECT_EQ(when, (std::vector<Duration>{1s, 2s, 3s}));
}

// Many tasks that wait on each other's signals with timers in between give the same
// interleaving every time: nothing depends on how the OS schedules the threads.
std::vector<std::string> ping_pong_trace() {
  SimClock clock;
  constexpr int kTasks = 8;
  std::vector<std::unique_ptr<Signal>> signals;
  std::vector<int> tokens(kTasks, 0);
  for (int i = 0; i < kTasks; ++i) signals.push_back(std::make_unique<Signal>(clock));
  std::vector<std::string> trace;
  std::vector<SimClock::Task> tasks;
  for (int i = 0; i < kTasks; ++i)
    tasks.push_back({"task " + std::to_string(i), [&, i] {
                       for (int k = 0; k < 20; ++k) {
                         const int next = (i * 3 + k) % kTasks;
                         ++tokens[next];
                         signals[next]->notify();
                         clock.sleep_for(std::chrono::microseconds(100 * ((i + k) % 5)));
                         const bool got = clock.wait_until(*signals[i], clock.now() + 1ms,
                                                           [&] { return tokens[i] > 0; });
                         if (got) --tokens[i];
                         trace.push_back(std::to_string(i) + (got ? "+" : "-") +
                                         std::to_string(clock.elapsed().count()));
                       }
                     }});
  clock.run(std::move(tasks));
  return trace;
}

TEST(SimClock, TheSameTasksGiveTheSameRun) {
  const auto first = ping_pong_trace();
  ASSERT_EQ(first.size(), 160u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ping_pong_trace(), first) << "run " << i;
}

TEST(SimClockDeathTest, ALoopThatWaitsForTimeWithoutWaitingIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SimClock clock;
        clock.run({{"spinner", [&] {
                      const TimePoint until = clock.now() + 1s;
                      while (clock.now() < until) {
                      }
                    }}});
      },
      "task spinner read the time .* without waiting");
}

TEST(SimClockDeathTest, TasksThatAllWaitForeverAreNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SimClock clock;
        Signal never(clock);
        clock.run(
            {{"stuck", [&] { clock.wait_until(never, TimePoint::max(), [] { return false; }); }},
             {"done", [] {}}});
      },
      "every task waits without a deadline .*: stuck");
}

// Messages between in-memory channels on the simulated clock: each arrives when the
// sender's uplink has sent it and the link's latency has passed, in the order sent.
TEST(SimulatedLinks, AMessageArrivesAfterItsUplinkTimeAndLatencyInOrder) {
  SimClock clock;
  peers::LinkModel links;
  links.all.latency = 5ms;
  links.all.jitter = 3ms;
  links.all.bytes_per_s = 1e6;  // 1 MB/s: a 10 kB payload takes about 10 ms to send
  links.links[{0, 2}] = peers::Link{50ms, {}, 0};
  peers::MemoryHub hub(clock, links);
  auto a = hub.join(0, {1, 2});
  auto b = hub.join(1, {0});
  auto c = hub.join(2, {0});
  peers::Router rb(*b), rc(*c);
  std::vector<std::pair<uint64_t, Duration>> at_b;
  Duration at_c{};
  auto sb = rb.subscribe({proto::Kind::kModelChunk}, [&](peers::Incoming& in) {
    at_b.emplace_back(in.round(), clock.elapsed());
  });
  auto sc =
      rc.subscribe({proto::Kind::kHeartbeat}, [&](peers::Incoming&) { at_c = clock.elapsed(); });
  const std::vector<std::byte> payload(10'000);
  clock.run({{"sender",
              [&] {
                for (uint64_t r = 0; r < 5; ++r) {
                  proto::ModelChunk h;
                  h.numel = payload.size() / 4;
                  ASSERT_TRUE(a->send_zero_copy(1, r, h, payload).is_ok());
                }
                ASSERT_TRUE(a->send(2, 0, proto::Heartbeat{}).is_ok());
              }},
             {"receiver b",
              [&] {
                while (at_b.size() < 5 && clock.elapsed() < 10s) rb.poll(100ms);
              }},
             {"receiver c", [&] {
                while (at_c == Duration{} && clock.elapsed() < 10s) rc.poll(100ms);
              }}});
  ASSERT_EQ(at_b.size(), 5u);
  for (size_t i = 0; i < at_b.size(); ++i) {
    EXPECT_EQ(at_b[i].first, i) << "in the order sent";
    // Message i left the uplink after i + 1 payloads (and their framing): 10 ms each.
    const double sent = 0.010 * static_cast<double>(i + 1);
    EXPECT_GE(seconds(at_b[i].second), sent + 0.005) << "message " << i;
    EXPECT_LE(seconds(at_b[i].second), sent + 0.0081 + 0.001) << "message " << i;
  }
  // The link to node 2 has its own model: 50 ms, no jitter, no bandwidth limit.
  EXPECT_EQ(at_c, 50ms);
  EXPECT_EQ(b->traffic().totals().payload_recv, 5 * payload.size());
}

// A partition holds what crosses it until it heals, in order; within a side nothing
// changes, and after the heal messages go straight again.
TEST(SimulatedLinks, APartitionHoldsWhatCrossesItUntilItHeals) {
  SimClock clock;
  peers::LinkModel links;
  links.all.latency = 1ms;
  peers::Outage cut;
  cut.from = 100ms;
  cut.until = 500ms;
  cut.side = {0, 1};
  links.outages.push_back(cut);
  peers::MemoryHub hub(clock, links);
  auto a = hub.join(0, {1, 2});
  auto b = hub.join(1, {0});
  auto c = hub.join(2, {0});
  peers::Router rb(*b), rc(*c);
  std::vector<Duration> at_b;
  std::vector<std::pair<uint64_t, Duration>> at_c;
  auto sb = rb.subscribe({proto::Kind::kHeartbeat},
                         [&](peers::Incoming&) { at_b.push_back(clock.elapsed()); });
  auto sc = rc.subscribe({proto::Kind::kHeartbeat}, [&](peers::Incoming& in) {
    at_c.emplace_back(in.round(), clock.elapsed());
  });
  clock.run({{"sender",
              [&] {
                // Round r at r x 150 ms: 0 before the cut, 1 and 2 during it, 4 after.
                for (uint64_t r : {0, 1, 2, 4}) {
                  clock.sleep_until(TimePoint(SimClock::kStart) + r * 150ms);
                  ASSERT_TRUE(a->send(1, r, proto::Heartbeat{}).is_ok());
                  ASSERT_TRUE(a->send(2, r, proto::Heartbeat{}).is_ok());
                }
              }},
             {"receiver b",
              [&] {
                while (at_b.size() < 4 && clock.elapsed() < 10s) rb.poll(100ms);
              }},
             {"receiver c", [&] {
                while (at_c.size() < 4 && clock.elapsed() < 10s) rc.poll(100ms);
              }}});
  ASSERT_EQ(at_b.size(), 4u);
  EXPECT_EQ(at_b, (std::vector<Duration>{1ms, 151ms, 301ms, 601ms})) << "one side: no change";
  ASSERT_EQ(at_c.size(), 4u);
  EXPECT_EQ(at_c[0], std::make_pair(uint64_t{0}, Duration(1ms)));
  EXPECT_EQ(at_c[1], std::make_pair(uint64_t{1}, Duration(501ms))) << "held until the heal";
  EXPECT_EQ(at_c[2], std::make_pair(uint64_t{2}, Duration(501ms))) << "in order";
  EXPECT_EQ(at_c[3], std::make_pair(uint64_t{4}, Duration(601ms)));
}

// Two partitions between the same nodes, the second beginning before the first ends:
// what the first held is then held by the second too.
TEST(SimulatedLinks, WhatOnePartitionHeldTheNextOneHoldsToo) {
  SimClock clock;
  peers::LinkModel links;
  links.all.latency = 1ms;
  peers::Outage first, second;
  first.from = 0ms;
  first.until = 200ms;
  first.side = {0, 1};
  second.from = 100ms;
  second.until = 400ms;
  second.side = {0};
  links.outages = {first, second};
  peers::MemoryHub hub(clock, links);
  auto a = hub.join(0, {2});
  auto c = hub.join(2, {0});
  peers::Router rc(*c);
  Duration at{};
  auto sc =
      rc.subscribe({proto::Kind::kHeartbeat}, [&](peers::Incoming&) { at = clock.elapsed(); });
  clock.run({{"sender", [&] { ASSERT_TRUE(a->send(2, 0, proto::Heartbeat{}).is_ok()); }},
             {"receiver", [&] {
                while (at == Duration{} && clock.elapsed() < 10s) rc.poll(100ms);
              }}});
  EXPECT_EQ(at, 401ms);
}

}  // namespace
}  // namespace gossip::sim

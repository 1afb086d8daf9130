// The parameter-server strategy (sgd/strategies/ps/) in the in-process world
// (peers/memory_channel.h): several nodes of one process, each a worker and some of them servers,
// through the real router, wire encoding and strategy, with queues instead of sockets. Every node
// runs on a thread of its own; between its rounds it calls progress() as the daemon's
// sync thread does, so its shards keep being served while its "trainer" computes.

#include "sgd/strategies/ps/parameter_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "compression/codec_spec.h"
#include "peers/memory_channel.h"
#include "peers/router.h"
#include "sgd/registry.h"

namespace gossip::sgd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Mode = ParameterServerOptions::Mode;
constexpr uint64_t kLayout = 0x5eed;

float initial(uint32_t i, size_t e) {
  return static_cast<float>(i) +
         std::sin(0.01f * static_cast<float>(e) * static_cast<float>(i + 1));
}
// What node i's local steps change in round r.
float change(uint32_t i, uint64_t r, size_t e) {
  return 0.001f * static_cast<float>((i + 1) * (e % 7 + 1)) + 0.0001f * static_cast<float>(r);
}

struct Node {
  std::unique_ptr<peers::MemoryChannel> channel;
  std::unique_ptr<peers::Router> router;
  std::unique_ptr<Strategy> strategy;
  std::vector<float> x;
  std::vector<std::vector<float>> after;  // the model after each round
  std::vector<uint64_t> rounds;           // the rounds it ran
  std::string failure;
  std::vector<double> done_at;  // seconds since start, per round
};

struct Options {
  uint32_t nodes = 4;
  ParameterServerOptions ps;
  size_t numel = 1001;
  uint64_t chunk_elems = 100;
  std::string codec = "none";
  std::chrono::milliseconds dead_after{2000};
  // The last `late` nodes join by seeds (daemon/admission.h): no member lists them, and
  // each member takes them in before its round `join_at`, then they start.
  uint32_t late = 0;
  uint64_t join_at = 0;
  // Node `liar` runs its rounds `lie` clocks on (a worker names its own clocks).
  uint32_t liar = UINT32_MAX;
  uint64_t lie = 0;
  // Node -> how long it answers its peers before its first round (a trainer that
  // starts late: a slow import, a loaded machine).
  std::map<uint32_t, std::chrono::milliseconds> start_late;
};

ParameterServer& ps(Node& n) { return dynamic_cast<ParameterServer&>(*n.strategy); }

class World {
 public:
  explicit World(const Options& o) : options_(o) {
    codec_ = compression::make_codec(o.codec).value();
    const StrategyDescriptor* d = find_strategy("ps");
    EXPECT_TRUE(d && d->fabric == Fabric::kServers);
    nodes_.resize(o.nodes);
    for (uint32_t i = 0; i < o.nodes; ++i) {
      std::vector<uint32_t> peers;
      for (uint32_t j = 0; j < o.nodes; ++j)
        if (j != i && (j < members() || i >= members())) peers.push_back(j);
      Node& n = nodes_[i];
      n.channel = hub_.join(i, peers);
      n.router = std::make_unique<peers::Router>(*n.channel);
      StrategyResources r;  // as the sync worker fills it (daemon/sync_worker.cc)
      r.router = n.router.get();
      r.codec = codec_.codec.get();
      r.error_feedback = codec_.codec->biased();
      r.gossip.chunk_elems = o.chunk_elems;
      r.heartbeat = 50ms;
      r.dead_after = o.dead_after;
      r.params.ps = o.ps;
      std::string detail;
      auto made = d->make(r, &detail);
      EXPECT_TRUE(made.is_ok()) << made.status().message();
      n.strategy = std::move(made).value();
      n.strategy->set_layout_fingerprint(kLayout);
      n.x.resize(o.numel);
      for (size_t e = 0; e < o.numel; ++e) n.x[e] = initial(i, e);
    }
  }

  // Node i runs rounds [0, rounds_of(i)) (or from where round_to_run moves it), adding
  // change(i, r) before each round after the first and calling progress() for pause(i)
  // between rounds; then it keeps serving until every node is done (or stops at once
  // when `vanish` says so). A late node starts once every member took it in.
  void run(const std::function<uint64_t(uint32_t)>& rounds_of,
           const std::function<std::chrono::milliseconds(uint32_t)>& pause = nullptr,
           const std::function<bool(uint32_t)>& vanish = nullptr,
           std::chrono::milliseconds round_timeout = 10s) {
    std::atomic<uint32_t> finished{0}, took_in{0};
    const auto start = Clock::now();
    std::vector<std::jthread> threads;
    for (uint32_t i = 0; i < options_.nodes; ++i)
      threads.emplace_back([&, i] {
        Node& n = nodes_[i];
        if (i >= members()) {
          const auto until = Clock::now() + round_timeout;
          while (took_in.load() < members() && Clock::now() < until) std::this_thread::yield();
          if (took_in.load() < members()) n.failure = "the members did not take it in";
        }
        if (const auto late = options_.start_late.find(i); late != options_.start_late.end()) {
          const auto until = Clock::now() + late->second;
          do n.strategy->progress(0, n.x.size(), 2ms);
          while (Clock::now() < until);
        }
        const uint64_t off = i == options_.liar ? options_.lie : 0;
        for (uint64_t r = 0; r < rounds_of(i) && n.failure.empty();
             r = n.strategy->round_to_run(r + off + 1) - off) {
          if (i < members() && r == options_.join_at && options_.late > 0) {
            for (uint32_t j = members(); j < options_.nodes; ++j) {
              Status st = n.channel->add_peer({j, ""});
              if (st) st = ps(n).add_member(j, "");
              if (!st) n.failure = "taking node " + std::to_string(j) + " in: " + st.message();
            }
            ++took_in;
          }
          if (r > 0)
            for (size_t e = 0; e < n.x.size(); ++e) n.x[e] += change(i, r, e);
          RoundOptions o;
          o.deadline = Clock::now() + round_timeout;
          if (Status st = n.strategy->synchronize(n.x, r + off, o); !st) {
            n.failure = "round " + std::to_string(r) + ": " + st.message();
            break;
          }
          n.after.push_back(n.x);
          n.rounds.push_back(r);
          n.done_at.push_back(std::chrono::duration<double>(Clock::now() - start).count());
          const auto until = Clock::now() + (pause ? pause(i) : 0ms);
          do n.strategy->progress(r + 1, n.x.size(), 2ms);
          while (Clock::now() < until);
        }
        ++finished;
        if (vanish && vanish(i)) {
          hub_.cut(i);
          return;
        }
        while (finished.load() < options_.nodes) n.strategy->progress(0, n.x.size(), 2ms);
      });
  }

  Node& node(uint32_t i) { return nodes_[i]; }
  peers::MemoryHub& hub() { return hub_; }

 private:
  uint32_t members() const { return options_.nodes - options_.late; }

  Options options_;
  peers::MemoryHub hub_;
  compression::CodecSpec codec_;
  std::vector<Node> nodes_;
};

TEST(ParameterServerUnits, ShardsModesAndOptimizers) {
  uint64_t covered = 0;
  for (uint32_t s = 0; s < 3; ++s) {
    const Shard sh = shard_of(1001, 3, s);
    EXPECT_EQ(sh.offset, covered);
    covered += sh.numel;
  }
  EXPECT_EQ(covered, 1001u);
  EXPECT_EQ(shard_of(1001, 3, 0).numel, 334u);
  uint64_t s = 0;
  EXPECT_EQ(parse_ps_mode("ssp:4", &s).value(), Mode::kSsp);
  EXPECT_EQ(s, 4u);
  EXPECT_EQ(parse_ps_mode("bsp", &s).value(), Mode::kBsp);
  for (const char* bad : {"ssp", "ssp:", "ssp:x", "sync", "ssp:-1"}) {
    auto m = parse_ps_mode(bad, &s);
    ASSERT_FALSE(m.is_ok()) << bad;
    EXPECT_NE(m.status().message().find("ssp:S"), std::string::npos) << m.status().message();
  }
  // sgd with lr 1 adds the update; Adam's first step moves each coordinate by lr.
  std::vector<float> x{1.0f, 2.0f}, u{0.5f, -0.25f};
  ServerOptimizer sgd({}, 2);
  sgd.step(x, u);
  EXPECT_EQ(x, (std::vector<float>{1.5f, 1.75f}));
  ServerOptimizerConfig adam_config;
  adam_config.kind = ServerOptimizerConfig::Kind::kAdam;
  adam_config.lr = 0.1;
  ServerOptimizer adam(adam_config, 2);
  adam.step(x, u);
  EXPECT_NEAR(x[0], 1.6f, 1e-6);  // along +update: the gradient is -update
  EXPECT_NEAR(x[1], 1.65f, 1e-6);
}

// BSP: after the first round every node holds the servers' model (shard s from node
// s), and after every later round exactly that plus the mean of the nodes' changes.
TEST(ParameterServer, BspIsSynchronousSgdThroughTwoServers) {
  Options o;
  o.ps.servers = 2;
  World w(o);
  constexpr uint64_t kRounds = 4;
  w.run([](uint32_t) { return kRounds; });
  std::vector<float> want(o.numel);
  for (size_t e = 0; e < o.numel; ++e)
    want[e] = initial(e < shard_of(o.numel, 2, 1).offset ? 0 : 1, e);
  for (uint64_t r = 0; r < kRounds; ++r) {
    if (r > 0)
      for (size_t e = 0; e < o.numel; ++e) {
        float sum = 0;
        for (uint32_t i = 0; i < o.nodes; ++i) sum += change(i, r, e);
        want[e] += 1.0f * (0.25f * sum);
      }
    for (uint32_t i = 0; i < o.nodes; ++i) {
      ASSERT_EQ(w.node(i).failure, "") << "node " << i;
      for (size_t e = 0; e < o.numel; ++e)
        ASSERT_NEAR(w.node(i).after[r][e], want[e], 1e-5)
            << "node " << i << " round " << r << " e " << e;
    }
  }
}

TEST(ParameterServer, BspWithACodecKeepsReplicasEqualAndCloseToTheMean) {
  Options o;
  o.ps.servers = 2;
  World exact(o);
  exact.run([](uint32_t) { return 3u; });
  o.codec = "fp16";
  World w(o);
  w.run([](uint32_t) { return 3u; });
  for (uint32_t i = 0; i < o.nodes; ++i) {
    ASSERT_EQ(w.node(i).failure, "");
    EXPECT_EQ(w.node(i).after[2], w.node(0).after[2]) << "node " << i << " differs from node 0";
  }
  for (size_t e = 0; e < o.numel; ++e)  // fp16 keeps 11 bits of values below 4
    ASSERT_NEAR(w.node(0).after[2][e], exact.node(0).after[2][e], 4e-3) << e;
}

// A worker that dies stops nobody: bsp waits for it for dead_after, then averages the
// others; async never waits at all.
TEST(ParameterServer, ADeadWorkerLeavesTheClock) {
  for (Mode mode : {Mode::kBsp, Mode::kAsync}) {
    Options o;
    o.ps.mode = mode;
    o.dead_after = 300ms;
    World w(o);
    const auto start = Clock::now();
    w.run([](uint32_t i) { return i == 3 ? 1u : 5u; }, nullptr, [](uint32_t i) { return i == 3; });
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    for (uint32_t i = 0; i < 3; ++i) {
      ASSERT_EQ(w.node(i).failure, "") << "node " << i;
      EXPECT_EQ(w.node(i).after.size(), 5u);
    }
    EXPECT_LT(took, 5.0) << "a dead worker held the others";
    if (mode == Mode::kBsp) {  // the last round: the mean of the three live changes
      for (size_t e = 0; e < o.numel; e += 97) {
        const float before = w.node(0).after[3][e];
        const float mean = (change(0, 4, e) + change(1, 4, e) + change(2, 4, e)) / 3.0f;
        EXPECT_NEAR(w.node(0).after[4][e], before + mean, 1e-5) << e;
      }
    }
  }
}

// ssp:S: a worker never runs more than S clocks ahead of the slowest. Node 2 takes
// 150 ms per round, the others none: with S = 1 the fast ones are held back, with
// S = 4 they run ahead, but never further.
TEST(ParameterServer, StaleSynchronousBoundsTheLead) {
  for (uint64_t bound : {1u, 4u}) {
    Options o;
    o.nodes = 3;
    o.ps.mode = Mode::kSsp;
    o.ps.staleness = bound;
    World w(o);
    constexpr uint64_t kRounds = 10;
    w.run([](uint32_t) { return kRounds; }, [](uint32_t i) { return i == 2 ? 150ms : 0ms; });
    for (uint32_t i = 0; i < 3; ++i) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
    const uint64_t lead = ps(w.node(0)).max_lead();
    EXPECT_LE(lead, bound);
    EXPECT_GE(lead, bound) << "the fast workers never ran ahead: the test shows nothing";
    // A fast node's round r cannot complete before the slow one finished round r - S - 1.
    // By round number, not by position (a listed worker runs every round, but one that
    // skipped some would otherwise shift every later comparison).
    const auto finished = [&](uint32_t i, uint64_t round) -> std::optional<double> {
      const auto& rounds = w.node(i).rounds;
      const auto it = std::find(rounds.begin(), rounds.end(), round);
      if (it == rounds.end()) return std::nullopt;
      return w.node(i).done_at[static_cast<size_t>(it - rounds.begin())];
    };
    size_t checked = 0;
    for (uint64_t r = bound + 1; r < kRounds; ++r) {
      const auto fast = finished(0, r), slow = finished(2, r - bound - 1);
      if (!fast || !slow) continue;
      ++checked;
      EXPECT_GE(*fast + 0.01, *slow) << "round " << r;
    }
    EXPECT_GE(checked, 2u) << "bound " << bound << ": too few rounds both nodes ran to check";
  }
}

TEST(ParameterServer, ADeadServerFailsItsWorkersNamingIt) {
  Options o;
  o.nodes = 3;
  o.ps.servers = 1;
  o.dead_after = 300ms;
  World w(o);
  const auto start = Clock::now();
  w.run([](uint32_t i) { return i == 0 ? 1u : 3u; }, [](uint32_t) { return 100ms; },
        [](uint32_t i) { return i == 0; });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  for (uint32_t i : {1u, 2u}) {
    EXPECT_NE(w.node(i).failure.find("parameter server node 0 (shard 0)"), std::string::npos)
        << w.node(i).failure;
  }
}

// A push with NaN from a peer is dropped and counted; the clock goes on without it.
TEST(ParameterServer, APoisonedPushIsLeftOutOfItsClock) {
  Options o;
  o.nodes = 3;
  World w(o);
  // Node 2 is an attacker: after round 0 it sends a NaN update instead of running.
  std::jthread attacker([&] {
    std::this_thread::sleep_for(200ms);
    std::vector<float> nan(o.numel, std::nanf(""));
    const auto bytes = std::as_bytes(std::span<const float>(nan));
    (void)w.node(2).channel->send_zero_copy(
        0, 1, proto::PsPush{0, 0, o.numel, proto::CodecId::kNone, kLayout}, bytes);
    std::this_thread::sleep_for(1s);
  });
  w.run([](uint32_t i) { return i == 2 ? 1u : 2u; });
  for (uint32_t i : {0u, 1u}) {
    ASSERT_EQ(w.node(i).failure, "") << "node " << i;
    for (float v : w.node(i).after[1]) ASSERT_TRUE(std::isfinite(v));
  }
  EXPECT_GE(w.node(0).channel->traffic().peer_totals(2).dropped, 1u);
}

// With a replica, the next node holds the server's bits and its optimizer's state
// (chain replication after aggregation): the state each saves is the same.
TEST(ParameterServer, AReplicaHoldsTheServersBits) {
  Options o;
  o.ps.servers = 2;
  o.ps.replicas = 1;
  o.ps.optimizer.kind = ServerOptimizerConfig::Kind::kMomentum;
  o.ps.optimizer.momentum = 0.5;
  World w(o);
  w.run([](uint32_t) { return 6u; });
  for (uint32_t i = 0; i < o.nodes; ++i) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
  // Shard 0 is served by node 0 and replicated on node 1; shard 1 by node 1, on node 2.
  for (const auto& [shard, server, replica] : {std::tuple{0, 0u, 1u}, std::tuple{1, 1u, 2u}}) {
    const StrategyState a = w.node(server).strategy->save_state();
    const StrategyState b = w.node(replica).strategy->save_state();
    int compared = 0;
    for (const auto& [key, values] : a.tensors)
      if (key.starts_with("ps.shard" + std::to_string(shard) + ".")) {
        ASSERT_TRUE(b.tensors.count(key)) << key;
        EXPECT_EQ(b.tensors.at(key), values) << key << " differs on the replica";
        ++compared;
      }
    EXPECT_GE(compared, 2) << "the parameters and the momentum";
    const std::string version = "ps.shard" + std::to_string(shard) + ".version";
    EXPECT_EQ(a.scalars.at(version), 5.0);
    EXPECT_EQ(b.scalars.at(version), a.scalars.at(version));
  }
}

// A server that dies with a replica stops nobody: its workers re-send their push to
// the replica and go on, and under bsp no clock is lost: after every round the model
// is the last one plus the mean of the live nodes' changes.
TEST(ParameterServer, AReplicaTakesOverFromADeadServer) {
  for (Mode mode : {Mode::kBsp, Mode::kAsync}) {
    SCOPED_TRACE(mode == Mode::kBsp ? "bsp" : "async");
    Options o;
    o.ps.servers = 1;
    o.ps.replicas = 1;
    o.ps.mode = mode;
    o.dead_after = 300ms;
    World w(o);
    const auto start = Clock::now();
    w.run([](uint32_t i) { return i == 0 ? 3u : 8u; }, [](uint32_t) { return 20ms; },
          [](uint32_t i) { return i == 0; });
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 6.0);
    for (uint32_t i : {1u, 2u, 3u}) {
      ASSERT_EQ(w.node(i).failure, "") << "node " << i;
      ASSERT_EQ(w.node(i).after.size(), 8u);
      for (float v : w.node(i).after[7]) ASSERT_TRUE(std::isfinite(v));
    }
    if (mode != Mode::kBsp) continue;
    for (uint64_t r = 1; r < 8; ++r) {
      const std::vector<uint32_t> live =
          r < 3 ? std::vector<uint32_t>{0, 1, 2, 3} : std::vector<uint32_t>{1, 2, 3};
      for (size_t e = 0; e < o.numel; e += 41) {
        float mean = 0;
        for (uint32_t i : live) mean += change(i, r, e);
        mean /= static_cast<float>(live.size());
        for (uint32_t i : {1u, 2u, 3u})
          ASSERT_NEAR(w.node(i).after[r][e], w.node(1).after[r - 1][e] + mean, 1e-5)
              << "node " << i << " round " << r << " e " << e;
      }
    }
  }
}

// Without a live replica left, the workers fail as without replicas, naming the server.
TEST(ParameterServer, ADeadServerAndReplicaFailTheWorkers) {
  Options o;
  o.nodes = 4;
  o.ps.servers = 1;
  o.ps.replicas = 1;
  o.dead_after = 300ms;
  World w(o);
  w.run([](uint32_t i) { return i <= 1 ? 1u : 3u; }, [](uint32_t) { return 100ms; },
        [](uint32_t i) { return i <= 1; });
  for (uint32_t i : {2u, 3u}) {
    EXPECT_NE(w.node(i).failure.find("parameter server node 1 (shard 0)"), std::string::npos)
        << w.node(i).failure;
    EXPECT_NE(w.node(i).failure.find("Every replica of its shard is gone too"), std::string::npos)
        << w.node(i).failure;
  }
}

// A listed worker that starts late runs every clock: until its first push the others
// wait for it at the shard's clock (ssp:1 lets them one clock ahead), and its first
// pull tells it that clock, not the fast workers'. (It jumped to clock 2, skipping
// clock 1, in a CI run whose loaded machine started its thread late:
// AWorkerThatJoinsGoesOnFromTheServersClock, nodes 2 and 3 at 19 of 20 rounds.)
TEST(ParameterServer, UnderSspAListedWorkerThatStartsLateRunsEveryClock) {
  Options o;
  o.nodes = 4;
  o.ps.servers = 2;
  o.ps.mode = Mode::kSsp;
  o.ps.staleness = 1;
  o.start_late[3] = 300ms;
  World w(o);
  constexpr uint64_t kRounds = 8;
  w.run([](uint32_t) { return kRounds; });
  for (uint32_t i = 0; i < o.nodes; ++i) {
    ASSERT_EQ(w.node(i).failure, "") << "node " << i;
    EXPECT_EQ(w.node(i).rounds.size(), kRounds) << "node " << i << " skipped clocks";
  }
  EXPECT_LE(ps(w.node(0)).max_lead(), 1u);
  EXPECT_LE(ps(w.node(1)).max_lead(), 1u);
}

// A worker joins a running cluster (issue 24): the members take it in between rounds,
// its first pull tells it the servers' clock and it goes on from there, the shards
// count it from its first push, and from then on every bsp clock averages its change
// too; under ssp it bounds nobody before it pushed, and nobody's lead passes S.
TEST(ParameterServer, AWorkerThatJoinsGoesOnFromTheServersClock) {
  for (Mode mode : {Mode::kBsp, Mode::kSsp}) {
    SCOPED_TRACE(mode == Mode::kBsp ? "bsp" : "ssp:1");
    Options o;
    o.nodes = 5;
    o.late = 1;
    o.join_at = 6;
    o.ps.servers = 2;
    o.ps.mode = mode;
    o.ps.staleness = 1;
    World w(o);
    constexpr uint64_t kRounds = 20;
    w.run([](uint32_t) { return kRounds; }, [](uint32_t) { return 10ms; });
    for (uint32_t i = 0; i < o.nodes; ++i) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
    const Node& joiner = w.node(4);
    ASSERT_GE(joiner.rounds.size(), 2u);
    EXPECT_EQ(joiner.rounds[0], 0u);  // its first pull
    EXPECT_GE(joiner.rounds[1], o.join_at) << "it did not go on from the servers' clock";
    EXPECT_EQ(joiner.rounds.back(), kRounds - 1);
    EXPECT_LT(joiner.rounds.size(), kRounds - o.join_at + 2) << "it ran clocks it skipped";
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(w.node(i).rounds.size(), kRounds) << "node " << i;
    if (mode == Mode::kSsp) {
      EXPECT_LE(ps(w.node(0)).max_lead(), 1u);
      EXPECT_LE(ps(w.node(1)).max_lead(), 1u);
      continue;
    }
    EXPECT_EQ(joiner.after.back(), w.node(0).after.back()) << "the five end on two models";
    const auto& last = w.node(0).after[kRounds - 1];
    const auto& before = w.node(0).after[kRounds - 2];
    for (size_t e = 0; e < o.numel; ++e) {
      float mean = 0;
      for (uint32_t i = 0; i < o.nodes; ++i) mean += change(i, kRounds - 1, e);
      ASSERT_NEAR(last[e], before[e] + mean / 5.0f, 1e-5)
          << "the last clock left a worker out: e " << e;
    }
  }
}

// A worker names its own clocks. Under async a shard tells the workers the slowest
// counted worker's clock, never the highest one claimed: a worker that runs 2^40
// clocks on moves nobody's rounds, and every pull still completes. (Told the highest,
// the others jumped to it, their trainers' steps with them.)
// Under ssp and bsp such a worker is a straggler the bound waits for, as any is.
TEST(ParameterServer, AWorkerClaimingAFarClockMovesNobody) {
  {
    Options o;
    o.nodes = 3;
    o.ps.mode = Mode::kAsync;
    o.liar = 2;
    o.lie = uint64_t{1} << 40;
    World w(o);
    constexpr uint64_t kRounds = 8;
    w.run([](uint32_t) { return kRounds; }, [](uint32_t) { return 5ms; });
    for (uint32_t i = 0; i < 2; ++i) {
      ASSERT_EQ(w.node(i).failure, "") << "node " << i;
      ASSERT_EQ(w.node(i).rounds.size(), kRounds) << "node " << i << " skipped rounds";
      EXPECT_EQ(w.node(i).rounds.back(), kRounds - 1);
    }
  }
}

}  // namespace
}  // namespace gossip::sgd

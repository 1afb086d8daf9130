// Consensus without training, across real gossipd processes on loopback: random
// vectors on 8 nodes, synchronized round after round with no local change.
// - gossip (D-PSGD) on a ring: the mean is preserved to fp32 rounding and the
//   distance to it shrinks at the rate the spectral gap predicts (the other topologies
//   run in-process, tests/sgd/in_process_world_test.cc);
// - push-sum on the one-peer exponential graph: the sum is preserved and every node
//   holds the exact mean after log2(n) rounds;
// - async gossip: the mean is preserved and no node runs too far ahead of a straggler.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <thread>
#include <tuple>

#include "gossip/client.h"
#include "harness.h"
#include "peers/mixing_matrix.h"
#include "peers/topology.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

constexpr int kNodes = 8;  // default cluster size
constexpr uint64_t kNumel = 1000;

// x[node][round][e]: each node's vector before the first round and after every round.
using Trajectories = std::vector<std::vector<std::vector<float>>>;

// `logs`, when given, gets every daemon's log: what a failed check prints.
// `before_sync(node, round)`, when given, runs in a node's trainer before each sync.
Trajectories run_consensus(const std::vector<std::string>& flags, int rounds,
                           uint64_t numel = kNumel, int nodes = kNodes,
                           std::vector<std::string>* logs = nullptr,
                           const std::function<void(int, int)>& before_sync = {}) {
  std::vector<std::string> extra = {"--period", "1", "--round-timeout", "30", "--seed", "7"};
  extra.insert(extra.end(), flags.begin(), flags.end());
  Cluster cluster(nodes, extra);
  cluster.start_all();
  Trajectories x(nodes);
  std::vector<std::string> errors(nodes);
  {
    std::vector<std::jthread> threads;
    for (int node = 0; node < nodes; ++node) {
      threads.emplace_back([&, node] {
        auto client = connect_to(cluster, node);
        if (!client) return;
        auto model = client->attach({{"x", numel}});
        if (!model) {
          errors[node] = model.status().message();
          return;
        }
        auto& v = model->tensors[0];
        std::mt19937_64 rng(100 + node);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& e : v) e = normal(rng);
        x[node].emplace_back(v.begin(), v.end());
        for (int r = 0; r < rounds; ++r) {
          if (before_sync) before_sync(node, r);
          auto s = client->sync();
          if (!s) {
            errors[node] = "round " + std::to_string(r) + ": " + s.status().message();
            return;
          }
          x[node].emplace_back(v.begin(), v.end());
        }
      });
    }
  }
  for (int node = 0; node < nodes; ++node) {
    EXPECT_EQ(errors[node], "") << "node " << node << "\n" << cluster.log(node);
    EXPECT_EQ(x[node].size(), static_cast<size_t>(rounds + 1)) << "node " << node;
    if (logs) logs->push_back(cluster.log(node));
  }
  return x;
}

void print_logs(const std::vector<std::string>& logs) {
  for (size_t node = 0; node < logs.size(); ++node)
    std::printf("--- node %zu's log:\n%s\n", node, logs[node].c_str());
}

std::vector<double> mean_at(const Trajectories& x, size_t round) {
  std::vector<double> mean(x[0][round].size(), 0.0);
  for (const auto& node : x)
    for (size_t e = 0; e < mean.size(); ++e) mean[e] += node[round][e];
  for (double& m : mean) m /= static_cast<double>(x.size());
  return mean;
}

// (1/n) Σ_i ‖x_i,t − x̄_0‖², against the exact initial mean.
double distance_at(const Trajectories& x, size_t round, const std::vector<double>& mean0) {
  double d = 0;
  for (const auto& node : x)
    for (size_t e = 0; e < mean0.size(); ++e) {
      double diff = node[round][e] - mean0[e];
      d += diff * diff;
    }
  return d / static_cast<double>(x.size());
}

double predicted_rate(const std::string& topology, int nodes) {
  auto t = peers::make_topology(topology, static_cast<uint32_t>(nodes), 7);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  auto gap = peers::spectral_gap(**t);
  EXPECT_TRUE(gap.is_ok()) << gap.status().message();
  return 1.0 - gap->gap;
}

class GossipConsensus : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GossipConsensus, ShrinksAtTheRateTheSpectralGapPredicts) {
  const auto [topology, nodes] = GetParam();
  const double lambda = predicted_rate(topology, nodes);
  // Rounds until the predicted distance is ~1e-8 of the start (well above fp32's floor).
  const int rounds =
      std::clamp(static_cast<int>(std::ceil(std::log(1e-4) / std::log(lambda))), 4, 40);
  std::vector<std::string> logs;
  auto x =
      run_consensus({"--strategy", "gossip", "--topology", topology}, rounds, kNumel, nodes, &logs);
  if (HasFailure()) return;

  const auto mean0 = mean_at(x, 0);
  for (size_t r = 1; r < x[0].size(); ++r) {
    const auto mean = mean_at(x, r);
    for (size_t e = 0; e < mean.size(); ++e) {
      if (std::abs(mean[e] - mean0[e]) <= 1e-5) continue;
      print_logs(logs);
      FAIL() << "the mean moved in round " << r << ", element " << e << ": " << mean[e]
             << " against " << mean0[e] << " before the first round";
    }
  }
  // The slowest mode dominates after a few rounds; measure the per-round rate of ‖x − x̄‖
  // from there to the end, and compare it with λ = 1 − gap.
  const size_t t0 = 2, t1 = x[0].size() - 1;
  const double d0 = distance_at(x, t0, mean0), d1 = distance_at(x, t1, mean0);
  ASSERT_GT(d0, 0);
  const double measured = std::pow(d1 / d0, 1.0 / (2.0 * static_cast<double>(t1 - t0)));
  RecordProperty("measured_rate", std::to_string(measured));
  RecordProperty("predicted_rate", std::to_string(lambda));
  std::printf(
      "%s, %d nodes: measured rate %.4f per round, predicted %.4f (spectral gap %.4f), "
      "%d rounds\n",
      topology.c_str(), nodes, measured, lambda, 1 - lambda, rounds);
  // λ bounds the rate (up to fp32 rounding); a random start has weight on the slowest
  // mode, so the rate is also not much faster than λ.
  EXPECT_LE(measured, lambda * 1.02 + 1e-3);
  EXPECT_GE(measured, lambda * 0.8);
}

// A trainer that pauses between syncs (an evaluation, a slow step) for longer than
// its daemon's heartbeat period: meanwhile its daemon is heard from once a heartbeat.
// After fast rounds, whose messages come back to back, the learnt dead-after bound
// was its 0.5 s floor, under the 1 s heartbeat: the neighbors took the waiting node
// for dead and mixed without it, while it mixed with them once back, and the mean
// moved. Now no bound is shorter than two heartbeats (peers/dead_after.h).
TEST(GossipConsensus, ATrainerPausingLongerThanAHeartbeatIsNotTakenForDead) {
  constexpr int kRounds = 24, kSlow = 3, kPausedRound = 16;
  std::vector<std::string> logs;
  auto x = run_consensus({"--strategy", "gossip", "--topology", "ring"}, kRounds, kNumel, kNodes,
                         &logs, [](int node, int round) {
                           if (node == kSlow && round == kPausedRound)
                             std::this_thread::sleep_for(std::chrono::milliseconds(1600));
                         });
  if (HasFailure()) return;
  const auto mean0 = mean_at(x, 0);
  const auto mean = mean_at(x, kRounds);
  for (size_t e = 0; e < mean.size(); ++e)
    ASSERT_NEAR(mean[e], mean0[e], 1e-5) << "element " << e << "\n" << logs[kSlow - 1];
  for (int node : {kSlow - 1, kSlow + 1})
    EXPECT_EQ(logs[node].find("mixing without"), std::string::npos) << logs[node];
}

// One case through real daemons; the others (torus, exponential, 16 nodes) run in one
// process over queues, with the same strategy code (tests/sgd/in_process_world_test.cc).
INSTANTIATE_TEST_SUITE_P(Topologies, GossipConsensus,
                         ::testing::Combine(::testing::Values("ring"), ::testing::Values(8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(PushSumConsensus, SumIsPreservedAndTheMeanIsExactAfterLog2NRounds) {
  auto x = run_consensus({"--strategy", "push-sum"}, 6);
  if (HasFailure()) return;
  const auto mean0 = mean_at(x, 0);
  for (size_t r = 1; r < x[0].size(); ++r) {
    const auto mean = mean_at(x, r);
    for (size_t e = 0; e < mean.size(); ++e) ASSERT_NEAR(mean[e], mean0[e], 1e-5) << "round " << r;
  }
  // One-peer exponential graph, n = 8: after rounds 1, 2, 4 apart every node has
  // mixed with every other with equal weight.
  for (size_t r = 3; r < x[0].size(); ++r)
    for (int node = 0; node < kNodes; ++node)
      for (size_t e = 0; e < kNumel; ++e)
        ASSERT_NEAR(x[node][r][e], mean0[e], 1e-5) << "node " << node << " round " << r;
}

// Push-sum with a delay of 8 through real daemons: a message is consumed 8 rounds
// after it was sent, so the daemons must keep a neighbor's chunks that far ahead (the
// exchange keeps only a few rounds ahead otherwise). A message dropped would lose its
// mass: the nodes would agree on another value than the mean.
TEST(PushSumConsensus, DelayedMessagesThroughDaemonsLoseNoMass) {
  constexpr int kRounds = 100;
  std::vector<std::string> logs;
  auto x =
      run_consensus({"--strategy", "push-sum", "--delay", "8"}, kRounds, kNumel, kNodes, &logs);
  if (HasFailure()) return;
  const auto mean0 = mean_at(x, 0);
  const double start = distance_at(x, 0, mean0), end = distance_at(x, kRounds, mean0);
  std::printf("push-sum, delay 8, %d rounds: distance to the first mean / start %.3g\n", kRounds,
              end / start);
  EXPECT_LT(end, 1e-3 * start);
  if (HasFailure()) print_logs(logs);
}

// Push-sum with delayed messages and CHOCO with top-k run in one process
// (tests/sgd/in_process_world_test.cc: PushSum_InProcess, Choco_InProcess); CHOCO
// with top-k through real daemons is in training_test.cc.

// Asynchronous gossip: trainers do not wait for their round; its change reaches the
// replica at the next sync. The mean is still preserved and the nodes converge.
TEST(AsyncGossipConsensus, ConvergesAndPreservesTheMeanWithStaleNeighbors) {
  constexpr int kRounds = 80;
  auto x = run_consensus({"--strategy", "async-gossip", "--staleness", "2"}, kRounds);
  if (HasFailure()) return;
  const auto mean0 = mean_at(x, 0);
  for (size_t r = 1; r < x[0].size(); ++r) {
    const auto mean = mean_at(x, r);
    for (size_t e = 0; e < mean.size(); ++e) ASSERT_NEAR(mean[e], mean0[e], 1e-5) << "round " << r;
  }
  const double start = distance_at(x, 0, mean0), end = distance_at(x, kRounds, mean0);
  std::printf("async-gossip, staleness 2, ring, %d rounds: distance / start %.3g\n", kRounds,
              end / start);
  EXPECT_LT(end, 1e-3 * start);
}

// One node 5x slower: the others keep synchronizing without waiting for their rounds,
// but its neighbors never get more than the staleness bound (plus the round in
// flight) ahead of it. (Node 1, two hops away, may lead by twice that.)
TEST(AsyncGossipConsensus, NoNodeRunsMoreThanTheStalenessBoundAheadOfAStraggler) {
  constexpr int kNodes4 = 4, kRounds = 30, kStaleness = 2, kSlow = 3;
  Cluster cluster(kNodes4, {"--strategy", "async-gossip", "--staleness", std::to_string(kStaleness),
                            "--period", "1", "--round-timeout", "30"});
  cluster.start_all();
  std::vector<std::atomic<int>> syncs(kNodes4);
  std::atomic<int> max_lead{0};
  std::vector<std::string> errors(kNodes4);
  {
    std::vector<std::jthread> threads;
    for (int node = 0; node < kNodes4; ++node) {
      threads.emplace_back([&, node] {
        auto client = connect_to(cluster, node);
        if (!client) return;
        auto model = client->attach({{"x", 4096}});
        if (!model) {
          errors[node] = model.status().message();
          return;
        }
        for (auto& v : model->tensors[0]) v = static_cast<float>(node);
        for (int r = 0; r < kRounds; ++r) {
          std::this_thread::sleep_for(std::chrono::milliseconds(node == kSlow ? 50 : 10));
          auto s = client->sync();
          if (!s) {
            errors[node] = s.status().message();
            return;
          }
          syncs[node] = r + 1;
          if (node != 0 && node != 2) continue;  // the straggler's ring neighbors
          const int lead = syncs[node] - syncs[kSlow];
          int seen = max_lead;
          while (lead > seen && !max_lead.compare_exchange_weak(seen, lead)) {
          }
        }
      });
    }
  }
  for (int node = 0; node < kNodes4; ++node) EXPECT_EQ(errors[node], "") << cluster.log(node);
  std::printf(
      "async-gossip, staleness %d, node %d 5x slower: its neighbors lead by %d syncs at most\n",
      kStaleness, kSlow, max_lead.load());
  // Round t waits for round t - s of the neighbors; the sync that started round t
  // returned at once, and the next one waits for it: s + 2 syncs, plus one for the
  // moment between the straggler's daemon sending its round and its thread counting it.
  EXPECT_LE(max_lead.load(), kStaleness + 3);
  EXPECT_GE(max_lead.load(), 1);  // the fast nodes did run ahead: they were not held in lockstep
}

// A node SIGKILLed while the others gossip: the kernel closes its sockets, its ring
// neighbors' connections to it drop, and once it has been silent
// NeighborExchange::kLinkDownSilence (0.1 s) they log why and go on mixing with the
// nodes that answer, without an ask, the patience (1 s) or the dead-after (0.5 s at
// least).
TEST(GossipFaults, AKilledPeerDoesNotHangItsNeighbors) {
  constexpr int kNodes4 = 4, kRounds = 40, kVictim = 2;
  Cluster cluster(kNodes4, {"--strategy", "gossip", "--period", "1", "--round-timeout", "30",
                            "--patience", "1"});
  cluster.start_all();
  std::atomic<int> rounds_of_0{0};
  std::vector<std::string> errors(kNodes4);
  std::vector<int> done(kNodes4, 0);
  std::vector<double> finished_s(kNodes4, 0);
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    for (int node = 0; node < kNodes4; ++node) {
      threads.emplace_back([&, node] {
        auto client = connect_to(cluster, node, std::chrono::seconds(5));
        if (!client) return;
        auto model = client->attach({{"x", 4096}});
        if (!model) {
          errors[node] = model.status().message();
          return;
        }
        for (auto& v : model->tensors[0]) v = static_cast<float>(node);
        for (int r = 0; r < kRounds; ++r) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          auto s = client->sync();
          if (!s) {
            errors[node] = s.status().message();
            return;
          }
          done[node] = r + 1;
          if (node == 0) rounds_of_0 = r + 1;
        }
        finished_s[node] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
    }
    while (rounds_of_0 < 5 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_GE(rounds_of_0.load(), 5) << cluster.log(0);
    cluster.daemon(kVictim).signal(SIGKILL);
  }
  for (int node = 0; node < kNodes4; ++node) {
    if (node == kVictim) continue;
    EXPECT_EQ(errors[node], "") << "node " << node << "\n" << cluster.log(node);
    EXPECT_EQ(done[node], kRounds) << "node " << node;
    // 40 rounds of 20 ms, plus one patience (1 s) for the neighbors of the dead node.
    EXPECT_LT(finished_s[node], 10.0) << "node " << node;
  }
  // Each neighbor says why it went on without the dead node; at least one that its
  // connection dropped. (The other may have been in a round that its silence or the ask
  // ended first, where a loaded machine read the link's events late.)
  EXPECT_TRUE(cluster.log(1).find("peer 2 dropped its connection") != std::string::npos ||
              cluster.log(3).find("peer 2 dropped its connection") != std::string::npos)
      << cluster.log(1) << cluster.log(3);
  for (int neighbor : {1, 3}) {
    const std::string log = cluster.log(neighbor);
    EXPECT_TRUE(log.find("peer 2 dropped its connection") != std::string::npos ||
                log.find("peer 2 missed round") != std::string::npos ||
                log.find("peer 2 silent for") != std::string::npos ||
                log.find("peer 2 sent ") != std::string::npos)  // no answer to the ask
        << log;
    EXPECT_NE(log.find("mixing without peer 2"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace gossip::testing

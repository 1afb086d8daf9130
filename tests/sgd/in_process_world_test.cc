// The in-process test world (peers/memory_channel.h): gossip on several nodes of one
// process, through the real router, neighbor exchange, wire encoding and strategy,
// with queues instead of sockets. No ports and no start-up order, so the tests can
// check what the mathematics says exactly: D-PSGD is x <- W x, round after round; a
// node that dies is dropped after the patience and the survivors keep their mean; a
// stochastic codec's seeds make a run reproduce bit for bit, whatever the threads did.

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "compression/codec_spec.h"
#include "peers/memory_channel.h"
#include "peers/mixing_matrix.h"
#include "peers/router.h"
#include "sgd/overlay/neighbor_exchange.h"
#include "sgd/registry.h"
#include "tests/param_name.h"

namespace gossip::sgd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kLayout = 0x5eed;

struct Node {
  std::unique_ptr<peers::MemoryChannel> channel;
  std::unique_ptr<peers::Router> router;
  std::unique_ptr<NeighborExchange> exchange;
  std::unique_ptr<Strategy> strategy;
  std::vector<float> x;
  std::string failure;
};

struct WorldOptions {
  uint32_t nodes = 6;
  std::string strategy = "gossip";  // any of the overlay family, made by the registry
  StrategyParams params;
  std::string topology;  // "": the strategy's default
  size_t numel = 1000;
  std::chrono::milliseconds patience{5000};
  std::chrono::milliseconds dead_after{5000};
  std::string codec = "none";
  uint64_t chunk_elems = 1 << 20;
  uint64_t seed = 1;  // the topology's
  // > 0: node nodes - 1 joined, and the overlay takes it in from this round on.
  uint64_t joins_at = 0;
};

// Node i starts from x_i[e] = i + sin(0.01 e (i + 1)): different on every node.
float initial(uint32_t i, size_t e) {
  return static_cast<float>(i) +
         std::sin(0.01f * static_cast<float>(e) * static_cast<float>(i + 1));
}

class World {
 public:
  explicit World(const WorldOptions& o) : options_(o) {
    const StrategyDescriptor* descriptor = find_strategy(o.strategy);
    EXPECT_TRUE(descriptor && descriptor->fabric == Fabric::kOverlay) << o.strategy;
    const std::string topology =
        o.topology.empty() ? std::string(descriptor->default_topology) : o.topology;
    const uint32_t first = o.joins_at > 0 ? o.nodes - 1 : o.nodes;
    overlay_ = std::make_unique<Overlay>(topology, o.seed,
                                         peers::make_topology(topology, first, o.seed).value());
    EXPECT_TRUE(overlay_->grow(o.nodes, o.joins_at).is_ok());
    codec_ = compression::make_codec(o.codec).value();
    nodes_.resize(o.nodes);
    for (uint32_t i = 0; i < o.nodes; ++i) {
      std::vector<uint32_t> peers;
      for (uint32_t j = 0; j < o.nodes; ++j)
        if (j != i) peers.push_back(j);
      Node& n = nodes_[i];
      n.channel = hub_.join(i, peers);
      n.router = std::make_unique<peers::Router>(*n.channel);
      ExchangeLimits limits;
      limits.heartbeat = 50ms;
      limits.dead_after = o.dead_after;
      // As the sync worker builds them (daemon/sync_worker.cc).
      const compression::Codec* codec = codec_.codec.get();
      n.exchange = std::make_unique<NeighborExchange>(*n.router, codec, nullptr, limits);
      StrategyResources r;
      r.exchange = n.exchange.get();
      r.overlay = overlay_.get();
      r.gossip.patience = o.patience;
      r.gossip.chunk_elems = o.chunk_elems;
      r.gossip.compression.codec = codec;
      r.codec = codec;
      r.params = o.params;
      std::string detail;
      n.strategy = descriptor->make(r, &detail).value();
      n.strategy->set_layout_fingerprint(kLayout);
      n.x.resize(o.numel);
      for (size_t e = 0; e < o.numel; ++e) n.x[e] = initial(i, e);
    }
  }

  // Rounds [first, last) on the given nodes, each on a thread of its own.
  void run(uint64_t first, uint64_t last, const std::vector<uint32_t>& who) {
    std::vector<std::jthread> threads;
    for (uint32_t i : who)
      threads.emplace_back([this, i, first, last] {
        Node& n = nodes_[i];
        for (uint64_t r = first; r < last && n.failure.empty(); ++r) {
          RoundOptions o;
          o.deadline = Clock::now() + 20s;
          if (Status st = n.strategy->synchronize(n.x, r, o); !st)
            n.failure = "round " + std::to_string(r) + ": " + st.message();
        }
      });
  }
  void run(uint64_t first, uint64_t last) {
    std::vector<uint32_t> all;
    for (uint32_t i = 0; i < options_.nodes; ++i) all.push_back(i);
    run(first, last, all);
  }

  peers::MemoryHub& hub() { return hub_; }
  const peers::Topology& topology() const { return overlay_->latest(); }
  Node& node(uint32_t i) { return nodes_[i]; }

 private:
  WorldOptions options_;
  peers::MemoryHub hub_;  // outlives the channels
  std::unique_ptr<Overlay> overlay_;
  compression::CodecSpec codec_;
  std::vector<Node> nodes_;
};

double mean_of(World& w, const std::vector<uint32_t>& who, size_t e) {
  double s = 0;
  for (uint32_t i : who) s += w.node(i).x[e];
  return s / static_cast<double>(who.size());
}

std::vector<double> means(World& w, const std::vector<uint32_t>& who) {
  std::vector<double> m(w.node(who[0]).x.size());
  for (size_t e = 0; e < m.size(); ++e) m[e] = mean_of(w, who, e);
  return m;
}

double spread(World& w, const std::vector<uint32_t>& who) {
  double worst = 0;
  for (size_t e = 0; e < w.node(who[0]).x.size(); ++e) {
    const double m = mean_of(w, who, e);
    for (uint32_t i : who) worst = std::max(worst, std::abs(w.node(i).x[e] - m));
  }
  return worst;
}

class Dpsgd_InProcess : public ::testing::TestWithParam<const char*> {};

// With no local steps, D-PSGD is x <- W x: after R rounds every node holds row i of
// W_R ... W_1 X_0, computed here in double precision from the topology's mixing rows.
TEST_P(Dpsgd_InProcess, IsTheMixingMatrixRoundAfterRound) {
  WorldOptions o;
  o.topology = GetParam();
  o.chunk_elems = 300;  // several chunks per round, out of step across nodes
  World w(o);
  constexpr uint64_t kRounds = 8;
  Eigen::MatrixXd x(o.nodes, o.numel);
  for (uint32_t i = 0; i < o.nodes; ++i)
    for (size_t e = 0; e < o.numel; ++e) x(i, e) = initial(i, e);
  for (uint64_t r = 0; r < kRounds; ++r) x = peers::mixing_matrix(w.topology(), r) * x;

  w.run(0, kRounds);
  double worst = 0;
  for (uint32_t i = 0; i < o.nodes; ++i) {
    ASSERT_EQ(w.node(i).failure, "") << "node " << i;
    for (size_t e = 0; e < o.numel; ++e)
      worst = std::max(worst, std::abs(static_cast<double>(w.node(i).x[e]) - x(i, e)));
  }
  EXPECT_LT(worst, 1e-5) << "largest difference from W^R X_0";
  // Not a test that passes by doing nothing: the models moved, towards each other.
  EXPECT_GT(std::abs(w.node(0).x[500] - initial(0, 500)), 0.1);
  // Every message went through the channel's encoding and was counted.
  EXPECT_GT(w.node(0).channel->traffic().totals().payload_recv, kRounds * o.numel * 4);
  EXPECT_EQ(w.node(0).channel->traffic().totals().dropped, 0u);
}

INSTANTIATE_TEST_SUITE_P(Topologies, Dpsgd_InProcess,
                         ::testing::Values("ring", "complete", "exponential", "random-regular:3"),
                         [](const auto& info) { return gtest_param_name(info.param); });

// Random N(0, 1) starts, as the process-based consensus tests had them.
void random_start(World& w, uint32_t nodes) {
  for (uint32_t i = 0; i < nodes; ++i) {
    std::mt19937_64 rng(100 + i);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : w.node(i).x) v = normal(rng);
  }
}

std::vector<uint32_t> all_of(uint32_t nodes) {
  std::vector<uint32_t> all(nodes);
  for (uint32_t i = 0; i < nodes; ++i) all[i] = i;
  return all;
}

// Consensus from a random start: the mean is preserved to fp32 rounding and the
// distance to it shrinks at the rate the spectral gap of the topology predicts.
// (tests/integration/gossip_consensus_test.cc runs one case through real daemons.)
class GossipRate_InProcess : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

double distance_to(World& w, uint32_t nodes, const std::vector<double>& mean0) {
  double d = 0;
  for (uint32_t i = 0; i < nodes; ++i)
    for (size_t e = 0; e < mean0.size(); ++e) {
      const double diff = w.node(i).x[e] - mean0[e];
      d += diff * diff;
    }
  return d / nodes;
}

TEST_P(GossipRate_InProcess, ShrinksAtTheRateTheSpectralGapPredicts) {
  const auto& [topology, n] = GetParam();
  WorldOptions o;
  o.nodes = static_cast<uint32_t>(n);
  o.topology = topology;
  o.seed = 7;
  World w(o);
  random_start(w, o.nodes);
  const auto all = all_of(o.nodes);
  const auto gap = peers::spectral_gap(w.topology());
  ASSERT_TRUE(gap.is_ok()) << gap.status().message();
  const double lambda = 1.0 - gap->gap;
  // Rounds until the predicted distance is ~1e-8 of the start (well above fp32's floor).
  const int rounds =
      std::clamp(static_cast<int>(std::ceil(std::log(1e-4) / std::log(lambda))), 4, 40);
  const std::vector<double> mean0 = means(w, all);
  std::vector<double> distance = {distance_to(w, o.nodes, mean0)};
  for (int r = 0; r < rounds; ++r) {
    w.run(r, r + 1);
    for (uint32_t i = 0; i < o.nodes; ++i) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
    for (size_t e = 0; e < o.numel; ++e)
      ASSERT_NEAR(mean_of(w, all, e), mean0[e], 1e-5) << "round " << r << " element " << e;
    distance.push_back(distance_to(w, o.nodes, mean0));
  }
  // The slowest mode dominates after a few rounds: the per-round rate of ||x - mean||
  // from there on is bounded by lambda = 1 - gap and, from a random start, close to it.
  const size_t t0 = 2, t1 = distance.size() - 1;
  ASSERT_GT(distance[t0], 0);
  const double measured =
      std::pow(distance[t1] / distance[t0], 1.0 / (2.0 * static_cast<double>(t1 - t0)));
  EXPECT_LE(measured, lambda * 1.02 + 1e-3);
  EXPECT_GE(measured, lambda * 0.8);
}

INSTANTIATE_TEST_SUITE_P(Topologies, GossipRate_InProcess,
                         ::testing::Combine(::testing::Values("ring", "torus", "exponential"),
                                            ::testing::Values(8, 16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A node that dies mid-run: its neighbors go on without it, giving its weight back to
// their own models. The other survivors keep waiting for them (they send heartbeats
// while they wait), so every edge between survivors is mixed on both sides, the
// survivors' mean stays what it was, and they still reach consensus. (Were a survivor
// to give up on another after its patience while that one still waited for the dead
// node, the mean would move: patience is for stragglers, silence and a dropped
// connection for the dead.) Its machine going away, the neighbors find it silent (no
// heartbeat) for dead_after; its process dying, its connections drop and they go on
// after NeighborExchange::kLinkDownSilence, well inside a dead_after of 10 s.
class DeadNode_InProcess : public ::testing::TestWithParam<bool> {};

TEST_P(DeadNode_InProcess, IsLeftOutAndTheSurvivorsKeepTheirMean) {
  const bool closes = GetParam();
  WorldOptions o;
  o.nodes = 5;
  o.topology = "ring";
  o.dead_after = closes ? 10s : 200ms;
  o.patience = 20s;
  World w(o);
  w.run(0, 3);
  for (uint32_t i = 0; i < o.nodes; ++i) ASSERT_EQ(w.node(i).failure, "") << "node " << i;

  const std::vector<uint32_t> survivors = {0, 1, 2, 3};
  std::vector<double> mean(o.numel);
  for (size_t e = 0; e < o.numel; ++e) mean[e] = mean_of(w, survivors, e);
  const double spread_before = spread(w, survivors);
  w.hub().cut(4, closes);
  const auto start = Clock::now();
  w.run(3, 23, survivors);
  const auto took = Clock::now() - start;
  for (uint32_t i : survivors) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
  // About the wait for the round that finds node 4 gone, then it is not waited for.
  EXPECT_GE(took, closes ? NeighborExchange::kLinkDownSilence - 50ms : 150ms);
  EXPECT_LT(took, 3s) << "rounds after the first do not wait for the dead node";
  double drift = 0;
  for (size_t e = 0; e < o.numel; ++e)
    drift = std::max(drift, std::abs(mean_of(w, survivors, e) - mean[e]));
  EXPECT_LT(drift, 1e-4) << "the survivors' mean is preserved";
  EXPECT_LT(spread(w, survivors), spread_before / 10) << "and they still reach consensus";
}

INSTANTIATE_TEST_SUITE_P(HowItDies, DeadNode_InProcess, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Process" : "Machine"; });

// A node that joined by seeds takes part from the round the coordinator chose
// (sgd/overlay/overlay.h): until then the members mix among themselves, keeping their mean,
// and it runs its rounds alone; from that round on the five mix as one graph and
// reach the mean of all five, under every strategy of the family.
class Join_InProcess : public ::testing::TestWithParam<std::tuple<std::string, double>> {};

TEST_P(Join_InProcess, ANodeThatJoinsIsMixedInFromItsFirstRound) {
  const auto& [strategy, tolerance] = GetParam();
  WorldOptions o;
  o.nodes = 5;
  o.strategy = strategy;
  o.joins_at = 6;
  World w(o);
  random_start(w, o.nodes);
  const std::vector<uint32_t> members = {0, 1, 2, 3};
  const std::vector<double> members_mean = means(w, members);
  const std::vector<float> joiner = w.node(4).x;
  w.run(0, o.joins_at);
  for (uint32_t i = 0; i < o.nodes; ++i) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
  EXPECT_EQ(w.node(4).x, joiner) << "alone before its first round";
  for (size_t e = 0; e < o.numel; e += 7)
    ASSERT_NEAR(mean_of(w, members, e), members_mean[e], tolerance) << "element " << e;
  double moves = 0;  // what the join changes of the mean
  for (size_t e = 0; e < o.numel; ++e)
    moves = std::max(moves, std::abs(joiner[e] - members_mean[e]) / 5);
  ASSERT_GT(moves, 0.5);

  w.run(o.joins_at, o.joins_at + 60);
  for (uint32_t i = 0; i < o.nodes; ++i) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
  const auto all = all_of(o.nodes);
  double off = 0;
  for (size_t e = 0; e < o.numel; ++e)
    off = std::max(off, std::abs(mean_of(w, all, e) - (4 * members_mean[e] + joiner[e]) / 5));
  EXPECT_LT(off, tolerance) << "the five's mean is the members' and the joiner's";
  EXPECT_LT(spread(w, all), 1e-3) << "and all five reach it";
}

INSTANTIATE_TEST_SUITE_P(Strategies, Join_InProcess,
                         ::testing::Values(std::make_tuple("gossip", 1e-5),
                                           std::make_tuple("push-sum", 1e-5),
                                           std::make_tuple("async-gossip", 1e-5),
                                           std::make_tuple("choco", 1e-5)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// qsgd rounds at random, from seeds that sender and receiver both derive from the
// round, the sender and the chunk: two runs of the same world give the same bits,
// however the threads interleaved.
TEST(InProcessWorld, AStochasticCodecsSeedsMakeARunReproduceBitForBit) {
  WorldOptions o;
  o.nodes = 4;
  o.codec = "qsgd:16";
  o.chunk_elems = 256;
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 2; ++run) {
    World w(o);
    w.run(0, 6);
    for (uint32_t i = 0; i < o.nodes; ++i) {
      ASSERT_EQ(w.node(i).failure, "") << "node " << i;
      if (run == 0) {
        first.push_back(w.node(i).x);
      } else {
        EXPECT_EQ(std::memcmp(first[i].data(), w.node(i).x.data(), o.numel * sizeof(float)), 0)
            << "node " << i;
      }
    }
  }
  // And the codec was in the path: a qsgd model differs from the raw one.
  WorldOptions raw = o;
  raw.codec = "none";
  World w(raw);
  w.run(0, 6);
  EXPECT_NE(std::memcmp(first[0].data(), w.node(0).x.data(), o.numel * sizeof(float)), 0);
}

// Push-sum on the one-peer exponential graph, n = 8: the sum is preserved and, after
// rounds 1, 2 and 4 apart, every node has mixed with every other with equal weight,
// so every node holds the exact mean from round 3 on.
TEST(PushSum_InProcess, SumIsPreservedAndTheMeanIsExactAfterLog2NRounds) {
  WorldOptions o;
  o.nodes = 8;
  o.strategy = "push-sum";
  o.seed = 7;
  World w(o);
  random_start(w, o.nodes);
  const auto all = all_of(o.nodes);
  const std::vector<double> mean0 = means(w, all);
  for (uint64_t r = 0; r < 6; ++r) {
    w.run(r, r + 1);
    for (uint32_t i : all) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
    for (size_t e = 0; e < o.numel; ++e)
      ASSERT_NEAR(mean_of(w, all, e), mean0[e], 1e-5) << "round " << r;
    if (r + 1 < 3) continue;
    for (uint32_t i : all)
      for (size_t e = 0; e < o.numel; ++e)
        ASSERT_NEAR(w.node(i).x[e], mean0[e], 1e-5) << "node " << i << " round " << r;
  }
}

// With delay 2 a message is consumed two rounds after it was sent: slower, but the
// nodes still converge to the mean, since no mass is lost, only late.
TEST(PushSum_InProcess, ConvergesToTheMeanWithDelayedMessages) {
  WorldOptions o;
  o.nodes = 8;
  o.strategy = "push-sum";
  o.params.delay = 2;
  o.seed = 7;
  World w(o);
  random_start(w, o.nodes);
  const auto all = all_of(o.nodes);
  const std::vector<double> mean0 = means(w, all);
  const double start = distance_to(w, o.nodes, mean0);
  w.run(0, 20);
  const double half = distance_to(w, o.nodes, mean0);
  w.run(20, 40);
  for (uint32_t i : all) ASSERT_EQ(w.node(i).failure, "") << "node " << i;
  const double end = distance_to(w, o.nodes, mean0);
  EXPECT_LT(end, 1e-4 * start);
  EXPECT_LT(end, half);
}

// Top-k 1%: CHOCO reaches the mean; naive compressed gossip mixes in Q(x_j), whose
// dropped entries read as zeros, and the nodes agree, eventually, on a vector pulled
// towards 0, not on the mean.
TEST(Choco_InProcess, TopkReachesConsensusWhereNaiveCompressedGossipStalls) {
  constexpr uint64_t kRounds = 600;
  double start = 0, end[2] = {};
  for (int naive = 0; naive < 2; ++naive) {
    WorldOptions o;
    o.nodes = 8;
    o.strategy = naive ? "gossip" : "choco";
    o.codec = "topk:0.01";
    o.seed = 7;
    World w(o);
    random_start(w, o.nodes);
    const auto all = all_of(o.nodes);
    const std::vector<double> mean0 = means(w, all);
    start = distance_to(w, o.nodes, mean0);
    w.run(0, kRounds);
    for (uint32_t i : all) ASSERT_EQ(w.node(i).failure, "") << o.strategy << " node " << i;
    end[naive] = distance_to(w, o.nodes, mean0);
  }
  EXPECT_LT(end[0], 1e-3 * start) << "choco";
  EXPECT_GT(end[1], 1e-2 * start) << "naive gossip";
}

}  // namespace
}  // namespace gossip::sgd

// The simulated cluster (sim/world.h): the real gossip strategies on virtual time.
// What the mathematics says holds (consensus contracts by the mixing matrix's second
// eigenvalue), what the time model says holds (a dead neighbor costs exactly the
// patience), and a run is the same for the same seed.

#include "sim/world.h"

#include <gtest/gtest.h>

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <vector>

#include "peers/mixing_matrix.h"
#include "peers/topology.h"
#include "sgd/strategies/ps/parameter_server.h"
#include "tests/param_name.h"

namespace gossip::sim {
namespace {

using namespace std::chrono_literals;

Report run(const WorldOptions& o) {
  auto report = simulate(o);
  EXPECT_TRUE(report.is_ok()) << report.status().message();
  if (!report) return {};
  EXPECT_EQ(report->failures, std::vector<std::string>{});
  return std::move(report).value();
}

// The most rounds node i had finished beyond node `straggler`, at any of its round ends.
int lead_over(const Report& report, uint32_t i, uint32_t straggler) {
  const auto& slow = report.finished[straggler];
  int most = 0;
  for (size_t k = 0; k < report.finished[i].size(); ++k) {
    const auto done =
        std::upper_bound(slow.begin(), slow.end(), report.finished[i][k]) - slow.begin();
    most = std::max(most, static_cast<int>(k + 1) - static_cast<int>(done));
  }
  return most;
}

// The second largest |eigenvalue| of the topology's mixing matrix.
double second_eigenvalue(const std::string& spec, uint32_t n, uint64_t seed) {
  auto topology = peers::make_topology(spec, n, seed);
  EXPECT_TRUE(topology.is_ok());
  const Eigen::MatrixXd w = peers::mixing_matrix(**topology, 0);
  Eigen::EigenSolver<Eigen::MatrixXd> solver(w);
  std::vector<double> abs;
  for (const auto& v : solver.eigenvalues()) abs.push_back(std::abs(v));
  std::sort(abs.rbegin(), abs.rend());
  return abs[1];
}

class SpectralGap : public ::testing::TestWithParam<std::tuple<const char*, uint32_t>> {};

// With no local steps, x <- W x: the replicas' squared distance from their mean
// shrinks by lambda_2^2 a round once the faster modes are gone.
TEST_P(SpectralGap, ConsensusContractsByTheSecondEigenvalueSquared) {
  const auto [spec, n] = GetParam();
  WorldOptions o;
  o.nodes = n;
  o.topology = spec;
  o.model = "mixing";
  o.numel = 256;
  o.rounds = 300;
  const Report report = run(o);
  ASSERT_EQ(report.rounds.size(), o.rounds);
  const double lambda = second_eigenvalue(spec, n, o.seed);
  ASSERT_GT(lambda, 0.3) << "a graph that mixes this fast leaves nothing to measure";
  // From where the fast modes have faded (5 rounds after it fell under 5 % of the start)
  // to where float rounding would take over (1e-9 of it).
  const double start = report.rounds[0].consensus;
  size_t from = 0, to = 0;
  while (from + 1 < report.rounds.size() && report.rounds[from].consensus > 5e-2 * start) ++from;
  from += 5;
  for (to = from; to + 1 < report.rounds.size(); ++to)
    if (report.rounds[to + 1].consensus < 1e-9 * start) break;
  ASSERT_GE(to, from + 10) << "too few rounds to measure a rate";
  const double rate = std::pow(report.rounds[to].consensus / report.rounds[from].consensus,
                               1.0 / static_cast<double>(to - from));
  std::printf("%s on %u nodes: consensus x%.4f a round over rounds %zu-%zu, lambda_2^2 = %.4f\n",
              spec, n, rate, from, to, lambda * lambda);
  EXPECT_NEAR(rate, lambda * lambda, 0.05 * lambda * lambda)
      << spec << " on " << n << " nodes: lambda_2 = " << lambda;
  // The mean is kept: gossip with a doubly stochastic W moves no replica's average.
  EXPECT_LT(report.rounds.back().suboptimality, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Graphs, SpectralGap,
                         ::testing::Values(std::tuple{"ring", 16u}, std::tuple{"ring", 32u},
                                           std::tuple{"torus:4x8", 32u},
                                           std::tuple{"exponential", 32u}),
                         // Named for the graph: gtest's default printed the string's
                         // address, a name that changed from build to build.
                         [](const auto& info) {
                           return gtest_param_name(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Started in the K-th Fourier mode of the ids, a ring's replicas are an eigenvector of
// its W = (I + shift + shift^-1) / 3: their distance shrinks by the mode's eigenvalue,
// (1 + 2 cos(2 pi K / n)) / 3, squared, every round from the first. K = 1 is the slowest
// mode, the spectral gap's; K = 2 shrinks faster, by its own.
TEST(Simulation, ARingStartedInItsSlowestModeContractsByItsEigenvalueFromTheFirstRound) {
  for (const uint32_t k : {1u, 2u}) {
    WorldOptions o;
    // 64 nodes: the mode's factor, 0.9936 a round, is far from every other mode's (the
    // next, K = 2, 0.9744); 256 nodes took 21 s of the sanitizer stage (CI run 78).
    o.nodes = 64;
    o.topology = "ring";
    o.model = "mixing";
    o.numel = 16;
    o.rounds = 40;
    o.start_mode = k;
    const Report report = run(o);
    ASSERT_EQ(report.rounds.size(), o.rounds);
    const double lambda = (1 + 2 * std::cos(2 * std::numbers::pi * k / o.nodes)) / 3;
    // Round 0's row is after the first mix: the start's distance is 1/2 an element.
    EXPECT_NEAR(report.rounds[0].consensus, 0.5 * lambda * lambda, 1e-6) << k;
    for (size_t r = 1; r < report.rounds.size(); ++r)
      ASSERT_NEAR(report.rounds[r].consensus / report.rounds[r - 1].consensus, lambda * lambda,
                  1e-5)
          << "K " << k << ", round " << r;
    if (k == 1) {
      auto ring = peers::make_topology("ring", o.nodes, o.seed);
      ASSERT_TRUE(ring.is_ok());
      auto gap = peers::spectral_gap(**ring);
      ASSERT_TRUE(gap.is_ok());
      EXPECT_NEAR(1 - gap->gap, lambda, 1e-9);
    }
  }
}

WorldOptions busy_world() {
  WorldOptions o;
  o.nodes = 12;
  o.topology = "exponential";
  o.codec = "qsgd:16";
  o.numel = 2000;
  o.chunk_elems = 700;
  o.rounds = 15;
  o.noise = 0.1;
  o.links.all = {2ms, 1ms, 50e6};
  o.step_time = 5ms;
  return o;
}

TEST(Simulation, TheSameSeedGivesTheSameRun) {
  const Report a = run(busy_world());
  const Report b = run(busy_world());
  ASSERT_EQ(a.rounds.size(), 15u);
  ASSERT_EQ(b.rounds.size(), a.rounds.size());
  for (size_t r = 0; r < a.rounds.size(); ++r) {
    EXPECT_EQ(a.rounds[r].time_s, b.rounds[r].time_s) << "round " << r;
    EXPECT_EQ(a.rounds[r].consensus, b.rounds[r].consensus) << "round " << r;
    EXPECT_EQ(a.rounds[r].wire_bytes_per_node, b.rounds[r].wire_bytes_per_node) << "round " << r;
  }
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.virtual_s, b.virtual_s);
  // Not a run that did nothing: time passed (15 steps of 5 ms at least), bytes went out,
  // and the quadratic's mean approached its optimum.
  EXPECT_GT(a.virtual_s, 15 * 0.005);
  EXPECT_GT(a.wire_bytes, 12u * 15 * 2000 / 2);
  EXPECT_LT(a.rounds.back().suboptimality, a.rounds.front().suboptimality);
  WorldOptions other = busy_world();
  other.seed = 2;
  EXPECT_NE(run(other).rounds.back().consensus, a.rounds.back().consensus);
}

// Virtual-time twin of the in-process world's dead-node test: a neighbor whose machine
// goes away (its connections stay up) is dropped once its silence passes dead-after
// (heartbeats every 50 ms, 200 ms), in one round; the next rounds go at full speed,
// without it. One whose process dies is dropped a dead-after sooner: its connections
// drop, and it is left out once it has been silent 100 ms.
TEST(Simulation, ADeadNeighborCostsOneRoundItsSilence) {
  WorldOptions o;
  o.nodes = 8;
  o.topology = "ring";
  o.numel = 100;
  o.rounds = 8;
  o.step_time = 10ms;
  o.links.all.latency = 1ms;
  o.patience = 5000ms;  // the silence decides, not the patience
  o.heartbeat = 50ms;
  o.dead_after = 200ms;
  o.dead_after_factor = 0;  // always 200 ms
  o.deaths[3] = 4;
  o.dies_as = "machine";
  const Report report = run(o);
  ASSERT_EQ(report.rounds.size(), 8u);
  std::vector<double> took;
  for (size_t r = 1; r < report.rounds.size(); ++r)
    took.push_back(report.rounds[r].time_s - report.rounds[r - 1].time_s);
  // Round 4: node 3's neighbors wait until it has been silent 200 ms (its last
  // message: round 3's, about 11 ms before they start round 4), then mix without it.
  EXPECT_GT(took[3], 0.150) << "round 4";
  EXPECT_LT(took[3], 0.250) << "round 4";
  for (size_t r : {0, 1, 2, 4, 5, 6})
    EXPECT_LT(took[r], 0.015) << "round " << r + 1 << ": a step and a message";
  EXPECT_EQ(report.rounds[3].nodes, 8u);
  EXPECT_EQ(report.rounds[4].nodes, 7u);
  // And the same to the nanosecond when run again.
  EXPECT_EQ(run(o).rounds[4].time_s, report.rounds[4].time_s);
  o.dies_as = "process";
  const Report killed = run(o);
  ASSERT_EQ(killed.rounds.size(), 8u);
  const double round4 = killed.rounds[4].time_s - killed.rounds[3].time_s;
  EXPECT_GT(round4, 0.080) << "silent 100 ms: its last message came about 11 ms before";
  EXPECT_LT(round4, 0.120);
  EXPECT_EQ(killed.rounds[4].nodes, 7u);
}

// --peer-lists graph (each node lists only whom it exchanges with, and the two
// coordinators) is a simulation's economy: the run is the same, byte for byte, as with
// every node listing every node.
TEST(Simulation, GraphPeerListsGiveTheSameRunAsFullOnes) {
  for (const char* topology : {"exponential", "one-peer-exponential", "torus"}) {
    SCOPED_TRACE(topology);
    WorldOptions o;
    o.nodes = 36;
    o.topology = topology;
    o.numel = 200;
    o.rounds = 12;
    o.step_time = 50ms;
    o.heartbeat = 100ms;
    o.dead_after = 1000ms;
    o.links.all.latency = 1ms;
    o.links.all.bytes_per_s = 125e6;
    const Report all = run(o);
    o.peer_lists = "graph";
    const Report graph = run(o);
    ASSERT_EQ(graph.rounds.size(), all.rounds.size());
    EXPECT_EQ(graph.wire_bytes, all.wire_bytes);
    EXPECT_EQ(graph.messages, all.messages);
    EXPECT_EQ(graph.virtual_s, all.virtual_s);
    EXPECT_EQ(graph.rounds.back().consensus, all.rounds.back().consensus);
  }
  WorldOptions bad;
  bad.peer_lists = "graph";
  bad.deaths[3] = 2;
  EXPECT_NE(simulate(bad).status().message().find("--peer-lists graph"), std::string::npos);
}

// 16 nodes of D-PSGD on the exponential graph, 100 ms steps, 1 ms links, and a fixed
// dead-after of 1 s (heartbeats every 100 ms): the churn tests' cluster.
WorldOptions churning_cluster() {
  WorldOptions o;
  o.nodes = 16;
  o.topology = "exponential";
  o.numel = 100;
  o.rounds = 200;
  o.step_time = 100ms;
  o.links.all.latency = 1ms;
  o.heartbeat = 100ms;
  o.dead_after = 1000ms;
  o.dead_after_factor = 0;  // always 1 s
  return o;
}

// Churn: nodes die at exponential times of the given rate; the survivors finish. Every
// death costs the whole cluster what its neighbors wait for it (the graph couples
// everyone to them within a few rounds). A process that dies closes its connections:
// its neighbors go on once it has been silent NeighborExchange::kLinkDownSilence (0.1
// s), about a step after its last message. A machine that goes away closes nothing:
// with the patience's ask (--patience-factor), about twice its floor (the rounds'
// waits were short, so after the floor they ask the dead node whether it is up, and go
// on without it a floor later); without it, a --dead-after, after which the dead node
// is presumed so (6 deaths, 4.5 s lost at a 1 s dead-after when written, before the
// ask).
TEST(Simulation, UnderChurnADeadProcessCostsAStepAndADeadMachineTwoPatienceFloors) {
  WorldOptions o = churning_cluster();
  o.dead_after = 3000ms;
  o.patience_floor = 500ms;
  const Report calm = run(o);
  o.churn_per_minute = 50;
  const auto lost_per_death = [&](const Report& churn) {
    EXPECT_EQ(churn.rounds.size(), o.rounds);
    EXPECT_GE(churn.died, 2u) << "too few deaths: the test shows little";
    EXPECT_LE(churn.died, 10u);
    EXPECT_EQ(churn.rounds.back().nodes, o.nodes - churn.died);
    return (churn.virtual_s - calm.virtual_s) / std::max<uint32_t>(churn.died, 1);
  };
  const Report processes = run(o);
  const double dropped = lost_per_death(processes);
  EXPECT_LT(dropped, 0.35) << processes.died << " deaths";
  o.dies_as = "machine";
  const Report adaptive = run(o);
  const double adapted = lost_per_death(adaptive);
  // Up to two floors each: less where its last message came a step before the wait
  // began, or two deaths' waits overlap (0.84 s a death, 6 deaths, when written).
  EXPECT_GT(adapted, 0.5) << adaptive.died << " deaths";
  EXPECT_LT(adapted, 1.1) << adaptive.died << " deaths";
  o.patience_factor = 0;
  const Report fixed = run(o);
  const double waited = lost_per_death(fixed);
  EXPECT_GT(waited, 1.5) << fixed.died << " deaths";
  EXPECT_LT(waited, 3.6) << fixed.died << " deaths";  // 2.57 s, 9 deaths
}

// A node that restarts (--rejoin-after) takes a live peer's model and runs the
// members' rounds again, and may die again. Its data comes back with it: the cluster
// ends near the undisturbed optimum, where without restarts the lost nodes' optima
// leave it off (by σ²k/(n(n−k)), scale.md's churn section). Machines that go away, so
// that the deaths cost a second each and the run is long enough for all but the last
// to come back (processes: below).
TEST(Simulation, ARestartedNodeTakesAPeersModelAndTheClusterRegainsItsOptimum) {
  WorldOptions o = churning_cluster();
  o.dies_as = "machine";
  o.churn_per_minute = 50;
  const Report gone = run(o);
  o.rejoin_after = 2s;
  const Report back = run(o);
  ASSERT_TRUE(back.failures.empty()) << back.failures.front();
  ASSERT_EQ(back.rounds.size(), o.rounds);
  ASSERT_GE(back.died, 2u) << "too few deaths: the test shows little";
  ASSERT_EQ(back.death_s.size(), back.died);
  std::string deaths;
  for (double t : back.death_s) deaths += fmt::format(" {:.2f}", t);
  // Every death comes back, but one in the run's last two seconds (the others done).
  EXPECT_GE(back.rejoined + 1, back.died) << "deaths at" << deaths << " s of " << back.virtual_s;
  EXPECT_EQ(back.state_bytes, back.rejoined * o.numel * sizeof(float));
  ASSERT_EQ(back.rejoin_s.size(), back.rejoined) << "each restart finishes a round";
  for (double s : back.rejoin_s) EXPECT_LT(s, 5.0) << "from its restart to its first round";
  EXPECT_GE(back.rounds.back().nodes, o.nodes - (back.died - back.rejoined));
  EXPECT_LT(back.rounds.back().suboptimality, gone.rounds.back().suboptimality / 10)
      << "with the restarted nodes' data back: " << back.rounds.back().suboptimality
      << ", without: " << gone.rounds.back().suboptimality;
  // The same deaths and restarts for the same seed.
  const Report again = run(o);
  EXPECT_EQ(again.rejoined, back.rejoined);
  EXPECT_EQ(again.virtual_s, back.virtual_s);
  EXPECT_EQ(again.rounds.back().consensus, back.rounds.back().consensus);
}

// Processes that die and restart (--rejoin-after): their neighbors go on without them
// at once (a tenth of a second), and three of these six deaths came within 0.4 s of each
// other. That is more joiners at once than a donor keeps offered states
// (StateTransfer::kMaxPinned, 2): by the time the first had heard every peer (it waits
// up to 2 s for those that are down), the third's join had pushed its offers out, and
// every donor said it no longer held them. It asks again (StateTransfer::fetch), and
// every death with the time to come back does; with one attempt the first failed.
TEST(Simulation, ProcessesThatRestartAtOnceAllTakeAPeersModel) {
  WorldOptions o = churning_cluster();
  o.churn_per_minute = 50;
  o.rejoin_after = 2s;
  const Report r = run(o);
  ASSERT_TRUE(r.failures.empty()) << r.failures.front();
  ASSERT_EQ(r.death_s.size(), r.died);
  std::string deaths;
  for (double t : r.death_s) deaths += fmt::format(" {:.2f}", t);
  // Back 2 s after its death, then up to 2 s for the offers (JoinOptions::offer_wait).
  const auto in_time = std::count_if(r.death_s.begin(), r.death_s.end(),
                                     [&](double t) { return t + 4.0 < r.virtual_s; });
  EXPECT_GE(in_time, 4) << "the test shows little: deaths at" << deaths;
  EXPECT_GE(r.rejoined, in_time) << "deaths at" << deaths << " s of " << r.virtual_s;
  for (double s : r.rejoin_s) EXPECT_LT(s, 5.0) << "from its restart to its first round";
}

// Heartbeats go to a node's neighbors over the graph's period and to the two
// coordinators, which beat everyone: what a node sends grows with its watchers, not
// with n. Before, every node beat every peer: 20 rounds of 100 ms under a 50 ms
// heartbeat were 4,358 messages a node at n = 128 (34 beats of 127), 550 at n = 16.
TEST(Simulation, TheMessagesANodeSendsGrowWithItsNeighborsNotWithTheCluster) {
  const auto per_node = [](uint32_t n, const char* topology) {
    WorldOptions o;
    o.nodes = n;
    o.topology = topology;
    o.numel = 100;
    o.rounds = 20;
    o.step_time = 100ms;
    o.links.all.latency = 1ms;
    o.heartbeat = 50ms;
    o.dead_after = 200ms;
    const Report report = run(o);
    EXPECT_EQ(report.rounds.size(), 20u);
    return static_cast<double>(report.messages) / n;
  };
  constexpr double kBeats = 40, kCoordinators = 2 * kBeats;  // their share of beating all
  // A ring: 40 models, 40 beats to 2 neighbors and 2 coordinators. At n = 16 more
  // nodes have a coordinator for a neighbor (one watcher fewer), hence the 20 %.
  const double ring16 = per_node(16, "ring"), ring128 = per_node(128, "ring");
  EXPECT_LT(ring128, 1.2 * ring16) << "n = 16: " << ring16 << ", n = 128: " << ring128;
  EXPECT_LT(ring128, 40 + kBeats * 4 + kCoordinators) << "messages a node sent";
  // One-peer exponential: 20 models; its neighbors change every round, over a period
  // of log2 n rounds, so the watchers are the 2 log2 n peers of the period.
  const double one = per_node(128, "one-peer-exponential");
  EXPECT_LT(one, 20 + kBeats * (2 * 7 + 2) + kCoordinators) << "messages a node sent";
}

// Virtual-time twin of GossipConsensus.ATrainerPausingLongerThanAHeartbeatIsNotTakenForDead
// (gossipd's defaults: heartbeat 1 s, dead-after learnt as 3 times the longest silence,
// floor 0.5 s): after fast rounds, node 3's trainer stops for 1.6 s. Its neighbors
// hear a heartbeat a second meanwhile; the learnt bound fell to the floor, under the
// heartbeat, and they took node 3 for dead and mixed without it while it mixed with
// them: the mean moved. Consensus alone (no local step), so the mean must not move.
TEST(Simulation, ATrainerPausingLongerThanAHeartbeatIsNotTakenForDead) {
  WorldOptions o;
  o.nodes = 8;
  o.topology = "ring";
  o.model = "mixing";
  o.numel = 100;
  o.rounds = 24;
  o.step_time = 10ms;
  o.links.all.latency = 1ms;
  o.pauses.push_back({3, 16, 1600ms});
  const Report report = run(o);
  ASSERT_EQ(report.rounds.size(), 24u);
  ASSERT_TRUE(report.failures.empty()) << report.failures.front();
  // For consensus alone the optimum is the first mean: suboptimality is how far the
  // mean moved.
  for (const RoundRow& row : report.rounds)
    EXPECT_LT(row.suboptimality, 1e-10) << "round " << row.round;
  EXPECT_LT(report.rounds.back().consensus, 0.1 * report.rounds.front().consensus);
  // The pause cost its length, once: round 16 waited for node 3.
  const double waited = report.rounds[16].time_s - report.rounds[15].time_s;
  EXPECT_GT(waited, 1.6);
  EXPECT_LT(waited, 1.7);
}

// Virtual-time twin of AsyncGossipConsensus.NoNodeRunsMoreThanTheStalenessBoundAheadOfAStraggler:
// one node of a 4-node ring steps 5 times slower. Its neighbors run ahead of it up to
// the staleness bound (2) plus the round in flight, and no further; node 1, two hops
// away, up to twice that. The mean is preserved exactly however stale the models.
TEST(Simulation, AsyncGossipRunsAtMostTheStalenessBoundAheadOfAStraggler) {
  constexpr uint64_t kStaleness = 2;
  WorldOptions o;
  o.nodes = 4;
  o.topology = "ring";
  o.strategy = "async-gossip";
  o.params.staleness = kStaleness;
  o.model = "mixing";
  o.numel = 100;
  o.rounds = 30;
  o.step_time = 10ms;
  o.slow[3] = 5;
  o.links.all.latency = 1ms;
  const Report report = run(o);
  ASSERT_TRUE(report.failures.empty()) << report.failures.front();
  ASSERT_EQ(report.finished.size(), 4u);
  const auto lead = [&](uint32_t i) { return lead_over(report, i, 3); };
  for (uint32_t neighbor : {0u, 2u}) {
    EXPECT_LE(lead(neighbor), static_cast<int>(kStaleness) + 1) << "node " << neighbor;
    EXPECT_GE(lead(neighbor), static_cast<int>(kStaleness))
        << "node " << neighbor << ": not held in lockstep";
  }
  EXPECT_LE(lead(1), 2 * static_cast<int>(kStaleness + 1));
  for (const RoundRow& row : report.rounds)
    EXPECT_LT(row.suboptimality, 1e-10) << "the mean moved in round " << row.round;
  EXPECT_LT(report.rounds.back().consensus, 1e-2 * report.rounds.front().consensus);
  std::printf("leads over the straggler: node 0 %d, node 1 %d, node 2 %d rounds\n", lead(0),
              lead(1), lead(2));
  // The straggler sets the pace: 30 of its 50 ms steps (its last round mixes what came
  // already: nothing more to wait for).
  EXPECT_GE(report.virtual_s, 30 * 0.050);
  EXPECT_LT(report.virtual_s, 30 * 0.050 + 0.2);
}

// Virtual-time twin of Experiments.PartitionHeals under D-PSGD: a ring of 6 training
// on non-IID data is cut 3+3 from 1 s to 7 s (what was sent across arrives when it
// heals, as over TCP connections that stay up). Each side keeps training, the sides
// drift apart toward their own optima, and once healed they merge back to where the
// undisturbed run is. The mean is that of the undisturbed run throughout: the edges
// cut are dropped on both ends.
TEST(Simulation, APartitionThatHealsLeavesBothSidesTrainingAndMergesThem) {
  WorldOptions o;
  o.nodes = 6;
  o.topology = "ring";
  o.numel = 100;
  o.rounds = 100;
  o.seed = 3;
  o.step_time = 100ms;
  o.links.all.latency = 1ms;
  const Report calm = run(o);
  peers::Outage cut;
  cut.from = 1s;
  cut.until = 7s;
  cut.side = {0, 1, 2};
  o.links.outages.push_back(cut);
  const Report split = run(o);
  ASSERT_TRUE(split.failures.empty()) << split.failures.front();
  ASSERT_EQ(split.rounds.size(), 100u);
  for (uint32_t i = 0; i < 6; ++i) {
    const auto& t = split.finished[i];
    const auto during =
        std::count_if(t.begin(), t.end(), [](double s) { return s >= 1.0 && s < 7.0; });
    EXPECT_GE(during, 20) << "node " << i << " stopped training while cut off";
  }
  double apart = 0;
  size_t healed_at = 0;
  for (size_t r = 0; r < split.rounds.size(); ++r) {
    if (split.rounds[r].time_s < 7.0) apart = std::max(apart, split.rounds[r].consensus);
    if (healed_at == 0 && split.rounds[r].time_s > 8.0) healed_at = r;
  }
  const double calm_end = calm.rounds.back().consensus;
  EXPECT_GT(apart, 10 * calm_end) << "the sides did not drift apart";
  ASSERT_GT(healed_at, 0u);
  EXPECT_LT(split.rounds[healed_at].consensus, 1.1 * calm_end)
      << "not merged a second after the heal";
  EXPECT_NEAR(split.rounds.back().consensus, calm_end, 1e-3 * calm_end);
  for (size_t r = 0; r < split.rounds.size(); ++r)
    EXPECT_NEAR(split.rounds[r].suboptimality, calm.rounds[r].suboptimality,
                1e-4 * calm.rounds[r].suboptimality + 1e-12)
        << "round " << r << ": the mean left the undisturbed run's";
}

// Local SGD over the all-gather: after every round every node holds the same model,
// and each sent its model to each of the others.
TEST(Simulation, LocalSgdOverTheAllGatherAgreesEveryRound) {
  WorldOptions o;
  o.nodes = 6;
  o.strategy = "local-sgd";
  o.transport = "allgather";
  o.numel = 500;
  o.rounds = 10;
  o.links.all = {1ms, {}, 100e6};
  o.step_time = 5ms;
  const Report report = run(o);
  ASSERT_EQ(report.rounds.size(), 10u);
  for (const RoundRow& row : report.rounds) EXPECT_LT(row.consensus, 1e-12) << row.round;
  const double model_bytes = 500 * 4;
  EXPECT_NEAR(report.rounds.back().wire_bytes_per_node / 10, 5 * model_bytes,
              0.2 * 5 * model_bytes);
  EXPECT_LT(report.rounds.back().suboptimality, 0.5 * report.rounds.front().suboptimality);
}

// gossipd's ring all-reduce (sgd/membership/peer_ring.h) over the simulated links: every
// node ends each round with the same bits, sends 2(n-1)/n of the model, and a round
// takes what the ring's cost model says: 2(n-1) steps, each a segment's time on the
// uplink plus the link's latency.
TEST(Simulation, TheRingAllReduceSendsTwiceTheModelAndTakesItsStepsLatency) {
  for (const uint32_t n : {4u, 16u}) {
    WorldOptions o;
    o.nodes = n;
    o.strategy = "allreduce";
    o.allreduce_algorithm = "ring";
    o.numel = 40'000;  // 160 KB: above the size the ring gathers whole
    o.rounds = 6;
    o.links.all = {1ms, {}, 125e6};  // 1 Gbit/s
    o.step_time = 50ms;
    const Report report = run(o);
    ASSERT_EQ(report.rounds.size(), 6u) << n;
    for (const RoundRow& row : report.rounds) EXPECT_LT(row.consensus, 1e-12) << row.round;
    const double model = 40'000 * 4;
    const double per_round =
        (report.rounds.back().wire_bytes_per_node - report.rounds[1].wire_bytes_per_node) / 4;
    const double ring = 2.0 * (n - 1) / n * model;
    EXPECT_GT(per_round, ring) << n;
    EXPECT_LT(per_round, ring * 1.01) << n << ": frames and heartbeats are under 1 %";
    const double seconds = (report.rounds.back().time_s - report.rounds[1].time_s) / 4 - 0.050;
    const double predicted = 2.0 * (n - 1) * (0.001 + (model / n) / 125e6);
    EXPECT_GT(seconds, predicted) << n;
    EXPECT_LT(seconds, predicted * 1.1) << n;
  }
}

// The elastic ring's way back, as gossipd's sync worker takes it: the restarted node
// fetches a member's state, asks back in, and the ring re-forms with it; from then on
// it averages with the others again, and every round's replicas agree. Back within the
// members' re-forming (2 s, under --dead-after's 3 s), it asks into a view they are
// leaving: it runs a round alone, and then, left out, takes a member's state and asks
// in again, as the daemon's come_back does. Back after it (5 s), it is in at once.
// SMA's central models take the same way back (the learners follow theirs).
TEST(Simulation, ANodeRestartedIntoAnElasticRingIsTakenBackAndAgreesAgain) {
  struct Case {
    const char* strategy;
    std::chrono::seconds after;
  };
  for (const auto& [strategy, after] :
       {Case{"local-sgd", 2s}, Case{"local-sgd", 5s}, Case{"sma", 2s}}) {
    WorldOptions o;
    o.nodes = 6;
    o.strategy = strategy;
    o.params.learners_per_device = std::string(strategy) == "sma" ? 2 : 1;
    o.elastic = true;
    o.numel = 2'000;
    o.rounds = 40;
    o.links.all = {1ms, {}, 125e6};
    o.step_time = 100ms;
    o.deaths[2] = 5;
    o.rejoin_after = after;
    const Report report = run(o);
    SCOPED_TRACE(fmt::format("{}, back after {} s", strategy, after.count()));
    ASSERT_EQ(report.rounds.size(), 40u);
    EXPECT_EQ(report.died, 1u);
    EXPECT_EQ(report.rejoined, 1u);
    const bool during_reform = after < 3s;
    if (during_reform)
      EXPECT_GE(report.came_back, 1u);
    else
      EXPECT_EQ(report.came_back, 0u);
    EXPECT_EQ(report.state_bytes, o.numel * sizeof(float)) << "the restart's one state";
    ASSERT_EQ(report.rejoin_s.size(), 1u);
    EXPECT_LT(report.rejoin_s[0], 10.0) << "from its restart to its first round";
    // Back in: it ran the last rounds with the others, and every round's replicas
    // agree: the result of the round it ran alone is the member's model it came back
    // with, as the daemon's is (its come_back replaces the round's result).
    EXPECT_EQ(report.rounds.back().nodes, 6u);
    EXPECT_GT(report.finished[2].size(), 15u) << "rounds node 2 finished, before and after";
    for (const RoundRow& row : report.rounds) EXPECT_LT(row.consensus, 1e-12) << row.round;
    EXPECT_LT(report.rounds.back().suboptimality, 0.1 * report.rounds.front().suboptimality);
    o.rejoin_after.reset();
    EXPECT_EQ(run(o).rounds.back().nodes, 5u) << "the same death, no restart: the run's end";
  }
}

// The elastic ring re-forms without a node that died and the others train on, every
// round's result the same on each of them; auto picks the algorithm by size.
TEST(Simulation, AnElasticRingLeavesADeadNodeOutAndTrainsOn) {
  WorldOptions o;
  o.nodes = 6;
  o.strategy = "local-sgd";
  o.elastic = true;
  o.numel = 2'000;
  o.rounds = 12;
  o.links.all = {1ms, {}, 125e6};
  o.step_time = 20ms;
  o.deaths[2] = 5;
  const Report report = run(o);
  ASSERT_EQ(report.rounds.size(), 12u);
  for (const RoundRow& row : report.rounds) {
    EXPECT_EQ(row.nodes, row.round < 5 ? 6u : 5u) << row.round;
    EXPECT_LT(row.consensus, 1e-12) << row.round;
  }
  // The round that found node 2 gone waited for the members' probes (--dead-after, 3 s).
  const double gap = report.finished[0][5] - report.finished[0][4];
  EXPECT_GT(gap, 3.0);
  EXPECT_LT(gap, 4.0);
  EXPECT_LT(report.rounds.back().suboptimality, 0.5 * report.rounds.front().suboptimality);
}

// --model mlp: each node trains the reference MLP on its shard of Fashion-MNIST, as
// gossip-train does, and the replicas' mean learns. What ties it to a real cluster:
// `gossipctl cluster --nodes 4 --strategy gossip --steps 300` sent 564,398,921 bytes a
// node and its average model scored 83.78 %; the simulation of the same sends 564,380,421
// a node and scores 84.00 % (docs/simulation.md). Here 100 rounds: the bytes are those
// of two neighbors' models a round, and the mean model is well past chance.
TEST(Simulation, TheMlpLearnsFashionMnistOnEveryNodesShard) {
  WorldOptions o;
  o.nodes = 4;
  o.strategy = "gossip";
  o.model = "mlp";
  o.rounds = 100;
  o.step_time = 10ms;
  const Report report = run(o);
  ASSERT_EQ(report.rounds.size(), 100u);
  const double model_bytes = static_cast<double>(MlpCluster::numel()) * 4;
  EXPECT_NEAR(report.rounds.back().wire_bytes_per_node / 100, 2 * model_bytes,
              0.005 * 2 * model_bytes);
  EXPECT_LT(report.rounds.back().train_loss, 0.5 * report.rounds.front().train_loss);
  EXPECT_GT(report.test_accuracy, 0.75);
  EXPECT_LT(report.test_loss, 0.8);
  o.model = "quadratic";
  EXPECT_EQ(run(o).test_accuracy, -1) << "only the MLP is scored on the test set";
}

// SMA over the MLP: each of a node's learners is a trainer of its own on a shard of its
// own, the node's rounds run on its central model, and the mean of the central models
// is what the test set scores. With one learner SMA is local SGD, step for step, to
// rounding: the central model's update and correction are other float operations,
// whose last bits the training then amplifies (a thousandth of the loss by round 55).
TEST(Simulation, SmaTrainsTheMlpWithALearnerOnEachShard) {
  WorldOptions o;
  o.nodes = 2;
  o.strategy = "sma";
  o.params.learners_per_device = 2;
  o.model = "mlp";
  o.rounds = 100;
  o.step_time = 10ms;
  const Report sma = run(o);
  ASSERT_EQ(sma.rounds.size(), 100u);
  EXPECT_LT(sma.rounds.back().train_loss, 0.5 * sma.rounds.front().train_loss);
  EXPECT_GT(sma.test_accuracy, 0.75);
  EXPECT_LT(sma.test_loss, 0.8);
  o.params.learners_per_device = 1;
  const Report one = run(o);
  o.strategy = "local-sgd";
  const Report local = run(o);
  ASSERT_EQ(one.rounds.size(), local.rounds.size());
  for (size_t r = 0; r < 20; ++r)
    EXPECT_NEAR(one.rounds[r].train_loss, local.rounds[r].train_loss,
                1e-4 * local.rounds[r].train_loss)
        << "round " << r;
  EXPECT_NEAR(one.test_accuracy, local.test_accuracy, 0.01);
  std::printf("SMA, 2 nodes: 2 learners %.4f, 1 learner %.4f, local SGD %.4f\n", sma.test_accuracy,
              one.test_accuracy, local.test_accuracy);
}

// The same under the sanitizers, small: 2 nodes of 3 learners, each a trainer of its own
// (attaching one twice is refused), for 2 rounds of batches of 8.
TEST(Simulation, SmaWithTheMlpGivesEachLearnerATrainer) {
  WorldOptions o;
  o.nodes = 2;
  o.strategy = "sma";
  o.params.learners_per_device = 3;
  o.model = "mlp";
  o.mlp.batch = 8;
  o.rounds = 2;
  const Report report = run(o);
  ASSERT_EQ(report.rounds.size(), 2u);
  EXPECT_GT(report.rounds[0].train_loss, 1.0) << "a first step's loss, near ln 10";
  EXPECT_LT(report.rounds[0].train_loss, 4.0);
  EXPECT_GT(report.test_accuracy, 0.0);
  o.nodes = 1000;
  o.params.learners_per_device = 64;
  EXPECT_NE(simulate(o).status().message().find(
                "--nodes 1000 x --learners-per-device 64: 64000 trainers of the MLP"),
            std::string::npos)
      << simulate(o).status().message();
}

// Virtual-time twin of LocalSgdIntegration.AnAdaptiveDeadlineNoticesAHungPeerLongBeforeTheFixedOne:
// local SGD over the all-gather, rounds of 100 ms steps; node 3 dies before round 12.
// With the deadline following the rounds (factor 3, floor 1 s; sgd/round_deadline.h)
// the others' round 12 fails about a second after their round 11 ended; with the fixed
// one (factor 0, and auto for local SGD), at the 30 s round timeout.
TEST(Simulation, AnAdaptiveDeadlineNoticesADeadPeerLongBeforeTheFixedOne) {
  // -1: gossipd's auto, which is 0 (the fixed deadline) outside the gossip family.
  for (const double factor : {3.0, 0.0, -1.0}) {
    WorldOptions o;
    o.nodes = 4;
    o.strategy = "local-sgd";
    o.transport = "allgather";  // the ring sees a dead peer's connections close at once
    o.numel = 100;
    o.rounds = 20;
    o.links.all = {1ms, {}, 1e9};
    o.step_time = 100ms;
    o.round_timeout = 30000ms;
    o.round_timeout_factor = factor;
    o.round_timeout_floor = 1000ms;
    o.deaths[3] = 12;
    auto report = simulate(o);
    ASSERT_TRUE(report.is_ok()) << report.status().message();
    ASSERT_EQ(report->failures.size(), 3u) << "factor " << factor;
    for (const std::string& f : report->failures) {
      EXPECT_NE(f.find("round 12:"), std::string::npos) << f;
      EXPECT_EQ(f.find("the round's deadline was 1.00 s") != std::string::npos, factor > 0) << f;
    }
    ASSERT_EQ(report->finished[0].size(), 12u);
    // After round 11: a 100 ms step, then the round's wait for node 3.
    const double noticed = report->virtual_s - report->finished[0][11];
    if (factor > 0) {
      EXPECT_GT(noticed, 1.05) << "the floor: 3 x a round of ~2 ms is under it";
      EXPECT_LT(noticed, 1.2);
    } else {
      EXPECT_GT(noticed, 30.05);
      EXPECT_LT(noticed, 30.2);
    }
  }
}

// Crossbow's SMA (sgd/strategies/sma/sma.h) over the ring all-reduce. With one learner a
// node it is local SGD (sma.h says why), to float rounding: z + (w - z) is w only
// nearly. With K learners, each with its own gradient noise, the mean of all the
// learners follows the full gradient with the noise of K times as many draws: at
// step size a and noise s per element, n nodes' mean ends a^2 s^2 / (n K (1 - (1 - a)^2))
// from the optimum per element in expectation, K times closer with K learners. The
// nodes agree on their central models after every round.
TEST(Simulation, SmaWithOneLearnerIsLocalSgdAndMoreLearnersAverageTheirNoise) {
  WorldOptions o;
  o.nodes = 4;
  o.strategy = "local-sgd";
  o.allreduce_algorithm = "ring";
  o.numel = 2000;
  o.rounds = 60;
  o.noise = 0.5;
  o.links.all = {1ms, {}, 125e6};
  o.step_time = 5ms;
  const Report local = run(o);
  o.strategy = "sma";
  const Report one = run(o);
  ASSERT_EQ(one.rounds.size(), 60u);
  ASSERT_EQ(local.rounds.size(), 60u);
  for (size_t r = 0; r < 60; ++r) {
    EXPECT_NEAR(one.rounds[r].suboptimality, local.rounds[r].suboptimality,
                1e-4 * local.rounds[r].suboptimality)
        << r;
    EXPECT_LT(one.rounds[r].consensus, 1e-12) << r;
    EXPECT_EQ(one.rounds[r].wire_bytes_per_node, local.rounds[r].wire_bytes_per_node) << r;
  }
  o.params.learners_per_device = 4;
  const Report four = run(o);
  ASSERT_EQ(four.rounds.size(), 60u);
  for (const RoundRow& row : four.rounds) EXPECT_LT(row.consensus, 1e-12) << row.round;
  // The last 20 rounds, well past the start's error (it shrinks by 0.81 a round).
  auto floor = [](const Report& r) {
    double sum = 0;
    for (size_t i = 40; i < 60; ++i) sum += r.rounds[i].suboptimality;
    return sum / 20;
  };
  const double a = 0.1, s = 0.5, n = 4;
  const double predicted = a * a * s * s / (n * (1 - (1 - a) * (1 - a)));
  EXPECT_NEAR(floor(one), predicted, 0.15 * predicted);
  EXPECT_NEAR(floor(four), predicted / 4, 0.15 * predicted / 4);
  // The same bytes: the round averages one central model a node, whatever its learners.
  EXPECT_EQ(four.rounds.back().wire_bytes_per_node, one.rounds.back().wire_bytes_per_node);
}

// gossipd's parameter servers (sgd/strategies/ps/) over the simulated links, under bsp:
// every worker ends each round with the servers' model, which moves as local SGD's mean
// does (the first round takes the server's model, so from round 1 on). A round costs
// a push (the model over the worker's uplink and the latency) and then the server's n - 1
// answers to the pulls, one after another over its uplink: step + 2 latency + n model /
// bandwidth, against the ring's 2(n - 1) steps of a segment. A worker sends its model
// and the server n - 1 of them: 2(n - 1)/n models a node a round, as the ring.
TEST(Simulation, ParameterServersUnderBspCostWhatTheServersUplinkCarries) {
  for (const uint32_t n : {4u, 16u}) {
    WorldOptions o;
    o.nodes = n;
    o.strategy = "ps";
    o.numel = 40'000;  // 160 KB: the bandwidth's term is most of the round
    o.rounds = 12;
    o.links.all = {1ms, {}, 125e6};  // 1 Gbit/s
    o.step_time = 50ms;
    const Report report = run(o);
    ASSERT_EQ(report.rounds.size(), 12u) << n;
    for (const RoundRow& row : report.rounds) EXPECT_LT(row.consensus, 1e-12) << row.round;
    for (size_t r = 2; r < 12; ++r)
      EXPECT_NEAR(report.rounds[r].suboptimality / report.rounds[r - 1].suboptimality, 0.81, 1e-3)
          << n << ", round " << r << ": (1 - lr)^2, as local SGD's mean";
    const double model = 40'000 * 4;
    const auto& first = report.rounds[3];
    const auto& last = report.rounds.back();
    const double bytes = (last.wire_bytes_per_node - first.wire_bytes_per_node) / 8;
    const double ideal = 2.0 * (n - 1) / n * model;
    EXPECT_GT(bytes, ideal) << n;
    EXPECT_LT(bytes, ideal * 1.01) << n << ": frames and heartbeats are under 1 %";
    const double seconds = (last.time_s - first.time_s) / 8 - 0.050;
    const double predicted = 2 * 0.001 + n * model / 125e6;
    EXPECT_NEAR(seconds, predicted, 0.02 * predicted) << n;
  }
}

// Stale-synchronous parallel with a straggler (5 times slower steps): no worker finishes
// a round more than S + 1 ahead of it (a pull at clock c waits for every push of
// c - S, and the straggler finishes its round after its own pull); under async the
// others run on without it, and its model falls behind theirs.
TEST(Simulation, SspKeepsWorkersWithinTheStalenessOfAStragglerAndAsyncDoesNot) {
  WorldOptions o;
  o.nodes = 4;
  o.strategy = "ps";
  o.numel = 1000;
  o.rounds = 30;
  o.step_time = 10ms;
  o.slow[3] = 5;
  o.links.all.latency = 1ms;
  for (const uint64_t staleness : {1u, 3u}) {
    o.params.ps.mode = sgd::ParameterServerOptions::Mode::kSsp;
    o.params.ps.staleness = staleness;
    const Report report = run(o);
    ASSERT_EQ(report.finished.size(), 4u);
    std::printf("ssp:%d: leads over the straggler %d, %d, %d rounds\n", static_cast<int>(staleness),
                lead_over(report, 0, 3), lead_over(report, 1, 3), lead_over(report, 2, 3));
    for (uint32_t i = 0; i < 3; ++i) {
      EXPECT_LE(lead_over(report, i, 3), static_cast<int>(staleness) + 1) << i;
      EXPECT_GE(lead_over(report, i, 3), static_cast<int>(staleness))
          << i << ": held closer than the bound";
    }
  }
  o.params.ps.mode = sgd::ParameterServerOptions::Mode::kAsync;
  const Report async = run(o);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_GE(lead_over(async, i, 3), 20) << i;
  std::printf("async: leads over the straggler %d, %d, %d rounds\n", lead_over(async, 0, 3),
              lead_over(async, 1, 3), lead_over(async, 2, 3));
}

// Deaths among the parameter servers' nodes (each a worker too): a worker that dies is
// left out of the clock after its dead-after and the others train on; a server that dies
// is replaced by the next holder of its shard where there is one (--ps-replicas), and
// otherwise its workers' rounds fail, naming it. The servers left serve until the
// workers are done, and the run ends.
TEST(Simulation, ParameterServersGoOnWithoutADeadWorkerAndOnAReplicaOfADeadServer) {
  WorldOptions o;
  o.nodes = 6;
  o.strategy = "ps";
  o.numel = 1000;
  o.rounds = 20;
  o.step_time = 10ms;
  o.links.all.latency = 1ms;
  // The five left run every round and end on one model.
  auto expect_trained_on = [](const Report& report) {
    EXPECT_EQ(report.died, 1u);
    ASSERT_EQ(report.rounds.size(), 20u);
    EXPECT_EQ(report.rounds.back().nodes, 5u);
    EXPECT_LT(report.rounds.back().consensus, 1e-12);
  };
  o.deaths[4] = 5;  // a worker
  expect_trained_on(run(o));
  o.deaths = {{0, 5}};  // the server of the one shard
  o.params.ps.replicas = 1;
  expect_trained_on(run(o));
  o.params.ps.replicas = 0;
  auto alone = simulate(o);
  ASSERT_TRUE(alone.is_ok()) << alone.status().message();
  ASSERT_FALSE(alone->failures.empty());
  for (const std::string& f : alone->failures)
    EXPECT_NE(f.find("parameter server node 0 (shard 0) has been silent"), std::string::npos) << f;
}

TEST(Simulation, BadOptionsAreRefusedNamingTheOption) {
  WorldOptions o;
  o.strategy = "ps";
  o.params.ps.servers = 17;
  auto r = simulate(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--servers: 17 servers, but the cluster has 16 nodes"),
            std::string::npos)
      << r.status().message();
  o = {};
  o.model = "resnet";
  EXPECT_NE(simulate(o).status().message().find("--model 'resnet'"), std::string::npos);
  o.model = "mlp";
  o.mlp.data_dir = "/nonexistent";
  EXPECT_NE(simulate(o).status().message().find("reads Fashion-MNIST from /nonexistent"),
            std::string::npos);
  o.mlp.data_dir = trainer::kDefaultDataDir;
  o.mlp.partition = "skewed";
  EXPECT_NE(simulate(o).status().message().find("--data-partition"), std::string::npos);
  o = {};
  o.start_mode = 1;
  EXPECT_NE(simulate(o).status().message().find("--start-mode 1: with --model mixing only"),
            std::string::npos);
  o.model = "mixing";
  o.start_mode = 9;
  EXPECT_NE(simulate(o).status().message().find("at most half the nodes (8)"), std::string::npos);
  o = {};
  o.deaths[99] = 1;
  EXPECT_NE(simulate(o).status().message().find("no node 99"), std::string::npos);
  o = {};
  o.codec = "zstd";
  EXPECT_FALSE(simulate(o).is_ok());
  o = {};
  o.strategy = "allreduce";
  o.transport = "rdma";
  EXPECT_NE(simulate(o).status().message().find("--transport 'rdma'"), std::string::npos);
  o.transport = "tcp";
  o.allreduce_algorithm = "hypercube";
  EXPECT_NE(simulate(o).status().message().find("--allreduce-algorithm 'hypercube'"),
            std::string::npos);
  o.allreduce_algorithm = "auto";
  o.nodes = 5000;
  o.numel = 10;
  EXPECT_NE(simulate(o).status().message().find("--nodes 5000: the all-reduces over tcp take at "
                                                "most 4096"),
            std::string::npos);
  // A restart takes a peer's model: the gossip family, or local SGD and SMA on an
  // elastic ring (synchronous SGD's left-out members train alone); something must die.
  o = {};
  o.rejoin_after = 1s;
  EXPECT_NE(simulate(o).status().message().find("--rejoin-after: nothing dies"), std::string::npos);
  o.churn_per_minute = 10;
  o.strategy = "local-sgd";
  EXPECT_NE(simulate(o).status().message().find("--rejoin-after with --strategy local-sgd"),
            std::string::npos);
  o.elastic = true;
  o.strategy = "allreduce";
  EXPECT_NE(simulate(o).status().message().find("--rejoin-after with --strategy allreduce"),
            std::string::npos);
  o.strategy = "ps";
  EXPECT_NE(simulate(o).status().message().find("--rejoin-after with --strategy ps"),
            std::string::npos);
  o.strategy = "local-sgd";  // on an elastic ring: taken back, so only the death is missing
  o.churn_per_minute = 0;
  EXPECT_NE(simulate(o).status().message().find("--rejoin-after: nothing dies"), std::string::npos);
  // SMA's options, checked as gossipd checks them; its learners are its own.
  o = {};
  o.strategy = "sma";
  o.params.learners_per_device = 4;
  o.params.sma_alpha = 0.5;
  EXPECT_NE(simulate(o).status().message().find("--sma-alpha: 0.5 x 4 learners is over 1"),
            std::string::npos)
      << simulate(o).status().message();
  o.params.sma_alpha = 0;
  o.sma_momentum = 1;
  EXPECT_NE(simulate(o).status().message().find("--sma-momentum 1: in [0, 1)"), std::string::npos);
  o.sma_momentum = 0;
  o.strategy = "gossip";
  EXPECT_NE(simulate(o).status().message().find("--learners-per-device 4 with --strategy gossip"),
            std::string::npos);
  o.params.learners_per_device = 1;
  o.params.ps.servers = 2;
  EXPECT_NE(simulate(o).status().message().find("are the parameter servers' (--strategy ps), "
                                                "not gossip's"),
            std::string::npos);
  o.params.ps.servers = 1;
  o.sma_momentum = 0.5;
  EXPECT_NE(simulate(o).status().message().find("--sma-alpha and --sma-momentum are sma's, not "
                                                "gossip's"),
            std::string::npos);
  // Past the machine's memory (a row per pair of nodes): refused, not killed.
  o = {};
  o.nodes = 1'000'000;
  EXPECT_NE(simulate(o).status().message().find(
                "--nodes 1000000: about 330016.0 GB (330 bytes for each pair of nodes"),
            std::string::npos)
      << simulate(o).status().message();
}

}  // namespace
}  // namespace gossip::sim

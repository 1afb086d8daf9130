// Finding 5 of the security review: a node that rejoins took the freshest state any
// donor offered, however far ahead, and --trim did not apply to it, so one hostile
// donor reset it to any model, round and step. Four gossip daemons on a ring (--trim
// 1), node 3 hostile (gossipd-byzantine); node 0 is killed and restarted, and joins.
// Since state offers carry a manifest (a hash per chunk), a donor whose chunks are
// not its offer's is dropped at its first chunk.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "node_rounds.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;
constexpr size_t kNumel = 256;

// Runs the scenario with node 3 lying as `attack` says; returns node 0's model after
// it rejoined, and its daemon's log.
std::pair<std::vector<float>, std::string> rejoin_next_to_a_liar(const std::string& attack) {
  ::setenv("GOSSIP_ATTACK", attack.c_str(), 1);
  Cluster cluster(4, {"--strategy", "gossip", "--topology", "complete", "--trim", "1",
                      "--join-wait", "1", "--dead-after", "1", "--heartbeat", "0.2"});
  cluster.set_node_binary(3, binary("gossipd-byzantine"));
  cluster.start_all();
  ::unsetenv("GOSSIP_ATTACK");
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(attach(cluster, i, kNumel));
    if (!nodes.back()) return {};
    std::fill(nodes[i]->model.tensors[0].begin(), nodes[i]->model.tensors[0].end(),
              static_cast<float>(i));
  }
  sync_rounds({nodes[0].get(), nodes[1].get(), nodes[2].get(), nodes[3].get()}, 5);
  nodes[0].reset();
  cluster.daemon(0).signal(SIGKILL);
  cluster.daemon(0).wait(5s);
  sync_rounds({nodes[1].get(), nodes[2].get(), nodes[3].get()}, 3);
  cluster.start(0);
  auto back = attach(cluster, 0, kNumel);
  if (!back) return {};
  EXPECT_TRUE(back->model.initialized) << cluster.log(0);
  EXPECT_LT(back->model.start_step, 1000u) << "a step from the hostile offer";
  return {back->values(), cluster.log(0)};
}

TEST(JoinAttack, AFarAheadOfferIsNotTaken) {
  const auto [model, log] = rejoin_next_to_a_liar("far-state");
  ASSERT_FALSE(model.empty());
  // Honest values started in 0..3 and mix within that range.
  for (float v : model) ASSERT_TRUE(v >= 0.0f && v <= 3.0f) << v << "\n" << log;
  EXPECT_NE(log.find("not taken"), std::string::npos) << log;
}

// The liar offers the manifest of its true state and sends chunks scaled by 1e4:
// its chunk fails its hash, and the others' chunks make the state (on a complete
// graph under --trim the three donors hold the same state, and offer it alike).
TEST(JoinAttack, AScaledStateFailsItsManifest) {
  const auto [model, log] = rejoin_next_to_a_liar("scaled-state");
  ASSERT_FALSE(model.empty());
  for (float v : model) ASSERT_TRUE(v >= 0.0f && v <= 3.0f) << v << "\n" << log;
  EXPECT_NE(log.find("does not match its hash in the manifest"), std::string::npos) << log;
  EXPECT_NE(log.find("every chunk as its manifest"), std::string::npos) << log;
}

// Member adds nobody asked for (daemon/admission.h), from a process posing as node 2
// of a plain cluster whose node 2 is not running. A node whose fabric takes no new
// members (a fixed ring here) refuses each and counts it; before, the add reached a
// strategy it had none for and the daemon crashed. An elastic ring believes a
// member's adds, up to TrafficCounters::kMaxJoined: the 300th is refused, and the
// node still runs.
TEST(JoinAttack, ForgedAddsAreRefusedOrBounded) {
  for (const bool elastic : {false, true}) {
    SCOPED_TRACE(elastic ? "elastic ring" : "fixed ring");
    std::vector<std::string> flags = {"--period", "1", "--transport", "tcp"};
    if (elastic) flags.insert(flags.end(), {"--elastic", "on"});
    Cluster cluster(3, flags);
    cluster.start(0);
    // A trainer with a model: before one, the node reads only gossipctl's questions.
    auto trainer = connect_to(cluster, 0);
    ASSERT_TRUE(trainer);
    ASSERT_TRUE(trainer->attach({{"x", 1000}}).is_ok());
    ChildProcess attacker(
        {binary("gossip-attacker"), "forged-add", "--target", cluster.peer_endpoint(0), "--run-id",
         cluster.run_id(), "--as-node", "2", "--count", elastic ? "300" : "5"},
        cluster.run_dir() / "attacker.log");
    ASSERT_EQ(attacker.wait(30s), 0) << attacker.log();
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    const std::string expected = elastic ? "took 256 joined members already"
                                         : "but this node's strategy takes no new members";
    while (cluster.log(0).find(expected) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(50ms);
    EXPECT_NE(cluster.log(0).find(expected), std::string::npos) << cluster.log(0);
    EXPECT_TRUE(cluster.daemon(0).running()) << cluster.log(0);
  }
}

// The same on a gossip ring, whose overlay grows for a member an add schedules: an add
// of node 3999999999 would have made a graph of four billion nodes, and is refused
// (sgd/overlay/overlay.h bounds a join to 256 ids past the graph); adds of the next ids, each
// scheduled, are believed up to 256 joined members, and the node still runs.
TEST(JoinAttack, ForgedAddsCannotGrowTheOverlayWithoutBound) {
  Cluster cluster(3, {"--strategy", "gossip", "--period", "1"});
  cluster.start(0);
  auto trainer = connect_to(cluster, 0);
  ASSERT_TRUE(trainer);
  ASSERT_TRUE(trainer->attach({{"x", 1000}}).is_ok());
  ChildProcess far(
      {binary("gossip-attacker"), "forged-add", "--target", cluster.peer_endpoint(0), "--run-id",
       cluster.run_id(), "--as-node", "2", "--id", "3999999999", "--round", "5"},
      cluster.run_dir() / "attacker-far.log");
  ASSERT_EQ(far.wait(30s), 0) << far.log();
  ChildProcess many(
      {binary("gossip-attacker"), "forged-add", "--target", cluster.peer_endpoint(0), "--run-id",
       cluster.run_id(), "--as-node", "2", "--id", "3", "--count", "300", "--round", "9"},
      cluster.run_dir() / "attacker-many.log");
  ASSERT_EQ(many.wait(30s), 0) << many.log();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  const std::string expected = "took 256 joined members already";
  while (cluster.log(0).find(expected) == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  const std::string log = cluster.log(0);
  EXPECT_NE(log.find("node 3999999999 is more than 256 ids past the overlay's 3 nodes"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(expected), std::string::npos) << log;
  EXPECT_NE(log.find("node 258 takes part from round 9"), std::string::npos) << log;
  EXPECT_TRUE(cluster.daemon(0).running()) << log;
}

// An add of an id this node knows with another endpoint (one id given to two nodes by
// two coordinators at once, or a liar): the known member stays as it is, and the node
// says, once, that the id was given twice. Node 2 (not running; a process posing as it)
// first adds node 3 at port 20000, then ids 2 and 3 at ports 20000 and 20001.
TEST(JoinAttack, AnAddOfAKnownIdWithAnotherEndpointChangesNothingAndIsSaid) {
  Cluster cluster(3, {"--strategy", "gossip", "--period", "1"});
  cluster.start(0);
  auto trainer = connect_to(cluster, 0);
  ASSERT_TRUE(trainer);
  ASSERT_TRUE(trainer->attach({{"x", 1000}}).is_ok());
  for (const char* count : {"1", "2"}) {
    const std::string first = count[0] == '1' ? "3" : "2";
    ChildProcess adds(
        {binary("gossip-attacker"), "forged-add", "--target", cluster.peer_endpoint(0), "--run-id",
         cluster.run_id(), "--as-node", "2", "--id", first, "--count", count},
        cluster.run_dir() / ("attacker-" + first + ".log"));
    ASSERT_EQ(adds.wait(30s), 0) << adds.log();
  }
  const std::string twice =
      "node 2 says node 3 is tcp://127.0.0.1:20001, but this node knows node 3 as "
      "tcp://127.0.0.1:20000: one id was given to two nodes";
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (cluster.log(0).find(twice) == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  const std::string log = cluster.log(0);
  EXPECT_NE(log.find("node 3 (tcp://127.0.0.1:20000) joined (told by node 2)"), std::string::npos)
      << log;
  EXPECT_NE(log.find(twice), std::string::npos) << log;
  EXPECT_EQ(log.find("node 3 (tcp://127.0.0.1:20001) joined"), std::string::npos) << log;
  EXPECT_TRUE(cluster.daemon(0).running()) << log;
}

// A forged merge offer (sgd/membership/ring_membership.h), from a process posing as node 3 of an
// elastic ring of five configured nodes of which nodes 0-2 run: a ring [3, 4] at round
// 10^9, and the merging probe with which an offerer answers, at that round (an offer
// alone is only vouched for, and its round not heard). Node 0 merges with it, but a side of one
// heard node may claim at most 64 rounds past this side's, and the trainers' step moves with the
// round; the liar runs no round, is left out, and nodes 1 and 2 align on node 0's union round (it
// says so in its merging probes) rather than run rounds apart from it. Every trainer keeps syncing,
// and the three replicas stay one.
TEST(MergeAttack, AForgedOfferCannotSendTheRingFarAheadNorSplitIt) {
  Cluster cluster(5, {"--period", "1", "--transport", "tcp", "--elastic", "on", "--dead-after", "1",
                      "--round-timeout", "10"});
  for (int i = 0; i < 3; ++i) cluster.start(i);
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(attach(cluster, i, kNumel));
    ASSERT_TRUE(nodes.back());
    std::fill(nodes[i]->model.tensors[0].begin(), nodes[i]->model.tensors[0].end(),
              static_cast<float>(i));
  }
  std::vector<Node*> all{nodes[0].get(), nodes[1].get(), nodes[2].get()};
  sync_rounds(all, 3);  // the first round re-forms without nodes 3 and 4
  ChildProcess attacker(
      {binary("gossip-attacker"), "merge-offer", "--target", cluster.peer_endpoint(0), "--run-id",
       cluster.run_id(), "--as-node", "3", "--id", "4", "--round", "1000000000", "--count", "5"},
      cluster.run_dir() / "attacker.log");
  ASSERT_EQ(attacker.wait(30s), 0) << attacker.log();
  sync_rounds(all, 8);
  std::vector<uint64_t> steps(3);
  std::vector<std::string> errors(3);
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < 3; ++i)
      threads.emplace_back([&, i] {
        auto r = all[i]->client->step();
        if (r)
          steps[i] = r->step;
        else
          errors[i] = r.status().message();
      });
  }
  const std::string log = cluster.log(0);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(errors[i], "") << "trainer " << i << "\n" << cluster.log(static_cast<int>(i));
    EXPECT_EQ(steps[i], steps[0]) << "trainer " << i;
    EXPECT_LE(steps[i], 12u + 64u + 8u) << "trainer " << i << "\n" << log;
    EXPECT_EQ(all[i]->values(), all[0]->values()) << "trainer " << i;
  }
  EXPECT_GT(steps[0], 12u + 32u) << "the ring ran the union's round, 64 rounds on\n" << log;
  for (float v : all[0]->values()) ASSERT_TRUE(v >= 0.0f && v <= 2.0f) << v;
  EXPECT_NE(log.find("alone claims round 1000000000"), std::string::npos) << log;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(cluster.daemon(i).running()) << cluster.log(i);
}

}  // namespace
}  // namespace gossip::testing

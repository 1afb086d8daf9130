// The all-gather all-reduce under a trim (sgd/collectives/all_gather_all_reduce.h), on the
// in-process world's queues (peers/memory_channel.h): what a slow node does when the
// others finished rounds without it.

#include "sgd/collectives/all_gather_all_reduce.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "peers/memory_channel.h"
#include "peers/router.h"

namespace gossip::sgd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Node {
  std::unique_ptr<peers::MemoryChannel> channel;
  std::unique_ptr<peers::Router> router;
  std::unique_ptr<AllGatherAllReduce> all_reduce;
  std::vector<float> x;
};

constexpr size_t kNumel = 100;

std::vector<Node> make_nodes(peers::MemoryHub& hub, uint32_t n, uint32_t trim) {
  std::vector<Node> nodes(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<uint32_t> peers;
    for (uint32_t j = 0; j < n; ++j)
      if (j != i) peers.push_back(j);
    Node& node = nodes[i];
    node.channel = hub.join(i, peers);
    node.router = std::make_unique<peers::Router>(*node.channel);
    node.all_reduce = std::make_unique<AllGatherAllReduce>(*node.router, 64 * sizeof(float),
                                                           nullptr, nullptr, trim);
    node.x.resize(kNumel);
    for (size_t e = 0; e < kNumel; ++e) node.x[e] = static_cast<float>(10 * i + e);
  }
  return nodes;
}

Status run_round(Node& node, uint64_t round, std::chrono::seconds timeout) {
  CollectiveOptions o;
  o.deadline = Clock::now() + timeout;
  return node.all_reduce->all_reduce_mean(node.x, round, o);
}

// Three of four nodes run rounds 0, 1 and 2 while node 3 has not started: under
// --trim 1 they leave it out after the grace. Node 3 then finds the others' chunks of
// rounds 0 and 1 kept, and those of round 2 dropped (two rounds ahead of it): it
// finishes rounds 0 and 1 with everyone's models and round 2 at once without the
// others, where it used to wait for them to the deadline (a CI stall at round 62 of
// Attacks.AByzantinePeerCannotPoisonTrimmedLocalSgd, with 8 nodes on 2 cores).
TEST(AllGatherAllReduce, ASlowNodeLeftBehindByTheTrimDoesNotWaitForRoundsItCannotGet) {
  peers::MemoryHub hub;
  std::vector<Node> nodes = make_nodes(hub, 4, 1);
  {
    std::vector<std::jthread> fast;
    for (uint32_t i = 0; i < 3; ++i)
      fast.emplace_back([&nodes, i] {
        for (uint64_t r = 0; r < 3; ++r) ASSERT_TRUE(run_round(nodes[i], r, 10s).is_ok()) << r;
      });
  }
  // Rounds 0 of the fast nodes: the trimmed mean of {e, 10 + e, 20 + e} is 10 + e,
  // and it stays so.
  for (uint32_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(nodes[i].x[5], 15.0f);

  Node& slow = nodes[3];
  ASSERT_TRUE(run_round(slow, 0, 10s).is_ok());
  // {e, 10 + e, 20 + e, 30 + e} without the smallest and largest: 15 + e.
  EXPECT_FLOAT_EQ(slow.x[5], 20.0f);
  ASSERT_TRUE(run_round(slow, 1, 10s).is_ok());
  // {15 + e (its own), 10 + e three times}: 10 + e.
  EXPECT_FLOAT_EQ(slow.x[5], 15.0f);
  const auto start = Clock::now();
  const Status st = run_round(slow, 2, 10s);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_LT(Clock::now() - start, 2s) << "round 2 waited for chunks that had been dropped";
  EXPECT_FLOAT_EQ(slow.x[5], 15.0f);  // nobody's model but its own
}

// A slow node that left out the peers already ahead of it (their chunks came early) and
// has a silent peer besides: the peers it left out count towards the trim's quorum, so
// the silent one is left out after the grace, instead of the round waiting for it to
// the deadline (Attacks.AByzantinePeerCannotPoisonTrimmedLocalSgd under load: the
// liar's far-round chunks are dropped, and an honest node two rounds ahead was out).
TEST(AllGatherAllReduce, PeersAlreadyLeftOutCountTowardsTheTrimsQuorum) {
  peers::MemoryHub hub;
  std::vector<Node> nodes = make_nodes(hub, 5, 1);  // 0, 1, 2 honest; 3 slow; 4 silent later
  {
    std::vector<std::jthread> ahead;
    for (uint32_t i : {0u, 1u, 2u, 4u})
      ahead.emplace_back([&nodes, i] {
        for (uint64_t r = 0; r < 2; ++r) ASSERT_TRUE(run_round(nodes[i], r, 10s).is_ok()) << r;
      });
  }
  std::vector<Status> last(3);
  std::vector<std::jthread> third;
  for (uint32_t i = 0; i < 3; ++i)  // round 2 without node 4: they wait for node 3
    third.emplace_back([&nodes, &last, i] { last[i] = run_round(nodes[i], 2, 10s); });
  std::this_thread::sleep_for(200ms);  // their round-2 chunks reach node 3 in its round 0
  Node& slow = nodes[3];
  ASSERT_TRUE(run_round(slow, 0, 10s).is_ok());
  ASSERT_TRUE(run_round(slow, 1, 10s).is_ok());
  const auto start = Clock::now();
  const Status st = run_round(slow, 2, 5s);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_LT(Clock::now() - start, 2s) << "round 2 waited for the silent peer";
  third.clear();
  for (const Status& s3 : last) EXPECT_TRUE(s3.is_ok()) << s3.message();
}

// Without a trim nobody finishes a round without every node: a peer never gets two
// rounds ahead, and a slow node's rounds are whole.
TEST(AllGatherAllReduce, UntrimmedEveryNodeWaitsForTheSlowOne) {
  peers::MemoryHub hub;
  std::vector<Node> nodes = make_nodes(hub, 3, 0);
  std::vector<Status> first(2);
  {
    std::vector<std::jthread> fast;
    for (uint32_t i = 0; i < 2; ++i)
      fast.emplace_back([&nodes, &first, i] { first[i] = run_round(nodes[i], 0, 10s); });
    std::this_thread::sleep_for(300ms);
    ASSERT_TRUE(run_round(nodes[2], 0, 10s).is_ok());
  }
  for (const Status& st : first) EXPECT_TRUE(st.is_ok()) << st.message();
  for (const Node& n : nodes) EXPECT_FLOAT_EQ(n.x[5], 15.0f);  // (5 + 15 + 25) / 3
}

}  // namespace
}  // namespace gossip::sgd

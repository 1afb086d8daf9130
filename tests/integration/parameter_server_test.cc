// Parameter servers between real daemons (sgd/strategies/ps/): a server that dies fails its
// workers' rounds with an error naming it, within --dead-after, or, with a replica,
// hands its shard to the replica and stops nobody; a worker that dies under async
// stops nobody.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gossip/client.h"
#include "harness.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Worker {
  std::unique_ptr<Client> client;
  std::span<float> w;
};

// Node i's trainer, attached (no client when it could not attach).
Worker attach_one(Cluster& cluster, int i) {
  Worker k;
  k.client = connect_to(cluster, i, 30s);
  EXPECT_TRUE(k.client);
  if (!k.client) return {};
  auto m = k.client->attach({{"w", 4096}});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  if (!m.is_ok()) return {};
  k.w = m->tensors[0];
  for (auto& x : k.w) x = static_cast<float>(i);
  return k;
}

std::vector<Worker> attach_all(Cluster& cluster, int nodes) {
  std::vector<Worker> out;
  for (int i = 0; i < nodes; ++i) {
    Worker k = attach_one(cluster, i);
    if (!k.client) return {};
    out.push_back(std::move(k));
  }
  return out;
}

// Steps every listed worker once, in parallel; returns each one's error ("" when it synced).
std::vector<std::string> step(std::vector<Worker>& workers, const std::vector<int>& who) {
  std::vector<std::string> errors(workers.size());
  std::vector<std::jthread> threads;
  for (int i : who)
    threads.emplace_back([&, i] {
      for (auto& x : workers[i].w) x += 0.5f;
      auto r = workers[i].client->step();
      errors[i] = r ? "" : r.status().message();
    });
  return errors;
}

TEST(ParameterServerProcesses, AKilledServerFailsEveryWorkerNamingIt) {
  Cluster cluster(3, {"--strategy", "ps", "--servers", "1", "--period", "1", "--round-timeout",
                      "30", "--dead-after", "1", "--heartbeat", "0.2"});
  cluster.start_all();
  auto workers = attach_all(cluster, 3);
  ASSERT_EQ(workers.size(), 3u);
  for (const auto& e : step(workers, {0, 1, 2})) ASSERT_EQ(e, "");
  // All start from the server's model (node 0's): 0, then + 0.5 each step, averaged.
  EXPECT_FLOAT_EQ(workers[2].w[7], 0.5f);
  cluster.daemon(0).signal(SIGKILL);
  const auto t0 = Clock::now();
  const auto errors = step(workers, {1, 2});
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i : {1, 2})
    EXPECT_NE(errors[i].find("parameter server node 0 (shard 0)"), std::string::npos)
        << "worker " << i << ": " << errors[i] << "\n"
        << cluster.log(i);
  EXPECT_LT(took, 10.0)
      << "within --dead-after (1 s) and the client's margin, not the round timeout";
}

// A server whose trainer attaches after the workers' first pull is waited for, not
// taken for dead: before it has a model its daemon still says it lives
// (Strategy::keep_alive). In CI run 38, under load, node 1's trainer attached 5.5 s
// after its daemon started, a worker's first pull found node 1 silent for 5.6 s, and
// the run failed.
TEST(ParameterServerProcesses, AServerWhoseTrainerAttachesLateIsWaitedFor) {
  Cluster cluster(3, {"--strategy", "ps", "--servers", "2", "--ps-mode", "async", "--period", "1",
                      "--round-timeout", "30", "--dead-after", "1", "--heartbeat", "0.2"});
  cluster.start_all();
  std::vector<Worker> workers(3);
  for (int i : {0, 2}) {
    workers[i] = attach_one(cluster, i);
    ASSERT_TRUE(workers[i].client);
  }
  std::string late_error = "not run";
  std::jthread late([&] {
    std::this_thread::sleep_for(3s);  // three --dead-after
    workers[1] = attach_one(cluster, 1);
    if (!workers[1].client) return;
    auto r = workers[1].client->step();
    late_error = r ? "" : r.status().message();
  });
  const auto errors = step(workers, {0, 2});
  late.join();
  for (int i : {0, 2}) EXPECT_EQ(errors[i], "") << "worker " << i << "\n" << cluster.log(i);
  EXPECT_EQ(late_error, "") << cluster.log(1);
}

TEST(ParameterServerProcesses, ADeadWorkerStopsNobodyUnderAsync) {
  Cluster cluster(3, {"--strategy", "ps", "--servers", "1", "--ps-mode", "async", "--period", "1",
                      "--round-timeout", "30", "--dead-after", "1", "--heartbeat", "0.2"});
  cluster.start_all();
  auto workers = attach_all(cluster, 3);
  ASSERT_EQ(workers.size(), 3u);
  for (const auto& e : step(workers, {0, 1, 2})) ASSERT_EQ(e, "");
  cluster.daemon(2).signal(SIGKILL);
  const auto t0 = Clock::now();
  for (int s = 0; s < 5; ++s)
    for (const auto& e : step(workers, {0, 1})) ASSERT_EQ(e, "") << "step " << s;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
}

TEST(ParameterServerProcesses, AKilledServerWithAReplicaStopsNobody) {
  Cluster cluster(4, {"--strategy", "ps", "--servers", "2", "--ps-replicas", "1", "--period", "1",
                      "--round-timeout", "30", "--dead-after", "1", "--heartbeat", "0.2"});
  cluster.start_all();
  auto workers = attach_all(cluster, 4);
  ASSERT_EQ(workers.size(), 4u);
  for (int s = 0; s < 3; ++s)
    for (const auto& e : step(workers, {0, 1, 2, 3})) ASSERT_EQ(e, "") << "step " << s;
  // Node 0 serves shard 0 (its replica is on node 1); node 1 serves shard 1.
  cluster.daemon(0).signal(SIGKILL);
  const auto t0 = Clock::now();
  for (int s = 0; s < 4; ++s) {
    const auto errors = step(workers, {1, 2, 3});
    for (int i : {1, 2, 3})
      ASSERT_EQ(errors[i], "") << "worker " << i << " step " << s << "\n" << cluster.log(i);
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 15.0);
  // Every worker holds the same model, on both shards: the first element (shard 0)
  // and the last (shard 1). Each step adds 0.5 everywhere, so bsp gives 0.5 a step
  // from node 0's start of 0; a clock lost with the server would show as 0.5 less.
  for (int i : {1, 2, 3}) {
    EXPECT_FLOAT_EQ(workers[i].w.front(), workers[1].w.front()) << "worker " << i;
    EXPECT_FLOAT_EQ(workers[i].w.back(), workers[1].w.back()) << "worker " << i;
  }
  EXPECT_FLOAT_EQ(workers[1].w.front(), 0.5f * 7);
  const std::string log = cluster.log(1);
  EXPECT_NE(log.find("shard 0 goes on from its replica on node 1"), std::string::npos) << log;
}

}  // namespace
}  // namespace gossip::testing

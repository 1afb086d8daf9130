// The ring all-reduce between real gossipd processes on loopback (--transport tcp):
// every node's replica equals a mean computed here independently, for 2, 3, 4 and 8
// nodes and a model of 1000003 elements (64 MiB on 2 nodes), and a node killed in
// the middle of a round fails the round on every other node within twice the
// timeout, leaving the daemons up. With --elastic on, the others re-form the ring
// without it instead, and their trainers go on averaging, and take it back when it
// restarts (plain and compressed local SGD).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <thread>

#include "gossip/client.h"
#include "harness.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;

float value(int node, size_t k) {
  return std::sin(0.001f * static_cast<float>(k) + node) * (node + 1);
}

// How many times a daemon's log says `what`.
size_t times_logged(const std::string& log, const std::string& what) {
  size_t n = 0;
  for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
  return n;
}

void expect_mean_on_every_node(int nodes, uint64_t numel) {
  Cluster cluster(nodes, {"--period", "1", "--transport", "tcp", "--round-timeout", "60"});
  cluster.start_all();
  std::vector<std::vector<float>> after(nodes);
  std::vector<std::string> errors(nodes);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < nodes; ++i)
      threads.emplace_back([&, i] {
        auto client = connect_to(cluster, i, 60s);
        if (!client) return;
        auto model = client->attach({{"w", numel}});
        if (!model) return void(errors[i] = model.status().message());
        auto w = model->tensors[0];
        for (size_t k = 0; k < w.size(); ++k) w[k] = value(i, k);
        auto r = client->step();
        if (!r) return void(errors[i] = r.status().message());
        after[i].assign(w.begin(), w.end());
      });
  }
  for (int i = 0; i < nodes; ++i)
    ASSERT_EQ(errors[i], "") << "node " << i << "\n" << cluster.log(i);
  for (size_t k = 0; k < numel; ++k) {
    double sum = 0, scale = 0;
    for (int i = 0; i < nodes; ++i) {
      sum += value(i, k);
      scale += std::fabs(value(i, k));
    }
    ASSERT_NEAR(after[0][k], sum / nodes, 1e-6 * scale / nodes + 1e-30) << "element " << k;
    for (int i = 1; i < nodes; ++i)
      ASSERT_EQ(after[i][k], after[0][k]) << "node " << i << " element " << k;
  }
}

class RingProcesses : public ::testing::TestWithParam<int> {};

// The harness's own retry: a port found free but taken before its daemon binds it
// (CI, 2026-11-27: "cannot listen on tcp://127.0.0.1:41061: Address already in use",
// another test's process held it) starts the cluster again on new ports.
TEST(ClusterHarness, APortTakenBeforeItsDaemonBindsItStartsTheClusterOnNewPorts) {
  Cluster cluster(2, {"--period", "1", "--transport", "tcp"});
  const std::string taken = cluster.peer_endpoint(1);
  const int port = std::stoi(taken.substr(taken.rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 1), 0);
  cluster.start_all();
  ::close(fd);
  EXPECT_NE(cluster.peer_endpoint(1), taken);
  EXPECT_TRUE(cluster.daemon(0).running());
  EXPECT_TRUE(cluster.daemon(1).running());
  EXPECT_EQ(times_logged(cluster.log(1), "Address already in use"), 0u)
      << "the log of the daemon on the new ports";
}

TEST_P(RingProcesses, EveryNodeHoldsTheMean) { expect_mean_on_every_node(GetParam(), 1000003); }

INSTANTIATE_TEST_SUITE_P(Nodes, RingProcesses, ::testing::Values(2, 3, 4, 8),
                         ::testing::PrintToStringParamName());

TEST(RingProcesses, SixtyFourMebibytesOnTwoNodes) {
  expect_mean_on_every_node(2, (uint64_t{64} << 20) / 4);
}

TEST(RingProcesses, ANodeKilledMidRoundFailsTheOthersWithinTwiceTheTimeout) {
  constexpr int kNodes = 4;
  // Generous enough that the first, good round (ring set-up plus 1 MiB on 4 nodes)
  // fits in it on two loaded cores: at 3 s it failed once with ctest -j 2 beside
  // another heavy job.
  constexpr double kTimeout = 6.0;
  Cluster cluster(kNodes, {"--period", "1", "--transport", "tcp", "--round-timeout", "6"});
  cluster.start_all();
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kNodes; ++i) {
    // The victim's client would otherwise wait out its whole timeout for a dead daemon.
    clients.push_back(connect_to(cluster, i, i == 2 ? 6s : 30s));
    ASSERT_TRUE(clients.back());
    // 1 MiB. It was 32 MiB, so that the kill would land while a round was under way;
    // node 2 now never steps, so the others wait on it whatever the size, and the
    // first round of 32 MiB under the sanitizers overran the 6 s on two cores that a
    // build also loaded (2026-12-05).
    ASSERT_TRUE(clients.back()->attach({{"w", 256u << 10}}).is_ok());
  }
  {
    std::vector<std::jthread> first;  // one good round: the ring is connected
    for (int i = 0; i < kNodes; ++i)
      first.emplace_back([&, i] { ASSERT_TRUE(clients[i]->step().is_ok()); });
  }
  std::vector<Status> results(kNodes);
  std::vector<double> waited(kNodes);
  {
    std::vector<std::jthread> round;
    for (int i = 0; i < kNodes; ++i) {
      if (i == 2) continue;
      round.emplace_back([&, i] {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = clients[i]->step();
        waited[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        results[i] = r.status();
      });
    }
    // Node 2 does not step: had it, its part of a 32 MiB round could be done before
    // the kill on a fast moment, and the others would finish (failed 1 in 3 alone).
    std::this_thread::sleep_for(30ms);  // the round is under way, waiting on node 2
    cluster.daemon(2).signal(SIGKILL);
  }
  for (int i : {0, 1, 3}) {
    ASSERT_FALSE(results[i].is_ok()) << "node " << i << " finished a round without node 2";
    EXPECT_NE(results[i].message().find("peer "), std::string::npos) << results[i].message();
    EXPECT_LT(waited[i], 2 * kTimeout) << "node " << i << ": " << results[i].message();
    EXPECT_TRUE(cluster.daemon(i).running()) << cluster.log(i);
    EXPECT_TRUE(clients[i]->traffic().is_ok()) << "the daemon still serves its trainer";
  }
}

// The mean over `nodes` of value(node + shift, k).
double mean_of(const std::vector<int>& nodes, int shift, size_t k) {
  double sum = 0;
  for (int i : nodes) sum += value(i + shift, k);
  return sum / static_cast<double>(nodes.size());
}

TEST(RingProcesses, AnElasticRingReformsWithoutAKilledNodeAndItsTrainersGoOn) {
  constexpr int kNodes = 4;
  constexpr size_t kNumel = 2u << 20;  // 8 MiB: the round is under way when the node dies
  Cluster cluster(kNodes, {"--period", "1", "--transport", "tcp", "--round-timeout", "30",
                           "--elastic", "on", "--dead-after", "1"});
  cluster.start_all();
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::span<float>> w;
  for (int i = 0; i < kNodes; ++i) {
    clients.push_back(connect_to(cluster, i, i == 2 ? 6s : 30s));
    ASSERT_TRUE(clients.back());
    auto m = clients.back()->attach({{"w", kNumel}});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    w.push_back(m->tensors[0]);
  }
  // Every node steps with values of its own (shifted per round), all at once; node
  // 2's daemon is killed `kill_after` into the round when asked.
  // Returns the longest step of a survivor, in seconds.
  auto round = [&](const std::vector<int>& nodes, int shift,
                   std::optional<std::chrono::milliseconds> kill_after) {
    std::vector<std::string> errors(kNodes);
    std::vector<double> took(kNodes, 0.0);
    {
      std::vector<std::jthread> threads;
      for (int i : nodes)
        threads.emplace_back([&, i] {
          for (size_t k = 0; k < kNumel; ++k) w[i][k] = value(i + shift, k);
          const auto t0 = std::chrono::steady_clock::now();
          auto r = clients[i]->step();
          took[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (!r && i != 2) errors[i] = r.status().message();
        });
      if (kill_after) {
        std::this_thread::sleep_for(*kill_after);
        cluster.daemon(2).signal(SIGKILL);
      }
    }
    for (int i : nodes) {
      if (i == 2) continue;
      EXPECT_EQ(errors[i], "") << "node " << i << " shift " << shift << "\n" << cluster.log(i);
    }
    return std::max({took[0], took[1], took[3]});
  };
  round({0, 1, 2, 3}, 0, std::nullopt);
  for (size_t k = 0; k < kNumel; k += 4099) ASSERT_NEAR(w[0][k], mean_of({0, 1, 2, 3}, 0, k), 1e-5);

  const double broken = round({0, 1, 2, 3}, 10, 30ms);
  ASSERT_FALSE(HasFailure());
  // The round ends on every survivor with the same values: the mean of the four
  // (some completed it before the kill and sent it to the others) or of the three.
  const std::vector<int> alive{0, 1, 3};
  for (int i : {1, 3})
    for (size_t k = 0; k < kNumel; ++k)
      ASSERT_EQ(w[i][k], w[0][k]) << "node " << i << " element " << k;
  const bool of_four = std::fabs(w[0][0] - mean_of({0, 1, 2, 3}, 10, 0)) < 1e-5;
  for (size_t k = 0; k < kNumel; k += 4099)
    ASSERT_NEAR(w[0][k], of_four ? mean_of({0, 1, 2, 3}, 10, k) : mean_of(alive, 10, k), 1e-5) << k;
  std::printf("round broken by the kill: %.2f s, ends with the mean of %s\n", broken,
              of_four ? "all four (completed before the kill)" : "the three survivors");
  // The killed daemon's connections close at once: the survivors re-form within
  // --dead-after (1 s) and run the round again, well inside --round-timeout (30 s).
  EXPECT_LT(broken, 10.0);

  for (int shift : {20, 30, 40}) {
    round(alive, shift, std::nullopt);
    for (int i : {1, 3})
      for (size_t k = 0; k < kNumel; k += 1031)
        ASSERT_EQ(w[i][k], w[0][k]) << "node " << i << " element " << k;
    for (size_t k = 0; k < kNumel; k += 4099)
      ASSERT_NEAR(w[0][k], mean_of(alive, shift, k), 1e-5) << k;
  }
  for (int i : alive) {
    EXPECT_NE(cluster.log(i).find("left out 2"), std::string::npos) << cluster.log(i);
    EXPECT_TRUE(cluster.daemon(i).running());
  }
}

// A node that compresses while its neighbor does not sends frames of another size.
// Re-forming cannot cure that: the round fails on the node that sees the frames,
// naming the likely cause, after a bounded number of tries rather than re-forming
// for as long as the round lasts.
TEST(RingProcesses, AnElasticRingWithMismatchedCodecsFailsTheRoundWithTheReason) {
  constexpr size_t kNumel = 1u << 16;
  Cluster cluster(2, {"--period", "1", "--transport", "tcp", "--round-timeout", "6", "--elastic",
                      "on", "--dead-after", "1", "--allreduce-algorithm", "ring"});
  cluster.set_node_flags(1, {"--codec", "int8"});
  cluster.start_all();
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::span<float>> w;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(connect_to(cluster, i, 30s));
    ASSERT_TRUE(clients.back());
    auto m = clients.back()->attach({{"w", kNumel}});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    w.push_back(m->tensors[0]);
  }
  std::vector<std::string> errors(2);
  auto step_both = [&](int shift) {
    std::vector<std::jthread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&, i] {
        for (size_t k = 0; k < kNumel; ++k) w[i][k] = value(i + shift, k);
        auto r = clients[i]->step();
        errors[i] = r ? "" : r.status().message();
      });
  };
  step_both(0);  // local SGD's first round is an exact average on every node
  ASSERT_EQ(errors[0], "") << cluster.log(0);
  ASSERT_EQ(errors[1], "") << cluster.log(1);
  const auto t0 = std::chrono::steady_clock::now();
  step_both(10);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(errors[1].find("do all nodes run the same strategy, codec and model?"),
            std::string::npos)
      << errors[1] << "\n"
      << cluster.log(1);
  EXPECT_NE(errors[0], "") << "node 0's round cannot complete either\n" << cluster.log(0);
  EXPECT_LT(took, 15.0) << "within the round timeout (6 s) and the client's margin";
  for (int i = 0; i < 2; ++i) {
    const size_t reforms = times_logged(cluster.log(i), "ring re-formed");
    EXPECT_LT(reforms, 100u) << "node " << i << " re-formed the ring " << reforms
                             << " times in one round";
    EXPECT_TRUE(cluster.daemon(i).running());
  }
}

// Three daemons in an elastic local-SGD ring, a trainer on each, stepping in rounds
// on the values value(node + shift) and checking what every replica then holds.
class ElasticLocalSgd {
 public:
  static constexpr int kNodes = 3;
  static constexpr size_t kNumel = 1u << 16;

  // `binaries`: a node played by another binary than gossipd (gossipd-byzantine).
  // `node_flags`: flags of one node only (its CURVE keys).
  explicit ElasticLocalSgd(const std::vector<std::string>& more, float tolerance = 0.0f,
                           const std::map<int, std::string>& binaries = {},
                           const std::map<int, std::vector<std::string>>& node_flags = {})
      : cluster_(kNodes, flags(more)),
        tolerance_(tolerance),
        clients_(kNodes + 1),
        models_(kNodes + 1) {
    for (const auto& [node, path] : binaries) cluster_.set_node_binary(node, path);
    for (const auto& [node, f] : node_flags) cluster_.set_node_flags(node, f);
    cluster_.start_all();
  }
  Cluster& cluster() { return cluster_; }
  Model& model(int i) { return models_[i]; }
  std::span<float> w(int i) { return models_[i].tensors[0]; }
  void detach(int i) { clients_[i].reset(); }
  uint64_t steps(int i) const { return clients_[i]->steps(); }

  void attach(int i) {
    clients_[i] = connect_to(cluster_, i, 30s);
    ASSERT_TRUE(clients_[i]);
    auto m = clients_[i]->attach({{"w", kNumel}});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    models_[i] = *m;
  }

  // Every trainer of `nodes` steps at once; then each holds the same model, near
  // the mean of theirs (relative tolerance, of their largest magnitude shift + 3;
  // a negative one: an outer optimizer moves it away from the mean, which is not
  // checked).
  void round(const std::vector<int>& nodes, int shift) {
    std::vector<std::string> errors(kNodes + 1);
    {
      std::vector<std::jthread> threads;
      for (int i : nodes)
        threads.emplace_back([&, i] {
          for (size_t k = 0; k < kNumel; ++k) w(i)[k] = value(i + shift, k);
          if (auto r = clients_[i]->step(); !r) errors[i] = r.status().message();
        });
    }
    for (int i : nodes)
      ASSERT_EQ(errors[i], "") << "node " << i << " shift " << shift << "\n" << cluster_.log(i);
    const double tolerance = std::max(1e-5, double{tolerance_} * (shift + kNodes));
    for (int i : nodes) {
      for (size_t k = 0; tolerance_ >= 0 && k < kNumel; k += 257)
        ASSERT_NEAR(w(i)[k], mean_of(nodes, shift, k), tolerance)
            << "node " << i << " element " << k << " shift " << shift << "\n"
            << logs(nodes);
      for (size_t k = 0; k < kNumel; ++k)
        ASSERT_EQ(w(i)[k], w(nodes[0])[k]) << "node " << i << " element " << k;
    }
  }

  // The logs of `nodes`' daemons: a round that left one out is explained by its log.
  std::string logs(const std::vector<int>& nodes) {
    std::string out;
    for (int i : nodes) out += cluster_.log(i);
    return out;
  }

  // One trainer steps alone; returns its step's error ("" if none).
  std::string step(int i, int shift) {
    for (size_t k = 0; k < kNumel; ++k) w(i)[k] = value(i + shift, k);
    auto r = clients_[i]->step();
    return r ? "" : r.status().message();
  }

  // The flags of every node (a node that joins by seeds takes them too).
  static std::vector<std::string> flags(const std::vector<std::string>& more) {
    std::vector<std::string> f{"--period",  "1",  "--transport",  "tcp", "--round-timeout", "30",
                               "--elastic", "on", "--dead-after", "1",   "--join-wait",     "1"};
    f.insert(f.end(), more.begin(), more.end());
    return f;
  }

 private:
  Cluster cluster_;
  float tolerance_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<Model> models_;
};

// A restarted node takes a member's model and is taken back into the ring; every
// replica then holds the same model, near the mean of the trainers' (exactly the
// mean without compression). With a codec, local SGD's rounds average the change
// since the previous round: the restarted node must take the model it fetched as
// its previous one, or its first round averages something else than the members'.
// With an outer optimizer it must take the members' momentum too, or its outer
// steps differ from theirs and the replicas part for good.
struct Restart {
  const char* name;
  std::vector<std::string> flags;
  float tolerance;  // see ElasticLocalSgd::round
};

void PrintTo(const Restart& r, std::ostream* os) { *os << r.name; }

class ElasticRestart : public ::testing::TestWithParam<Restart> {};

TEST_P(ElasticRestart, TheRingTakesARestartedNodeBackWithTheClustersModel) {
  ElasticLocalSgd ring(GetParam().flags, GetParam().tolerance);
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) ring.attach(i);
  ASSERT_FALSE(HasFailure());
  EXPECT_FALSE(ring.model(0).initialized) << "a cluster that starts has no model to offer";
  ring.round({0, 1, 2}, 0);
  ring.detach(2);
  ring.cluster().daemon(2).signal(SIGKILL);
  for (int shift : {10, 20}) ring.round({0, 1}, shift);  // the first re-forms without node 2
  ASSERT_FALSE(HasFailure());

  ring.cluster().start(2);
  ring.attach(2);
  ASSERT_FALSE(HasFailure());
  EXPECT_TRUE(ring.model(2).initialized) << "it resumes from a member's model\n"
                                         << ring.cluster().log(2);
  EXPECT_EQ(ring.model(2).start_step, 3u) << "at the cluster's step";
  for (size_t k = 0; k < ElasticLocalSgd::kNumel; k += 257)
    ASSERT_EQ(ring.w(2)[k], ring.w(0)[k]) << k;
  for (int shift : {30, 40, 50}) ring.round({0, 1, 2}, shift);  // the first takes node 2 back
  for (int i : {0, 1})
    EXPECT_NE(ring.cluster().log(i).find("took back 2"), std::string::npos)
        << ring.cluster().log(i);
}

// int8's error is about a 255th of the range of the change between rounds.
INSTANTIATE_TEST_SUITE_P(LocalSgd, ElasticRestart,
                         ::testing::Values(Restart{"Plain", {}, 0.0f},
                                           Restart{"Int8", {"--codec", "int8"}, 0.02f},
                                           Restart{"NesterovInt8",
                                                   {"--codec", "int8", "--outer-optimizer",
                                                    "nesterov", "--outer-lr", "0.7"},
                                                   -1.0f}),
                         [](const auto& info) { return std::string(info.param.name); });

// A fourth node that no member lists, started with --join `seed` and the ring's flags
// plus `more`, until its IPC socket (gossipd-3.sock) exists.
ChildProcess start_ring_joiner(ElasticLocalSgd& ring, const std::string& seed,
                               const std::vector<std::string>& more) {
  const auto dir = ring.cluster().run_dir();
  std::vector<std::string> argv = {binary("gossipd"),
                                   "--join",
                                   seed,
                                   "--listen",
                                   "tcp://127.0.0.1:" + std::to_string(free_ports(1)[0]),
                                   "--run-dir",
                                   dir.string(),
                                   "--run-id",
                                   ring.cluster().run_id()};
  for (const auto& f : ElasticLocalSgd::flags(more)) argv.push_back(f);
  ChildProcess joiner(argv, dir / "gossipd-joiner.log");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!std::filesystem::exists(dir / "gossipd-3.sock")) {
    if (!joiner.running() || std::chrono::steady_clock::now() >= deadline) {
      ADD_FAILURE() << "the joiner did not start\n" << joiner.log();
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  return joiner;
}

// A fourth node that no member lists joins the running ring through node 1, a seed
// that is not the coordinator: it is sent on to node 0, gets id 3, and every member
// takes it as a peer. It then starts as a restarted node does: it fetches the
// members' model and step, asks into the ring, and averages with the three.
TEST(RingProcesses, ANodeThatNoMemberListsJoinsThroughASeedWithTheNextId) {
  ElasticLocalSgd ring({});
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) ring.attach(i);
  ASSERT_FALSE(HasFailure());
  for (int shift : {0, 10}) ring.round({0, 1, 2}, shift);
  ASSERT_FALSE(HasFailure());

  ChildProcess joiner = start_ring_joiner(ring, ring.cluster().peer_endpoint(1), {});
  ASSERT_FALSE(HasFailure());
  ring.attach(3);
  ASSERT_FALSE(HasFailure()) << joiner.log();
  EXPECT_TRUE(ring.model(3).initialized) << "it starts from the members' model\n" << joiner.log();
  EXPECT_EQ(ring.model(3).start_step, 2u) << "at the cluster's step";
  for (int shift : {30, 40, 50}) ring.round({0, 1, 2, 3}, shift);  // the first takes it in
  ASSERT_FALSE(HasFailure()) << joiner.log();
  const std::string log = joiner.log();
  EXPECT_NE(log.find("sends this node to the coordinator, node 0"), std::string::npos) << log;
  EXPECT_NE(log.find("joined as node 3 of 4"), std::string::npos) << log;
  EXPECT_NE(ring.cluster().log(0).find("node 3 (tcp://127.0.0.1:"), std::string::npos)
      << ring.cluster().log(0);
  for (int i : {1, 2})
    EXPECT_NE(ring.cluster().log(i).find("joined (told by node 0)"), std::string::npos)
        << ring.cluster().log(i);

  // Node 2 restarts with its own peer list, which lacks node 3: a member tells it of
  // node 3 when it says hello, and the four average again.
  ring.detach(2);
  ring.cluster().daemon(2).signal(SIGKILL);
  for (int shift : {60, 70}) ring.round({0, 1, 3}, shift);
  ASSERT_FALSE(HasFailure());
  ring.cluster().start(2);
  ring.attach(2);
  ASSERT_FALSE(HasFailure());
  for (int shift : {80, 90, 100}) ring.round({0, 1, 2, 3}, shift);
  ASSERT_FALSE(HasFailure()) << ring.cluster().log(2);
  EXPECT_NE(ring.cluster().log(2).find("node 3 (tcp://127.0.0.1:"), std::string::npos)
      << ring.cluster().log(2);
}

// Under CURVE the joiner's key must be on the members' --admit-keys list; it names its
// seed with the seed's key, and the ring's links to and from it are sealed with keys
// each pair derives from the CURVE keys, as the configured members' are: the four
// average (every round checks the mean) over sealed links only.
TEST(RingProcesses, UnderCurveANodeWithAnAdmittedKeyJoinsTheSealedRing) {
  KeyPair k[ElasticLocalSgd::kNodes + 1];
  for (auto& kp : k) kp = curve_keypair();
  const auto admit = std::filesystem::temp_directory_path() /
                     ("gossip-admit-" + std::to_string(::getpid()) + ".keys");
  std::ofstream(admit) << k[3].pub << "\n";
  struct Remove {
    std::filesystem::path path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{admit};
  std::map<int, std::vector<std::string>> own;
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) {
    own[i] = {"--secret-key", k[i].sec};
    for (int j = 0; j < ElasticLocalSgd::kNodes; ++j)
      if (j != i) own[i].insert(own[i].end(), {"--peer-key", std::to_string(j) + "=" + k[j].pub});
  }
  ElasticLocalSgd ring({"--admit-keys", admit.string()}, 0.0f, {}, own);
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) ring.attach(i);
  ASSERT_FALSE(HasFailure());
  ring.round({0, 1, 2}, 0);
  ASSERT_FALSE(HasFailure());

  ChildProcess joiner =
      start_ring_joiner(ring, k[1].pub + "@" + ring.cluster().peer_endpoint(1),
                        {"--secret-key", k[3].sec, "--admit-keys", admit.string()});
  ASSERT_FALSE(HasFailure());
  ring.attach(3);
  ASSERT_FALSE(HasFailure()) << joiner.log();
  EXPECT_TRUE(ring.model(3).initialized) << "it starts from the members' model\n" << joiner.log();
  for (int shift : {30, 40, 50}) ring.round({0, 1, 2, 3}, shift);  // the first takes it in
  ASSERT_FALSE(HasFailure()) << joiner.log() << ring.cluster().log(0);
  EXPECT_NE(joiner.log().find("joined as node 3 of 4"), std::string::npos) << joiner.log();
  EXPECT_NE(joiner.log().find("ring links are sealed"), std::string::npos) << joiner.log();
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i)
    EXPECT_EQ(ring.cluster().log(i).find("no link keys"), std::string::npos)
        << ring.cluster().log(i);
}

// gossipctl leave: node 2's daemon tells its trainer why, says bye and exits; the
// other two go on without it at once (a bye re-forms the ring), not after a timeout.
TEST(RingProcesses, ANodeThatLeavesIsGoneFromTheNextRound) {
  ElasticLocalSgd ring({"--dead-after", "20"});  // a silence would take 20 s to notice
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) ring.attach(i);
  ASSERT_FALSE(HasFailure());
  ring.round({0, 1, 2}, 0);
  ASSERT_FALSE(HasFailure());
  const auto dir = ring.cluster().run_dir();
  ChildProcess leave({binary("gossipctl"), "leave", "--node", ring.cluster().ipc_endpoint(2)},
                     dir / "gossipctl-leave.log");
  ASSERT_EQ(leave.wait(20s), 0) << leave.log();
  EXPECT_NE(leave.log().find("gossipd on node 2 left the cluster (gossipctl leave)"),
            std::string::npos)
      << leave.log();
  EXPECT_EQ(ring.cluster().daemon(2).wait(10s), 0) << ring.cluster().log(2);
  const std::string error = ring.step(2, 5);
  EXPECT_NE(error.find("left the cluster"), std::string::npos) << error;

  const auto t0 = std::chrono::steady_clock::now();
  for (int shift : {10, 20}) ring.round({0, 1}, shift);
  ASSERT_FALSE(HasFailure());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "not a wait for a silent peer";
  EXPECT_NE(ring.cluster().log(0).find("peer 2 said bye"), std::string::npos)
      << ring.cluster().log(0);
}

// A cluster that cannot take a new member refuses a joiner, saying why; the joiner
// exits at once with that reason: a fixed ring (without --elastic), a gossip torus
// of 4 nodes, which has no graph on 5, and parameter servers whose chains wrap around
// the node list (shard 1's replica is node 0), which a new id would move.
TEST(RingProcesses, AClusterThatTakesNoNewMembersRefusesAJoinerSayingWhy) {
  struct Case {
    std::vector<std::string> flags;
    int nodes;
    std::string why;
  };
  for (const Case& c :
       {Case{{"--strategy", "local-sgd", "--period", "1"}, 2, "refused: node 0 runs local-sgd"},
        Case{{"--strategy", "gossip", "--topology", "torus", "--period", "1"},
             4,
             "refused: the overlay 'torus' cannot take a member 4"},
        Case{{"--strategy", "ps", "--servers", "2", "--ps-replicas", "1", "--period", "1"},
             2,
             "refused: node 0 runs ps: only the gossip family"}}) {
    Cluster cluster(c.nodes, c.flags);
    cluster.start_all();
    std::vector<std::string> argv = {binary("gossipd"),
                                     "--join",
                                     cluster.peer_endpoint(0),
                                     "--listen",
                                     "tcp://127.0.0.1:" + std::to_string(free_ports(1)[0]),
                                     "--run-dir",
                                     cluster.run_dir().string(),
                                     "--run-id",
                                     cluster.run_id()};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    ChildProcess joiner(argv, cluster.run_dir() / "gossipd-joiner.log");
    EXPECT_EQ(joiner.wait(20s), 1) << joiner.log();
    EXPECT_NE(joiner.log().find(c.why), std::string::npos) << joiner.log();
    const auto sock = "gossipd-" + std::to_string(c.nodes) + ".sock";
    EXPECT_FALSE(std::filesystem::exists(cluster.run_dir() / sock));
  }
}

// A restarted node fetches the state from both members at once, a share of its 64
// chunks from each (--chunk-bytes 4096); node 1 (gossipd-byzantine) dies as it sends
// its 10th chunk. The joiner hands node 1's missing chunks to node 0 and ends with
// the state both members held, bit for bit: the manifest node 0 offered checks every
// chunk, and the model is node 0's.
TEST(RingProcesses, AJoinSurvivesTheDeathOfOneOfTwoDonorsHalfWay) {
  ::setenv("GOSSIP_ATTACK", "die-mid-state", 1);
  ElasticLocalSgd ring({"--chunk-bytes", "4096"}, 0.0f, {{1, binary("gossipd-byzantine")}});
  ::unsetenv("GOSSIP_ATTACK");
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) ring.attach(i);
  ASSERT_FALSE(HasFailure());
  ring.round({0, 1, 2}, 0);
  ring.detach(2);
  ring.cluster().daemon(2).signal(SIGKILL);
  for (int shift : {10, 20}) ring.round({0, 1}, shift);
  ASSERT_FALSE(HasFailure());

  const auto t0 = std::chrono::steady_clock::now();
  ring.cluster().start(2);
  ring.attach(2);
  ASSERT_FALSE(HasFailure());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string joiner = ring.cluster().log(2);
  ASSERT_TRUE(ring.model(2).initialized) << joiner;
  EXPECT_EQ(ring.model(2).start_step, 3u) << "at the cluster's step";
  for (size_t k = 0; k < ElasticLocalSgd::kNumel; ++k)
    ASSERT_EQ(ring.w(2)[k], ring.w(0)[k]) << "element " << k << "\n" << joiner;
  EXPECT_EQ(ring.cluster().daemon(1).wait(5s), 9) << "the donor died half way";
  EXPECT_NE(ring.cluster().log(1).find("dying after sending 9 chunks"), std::string::npos)
      << ring.cluster().log(1);
  EXPECT_NE(joiner.find("fetching the state before round 3 (step 3, manifest "), std::string::npos)
      << joiner;
  EXPECT_NE(joiner.find("64 chunks from 2 donor(s)"), std::string::npos) << joiner;
  // Node 0 takes over node 1's chunks when node 1 falls silent (or node 1 is
  // dropped when its connection has been down a second), whichever comes first.
  EXPECT_TRUE(joiner.find("that donor 1 has been slow to send") != std::string::npos ||
              joiner.find("join: donor 1 dropped") != std::string::npos)
      << joiner;
  // The manifest the joiner checked every chunk against is the one node 0 offered.
  const std::string said = "every chunk as its manifest ";
  const size_t at = joiner.find(said);
  ASSERT_NE(at, std::string::npos) << joiner;
  const std::string manifest = joiner.substr(at + said.size(), 16);
  EXPECT_NE(ring.cluster().log(0).find("(manifest " + manifest + ")"), std::string::npos)
      << manifest << "\n"
      << ring.cluster().log(0);
  EXPECT_LT(took, 20.0) << "the dead donor's connection dropped: no 10 s silence to wait for";
}

// The last node standing is alone too, with nobody to come back to: it asks once,
// hears no offer within --join-wait, and then trains alone, asking again only after
// 2x --join-wait (doubling), so that its trainer's steps do not each wait for offers.
TEST(RingProcesses, TheLastNodeOfAnElasticRingTrainsAloneAndAsksBackInOnlyNowAndThen) {
  // A 5 s try: the first round needs all three, and under the sanitizers with a build
  // beside them one node came 3 s late to it (each node asks the others for a newer
  // model when its trainer attaches, which takes --join-wait), so a 3 s try left it out
  // (2026-11-28, the fifth fresh-clone run).
  ElasticLocalSgd ring({"--round-timeout", "10"});
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) ring.attach(i);
  ASSERT_FALSE(HasFailure());
  ring.round({0, 1, 2}, 0);
  for (int i : {1, 2}) {
    ring.detach(i);
    ring.cluster().daemon(i).signal(SIGKILL);
  }
  ring.round({0}, 10);  // re-forms alone, then asks for a model: nobody answers
  ASSERT_FALSE(HasFailure());
  const auto t0 = std::chrono::steady_clock::now();
  for (int shift : {20, 30, 40, 50, 60}) ring.round({0}, shift);  // its own model back, every time
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = ring.cluster().log(0);
  const size_t asked = times_logged(log, "fetching a member's model to ask back in");
  EXPECT_LE(asked, 1 + static_cast<size_t>(took / 2.0))
      << "asked " << asked << " times in 6 steps (" << took << " s after the first)\n"
      << log;
  EXPECT_NE(log.find("no member offered its model: training alone, trying again in 2.0 s"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("back in the ring"), std::string::npos) << log;
}

// A live node whose daemon stalls (SIGSTOP) longer than a round's try is left out,
// and then runs rounds alone. It asks back in as a restarted node does: it takes a
// member's model, the members take it back, and the next round averages all three.
TEST(RingProcesses, AnElasticLocalSgdRingTakesBackALiveNodeItLeftOut) {
  ElasticLocalSgd ring({"--round-timeout", "6"});
  for (int i = 0; i < ElasticLocalSgd::kNodes; ++i) ring.attach(i);
  ASSERT_FALSE(HasFailure());
  ring.round({0, 1, 2}, 0);
  ring.cluster().daemon(2).signal(SIGSTOP);
  ring.round({0, 1}, 10);  // node 2 does not answer within the try (3 s) and the re-forming (1 s)
  ring.round({0, 1}, 20);  // the members move on: node 2 comes back behind them
  ring.cluster().daemon(2).signal(SIGCONT);
  ASSERT_FALSE(HasFailure());
  for (int i : {0, 1})
    ASSERT_NE(ring.cluster().log(i).find("left out 2"), std::string::npos) << ring.cluster().log(i);
  ASSERT_EQ(ring.steps(0), 3u);
  ASSERT_EQ(ring.steps(2), 1u);

  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ring.step(2, 20), "") << ring.cluster().log(2);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("the left-out node's step, back into the ring: %.2f s\n", took);
  for (size_t k = 0; k < ElasticLocalSgd::kNumel; ++k)
    ASSERT_EQ(ring.w(2)[k], ring.w(0)[k])
        << "node 2 holds the members' model, element " << k << "\n"
        << ring.cluster().log(2);
  EXPECT_NE(ring.cluster().log(2).find("back in the ring: took the model of peer"),
            std::string::npos)
      << ring.cluster().log(2);
  // Its trainer goes on at the members' step, so that both count the same rounds
  // to the run's end.
  EXPECT_EQ(ring.steps(2), ring.steps(0)) << ring.cluster().log(2);
  for (int shift : {30, 40}) ring.round({0, 1, 2}, shift);
  for (int i : {0, 1, 2}) EXPECT_EQ(ring.steps(i), 5u) << "node " << i;
  for (int i : {0, 1})
    EXPECT_NE(ring.cluster().log(i).find("took back 2"), std::string::npos)
        << ring.cluster().log(i);
}

}  // namespace
}  // namespace gossip::testing

// Compressed local SGD across real gossipd processes: replicas stay bit-identical
// after every averaging, close to the exact mean where the codec promises it, and
// the byte counters show what the codec saved.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "gossip/client.h"
#include "harness.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;

struct NodeRun {
  std::vector<std::vector<float>> before, after;
  Traffic traffic;
  std::string error;
};

// Each node takes `rounds` steps (period 1) of noise and records its replica.
std::vector<NodeRun> run(const std::string& codec, int nodes, int rounds, size_t numel) {
  Cluster cluster(nodes, {"--period", "1", "--codec", codec, "--round-timeout", "30"});
  cluster.start_all();
  std::vector<NodeRun> runs(nodes);
  std::vector<std::jthread> threads;
  for (int i = 0; i < nodes; ++i)
    threads.emplace_back([&, i] {
      ClientOptions o;
      o.endpoint = cluster.ipc_endpoint(i);
      o.timeout = 30s;
      auto client = Client::connect(o);
      if (!client) return void(runs[i].error = client.status().message());
      auto model = (*client)->attach({{"w", numel}});
      if (!model) return void(runs[i].error = model.status().message());
      std::mt19937 rng(i);
      std::normal_distribution<float> noise(0.0f, 1.0f);
      auto w = model->tensors[0];
      for (auto& x : w) x = noise(rng);
      for (int r = 0; r < rounds; ++r) {
        for (auto& x : w) x += 0.05f * noise(rng);
        runs[i].before.emplace_back(w.begin(), w.end());
        auto s = (*client)->step();
        if (!s) return void(runs[i].error = s.status().message());
        runs[i].after.emplace_back(w.begin(), w.end());
      }
      auto t = (*client)->traffic();
      if (t) runs[i].traffic = *t;
    });
  threads.clear();
  for (int i = 0; i < nodes; ++i)
    if (!runs[i].error.empty()) ADD_FAILURE() << "node " << i << ": " << runs[i].error << "\n" << cluster.log(i);
  return runs;
}

void expect_identical_replicas(const std::vector<NodeRun>& runs) {
  for (size_t r = 0; r < runs[0].after.size(); ++r)
    for (size_t i = 1; i < runs.size(); ++i)
      ASSERT_EQ(runs[i].after[r], runs[0].after[r]) << "node " << i << " round " << r;
}

TEST(CompressedLocalSgd, Int8ReplicasAreIdenticalAndWithinTheQuantizationStepOfTheMean) {
  constexpr int kNodes = 3, kRounds = 4;
  constexpr size_t kNumel = 20000;
  auto runs = run("int8", kNodes, kRounds, kNumel);
  ASSERT_FALSE(HasFailure());
  expect_identical_replicas(runs);
  for (int r = 1; r < kRounds; ++r) {  // round 0 is the exact uncompressed average
    double worst = 0;
    for (size_t k = 0; k < kNumel; ++k) {
      double mean = 0;
      for (auto& n : runs) mean += n.before[r][k];
      mean /= kNodes;
      worst = std::max(worst, std::abs(runs[0].after[r][k] - mean));
    }
    // Deltas of ~0.05 * N(0,1) per round: an int8 step of a 256-block is ~0.05*4/127.
    EXPECT_LT(worst, 0.01) << "round " << r;
    EXPECT_GT(worst, 0.0) << "round " << r << ": int8 should not be exact";
  }
  // Per compressed round each node sends ~1.016 bytes per element (int8 + a scale per 256).
  const double raw_round = 4.0 * kNumel * (kNodes - 1);
  double compressed = static_cast<double>(runs[0].traffic.payload_sent) - raw_round;  // minus round 0
  EXPECT_NEAR(compressed / ((kRounds - 1) * raw_round), 1.0 / 4, 0.01);
}

TEST(CompressedLocalSgd, TopkWithErrorFeedbackKeepsReplicasIdenticalAndSendsAFraction) {
  constexpr int kNodes = 3, kRounds = 4;
  constexpr size_t kNumel = 20000;
  auto runs = run("topk:0.01+ef", kNodes, kRounds, kNumel);
  ASSERT_FALSE(HasFailure());
  expect_identical_replicas(runs);
  const double raw_round = 4.0 * kNumel * (kNodes - 1);
  double compressed = static_cast<double>(runs[0].traffic.payload_sent) - raw_round;
  EXPECT_LT(compressed / ((kRounds - 1) * raw_round), 1.0 / 50) << "1% of entries with their indices";
  EXPECT_GT(compressed, 0.0);
}

}  // namespace
}  // namespace gossip::testing

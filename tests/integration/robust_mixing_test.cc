// Trimmed-mean mixing (--trim) against a faulty peer, with real daemons: node 3 of a
// 4-node ring sends 1e6 in every coordinate before every round. With --trim 1 its
// neighbors keep values inside the honest range; plain gossip lets it drag them.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness.h"
#include "node_rounds.h"

namespace gossip::testing {
namespace {

constexpr size_t kNumel = 256;
constexpr float kFaulty = 1e6f;

// The largest |value| on the honest nodes (0..2) after 10 rounds.
float honest_extent(const std::vector<std::string>& flags) {
  std::vector<std::string> all = {"--strategy", "gossip", "--topology", "ring"};
  all.insert(all.end(), flags.begin(), flags.end());
  Cluster cluster(4, all);
  cluster.start_all();
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<Node*> raw;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(attach(cluster, i, kNumel));
    if (!nodes.back()) return -1;
    raw.push_back(nodes.back().get());
    for (size_t e = 0; e < kNumel; ++e)
      nodes[i]->model.tensors[0][e] = static_cast<float>(i) + 0.001f * e;
  }
  sync_rounds(raw, 10, [&](size_t node, int) {
    if (node == 3)
      std::fill(raw[3]->model.tensors[0].begin(), raw[3]->model.tensors[0].end(), kFaulty);
  });
  float extent = 0;
  for (int i = 0; i < 3; ++i)
    for (float v : nodes[i]->model.tensors[0]) extent = std::max(extent, std::abs(v));
  return extent;
}

TEST(RobustMixing, TrimmedMeanKeepsAFaultyNeighborOut) {
  const float plain = honest_extent({});
  const float trimmed = honest_extent({"--trim", "1"});
  // Honest values start in [0, 2.3): the median of three stays there.
  EXPECT_LT(trimmed, 2.3f) << "with --trim 1 the faulty node moved an honest one";
  EXPECT_GT(plain, 1000.0f)
      << "the faulty node should drag plain gossip (else this test shows nothing)";
}

TEST(RobustMixing, TrimTooLargeForTheTopologyIsAConfigError) {
  const int port = free_ports(1)[0];
  ChildProcess p(
      {binary("gossipd"), "--id", "0", "--listen", "tcp://127.0.0.1:" + std::to_string(port),
       "--run-dir", "/tmp", "--peer", "1=tcp://127.0.0.1:1", "--peer", "2=tcp://127.0.0.1:2",
       "--strategy", "gossip", "--topology", "ring", "--trim", "2"},
      std::filesystem::temp_directory_path() /
          ("gossip-trim-" + std::to_string(::getpid()) + ".log"));
  EXPECT_EQ(p.wait(std::chrono::seconds(10)), 2);
  EXPECT_NE(p.log().find("--trim"), std::string::npos) << p.log();
  EXPECT_NE(p.log().find("needs more than 4 values per coordinate"), std::string::npos) << p.log();
  std::filesystem::remove(std::filesystem::temp_directory_path() /
                          ("gossip-trim-" + std::to_string(::getpid()) + ".log"));
}

}  // namespace
}  // namespace gossip::testing

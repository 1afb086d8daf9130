// A trainer that produces NaN/Inf must not poison the other nodes: its daemon repairs
// its contribution before the round (daemon/nonfinite.h), logs where the bad values
// were, and every replica stays finite.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "gossip/client.h"
#include "harness.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

constexpr uint64_t kNumel = 1000;

struct TwoNodes {
  explicit TwoNodes(const std::string& policy)
      : cluster(2, {"--period", "1", "--nonfinite", policy}) {
    cluster.start_all();
    for (int i = 0; i < 2; ++i) {
      clients[i] = connect_to(cluster, i);
      auto m = clients[i]->attach({{"w", kNumel}});
      EXPECT_TRUE(m.is_ok()) << m.status().message();
      w[i] = m->tensors[0];
    }
  }
  // Both nodes step once (a round, with period 1).
  void step() {
    std::thread other([&] { ASSERT_TRUE(clients[1]->step().is_ok()); });
    ASSERT_TRUE(clients[0]->step().is_ok());
    other.join();
  }
  Cluster cluster;
  std::unique_ptr<Client> clients[2];
  std::span<float> w[2];
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(NonFinite, RefusedUpdatesAreReplacedByTheLastSynchronizedModel) {
  TwoNodes n("refuse");
  // Before any round there is no synchronized model: the bad node contributes zeros.
  std::fill(n.w[0].begin(), n.w[0].end(), 1.0f);
  std::fill(n.w[1].begin(), n.w[1].end(), 3.0f);
  n.w[1][0] = kNaN;
  n.step();
  for (int i = 0; i < 2; ++i)
    for (float v : n.w[i]) ASSERT_EQ(v, 0.5f) << "node " << i;  // (1 + 0) / 2
  // Now the last synchronized model is 0.5 everywhere.
  std::fill(n.w[0].begin(), n.w[0].end(), 1.5f);
  std::fill(n.w[1].begin(), n.w[1].end(), 5.0f);
  n.w[1][5] = kNaN;
  n.w[1][7] = -kInf;
  n.step();
  for (int i = 0; i < 2; ++i)
    for (float v : n.w[i]) ASSERT_EQ(v, 1.0f) << "node " << i;  // (1.5 + 0.5) / 2
  // A clean round afterwards goes through untouched.
  std::fill(n.w[0].begin(), n.w[0].end(), 2.0f);
  std::fill(n.w[1].begin(), n.w[1].end(), 4.0f);
  n.step();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(n.w[i][5], 3.0f);
  const std::string log = n.cluster.log(1);
  EXPECT_NE(
      log.find(
          "round 0: the node's update has 1 NaN/Inf value(s), the first at tensor 'w' element 0: "
          "the node contributes zeros this round"),
      std::string::npos)
      << log;
  EXPECT_NE(
      log.find(
          "round 1: the node's update has 2 NaN/Inf value(s), the first at tensor 'w' element 5: "
          "the node contributes its last synchronized model"),
      std::string::npos)
      << log;
  EXPECT_EQ(n.cluster.log(0).find("NaN/Inf"), std::string::npos) << "node 0 was clean";
}

TEST(NonFinite, ClippedUpdatesKeepTheirFiniteElements) {
  TwoNodes n("clip");
  std::fill(n.w[0].begin(), n.w[0].end(), 1.0f);
  std::fill(n.w[1].begin(), n.w[1].end(), 3.0f);
  n.step();  // 2.0 everywhere
  std::fill(n.w[0].begin(), n.w[0].end(), 1.0f);
  std::fill(n.w[1].begin(), n.w[1].end(), 5.0f);
  n.w[1][3] = kInf;
  n.step();
  for (int i = 0; i < 2; ++i) {
    for (uint64_t k = 0; k < kNumel; ++k) {
      const float want = k == 3 ? 1.5f : 3.0f;  // (1 + 2) / 2 where clipped, (1 + 5) / 2 elsewhere
      ASSERT_EQ(n.w[i][k], want) << "node " << i << " element " << k;
    }
  }
  EXPECT_NE(n.cluster.log(1).find(
                "those elements take their last synchronized values (--nonfinite clip)"),
            std::string::npos)
      << n.cluster.log(1);
}

TEST(NonFinite, AnUnknownPolicyIsRefusedAtStartup) {
  const auto log = std::filesystem::temp_directory_path() /
                   ("gossipd-nonfinite-bad-" + std::to_string(::getpid()) + ".log");
  ChildProcess p({binary("gossipd"), "--id", "0", "--listen", "tcp://127.0.0.1:1", "--run-dir",
                  "/tmp", "--nonfinite", "ignore"},
                 log);
  EXPECT_EQ(p.wait(std::chrono::seconds(10)), 2);
  const std::string text = p.log();
  std::error_code ignored;
  std::filesystem::remove(log, ignored);
  EXPECT_NE(text.find("nonfinite"), std::string::npos) << text;
}

}  // namespace
}  // namespace gossip::testing

// A trainer that produces NaN/Inf must not poison the other nodes: its daemon repairs
// its contribution before the round (daemon/nonfinite.h), logs where the bad values
// were, and every replica stays finite. A model that diverges without NaN (its norm
// past 10 times its first round's) is reported, and under --on-divergence stop ends the
// trainers' syncs (daemon/divergence.h).
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
  explicit TwoNodes(const std::string& policy, const std::string& on_divergence = "warn")
      : cluster(2, {"--period", "1", "--nonfinite", policy, "--on-divergence", on_divergence}) {
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

// Both nodes set their replicas to `value` everywhere and step: one round (period 1).
// From 1 at round 0 (norm 31.62) to 16 is 16 times the first norm, past the bound of 10.
void round_at(TwoNodes& n, float value, bool expect_ok = true) {
  for (int i = 0; i < 2; ++i) std::fill(n.w[i].begin(), n.w[i].end(), value);
  std::thread other([&] { EXPECT_EQ(n.clients[1]->step().is_ok(), expect_ok); });
  auto s = n.clients[0]->step();
  other.join();
  EXPECT_EQ(s.is_ok(), expect_ok) << "at " << value << ": "
                                  << (s.is_ok() ? "ok" : s.status().message());
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Divergence, AModelWhoseNormGrowsTenfoldIsReportedOnceAndUnderWarnTrainingGoesOn) {
  TwoNodes n("refuse", "warn");
  for (float v : {1.0f, 2.0f, 4.0f, 8.0f}) round_at(n, v);  // rounds 0-3: at most 8x
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(n.cluster.log(i).find("diverged"), std::string::npos) << "8x is not divergence";
  round_at(n, 16.0f);  // round 4
  round_at(n, 32.0f);  // warn: the syncs go on
  for (int i = 0; i < 2; ++i) {
    const std::string log = n.cluster.log(i);
    EXPECT_NE(log.find("round 4: the model diverged: its norm is 506, 16.0 times its 31.62 after "
                       "the first round"),
              std::string::npos)
        << log;
    EXPECT_EQ(count(log, "diverged"), 1u) << "said once\n" << log;
    EXPECT_EQ(log.find("syncs fail"), std::string::npos) << "warn does not stop";
  }
}

TEST(Divergence, UnderStopTheSyncThatDivergedAndEveryLaterOneFailNamingTheCause) {
  TwoNodes n("refuse", "stop");
  for (float v : {1.0f, 2.0f, 4.0f, 8.0f}) round_at(n, v);
  round_at(n, 16.0f, false);
  round_at(n, 1.0f, false);  // and every later one, whatever the model
  const std::string log = n.cluster.log(0);
  EXPECT_NE(log.find("round 4: the model diverged"), std::string::npos) << log;
  EXPECT_NE(log.find("--on-divergence stop"), std::string::npos) << log;
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

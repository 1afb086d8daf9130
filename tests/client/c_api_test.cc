// The C ABI (gossip.h / libgossip.so) against a real gossipd: what a ctypes or
// other-language trainer does, including every error path returning a code and a
// message rather than throwing.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "base/version.h"
#include "gossip/gossip.h"
#include "harness.h"

namespace gossip::testing {
namespace {

TEST(CApi, AttachStepSyncDetachAgainstARealDaemon) {
  Cluster cluster(2, {"--period", "2"});
  cluster.start_all();
  gossip_client* c[2] = {nullptr, nullptr};
  float* tensors[2][2] = {};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(gossip_connect(cluster.ipc_endpoint(i).c_str(), "c-trainer", 0, 20000, &c[i]),
              GOSSIP_OK)
        << gossip_last_error(nullptr);
    const char* names[] = {"w", "b"};
    const uint64_t numels[] = {100, 3};
    int initialized = -1;
    ASSERT_EQ(gossip_attach(c[i], 2, names, numels, tensors[i], &initialized), GOSSIP_OK)
        << gossip_last_error(c[i]);
    EXPECT_EQ(initialized, 0);
    gossip_model_info info{};
    ASSERT_EQ(gossip_model(c[i], &info), GOSSIP_OK);
    EXPECT_EQ(info.node, static_cast<uint32_t>(i));
    EXPECT_EQ(info.nodes, 2u);
    EXPECT_EQ(info.start_step, 0u);
    EXPECT_STREQ(info.strategy, "local-sgd");
    EXPECT_EQ(gossip_next_step_syncs(c[i]), 0) << "period 2: step 1 is local";
    for (int k = 0; k < 100; ++k) tensors[i][0][k] = static_cast<float>(i * 10 + 1);  // 1 and 11
    for (int k = 0; k < 3; ++k) tensors[i][1][k] = static_cast<float>(i);
  }
  gossip_step_result r[2] = {};
  // Step 1 is local; step 2 synchronizes (period 2), so the two nodes step together.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(gossip_step(c[i], &r[i]), GOSSIP_OK) << gossip_last_error(c[i]);
    EXPECT_EQ(r[i].synced, 0);
    EXPECT_EQ(gossip_next_step_syncs(c[i]), 1);
  }
  std::thread other(
      [&] { EXPECT_EQ(gossip_step(c[1], &r[1]), GOSSIP_OK) << gossip_last_error(c[1]); });
  ASSERT_EQ(gossip_step(c[0], &r[0]), GOSSIP_OK) << gossip_last_error(c[0]);
  other.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r[i].synced, 1);
    EXPECT_EQ(r[i].step, 2u);
    EXPECT_EQ(r[i].round, 1u);
    EXPECT_EQ(tensors[i][0][99], 6.0f);  // (1 + 11) / 2
    EXPECT_EQ(tensors[i][1][2], 0.5f);
    EXPECT_GT(r[i].payload_sent, 0u);
  }
  std::thread forced([&] { EXPECT_EQ(gossip_sync(c[1], &r[1]), GOSSIP_OK); });
  EXPECT_EQ(gossip_sync(c[0], &r[0]), GOSSIP_OK);
  forced.join();
  EXPECT_EQ(r[0].round, 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(gossip_detach(c[i]), GOSSIP_OK);
    gossip_model_info info{};
    EXPECT_EQ(gossip_model(c[i], &info), GOSSIP_EINVAL) << "no model after detach";
    gossip_close(c[i]);
  }
}

TEST(CApi, TheLibraryNamesItsVersion) {
  EXPECT_STREQ(gossip_version(), gossip::kVersion);
  EXPECT_EQ(std::string(gossip_version()).substr(0, 2), "0.") << "the SONAME's major is 0";
}

TEST(CApi, ErrorsAreCodesWithMessagesNeverExceptions) {
  gossip_client* c = nullptr;
  EXPECT_EQ(gossip_connect(nullptr, "x", 0, 0, &c), GOSSIP_EINVAL);
  EXPECT_NE(std::string(gossip_last_error(nullptr)).find("endpoint"), std::string::npos);
  EXPECT_NE(gossip_connect("ipc:///nonexistent/dir/gossipd-0.sock", "x", 0, 1000, &c), GOSSIP_OK);
  EXPECT_NE(std::string(gossip_last_error(nullptr)).find("no gossipd socket"), std::string::npos)
      << gossip_last_error(nullptr);
  EXPECT_EQ(gossip_step(nullptr, nullptr), GOSSIP_EINVAL);

  Cluster cluster(1, {});
  cluster.start_all();
  ASSERT_EQ(gossip_connect(cluster.ipc_endpoint(0).c_str(), nullptr, 0, 5000, &c), GOSSIP_OK);
  float* t[1] = {};
  EXPECT_EQ(gossip_step(c, nullptr), GOSSIP_EREFUSED) << "step before attach";
  EXPECT_NE(std::string(gossip_last_error(c)).find("before attach"), std::string::npos);
  EXPECT_EQ(gossip_attach(c, 0, nullptr, nullptr, t, nullptr), GOSSIP_EINVAL);
  const char* names[] = {"w"};
  const uint64_t zero[] = {0};
  EXPECT_EQ(gossip_attach(c, 1, names, zero, t, nullptr), GOSSIP_EREFUSED);
  EXPECT_NE(std::string(gossip_last_error(c)).find("0 elements"), std::string::npos)
      << gossip_last_error(c);
  const uint64_t ten[] = {10};
  ASSERT_EQ(gossip_attach(c, 1, names, ten, t, nullptr), GOSSIP_OK);
  gossip_client* other = nullptr;
  ASSERT_EQ(gossip_connect(cluster.ipc_endpoint(0).c_str(), "other", 1, 5000, &other), GOSSIP_OK);
  const uint64_t eleven[] = {11};
  EXPECT_EQ(gossip_attach(other, 1, names, eleven, t, nullptr), GOSSIP_EREFUSED);
  EXPECT_NE(std::string(gossip_last_error(other)).find("tensor 0 'w'"), std::string::npos)
      << gossip_last_error(other);
  gossip_close(other);
  gossip_close(c);  // closing while attached detaches
}

}  // namespace
}  // namespace gossip::testing

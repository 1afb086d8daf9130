// A trainer and its daemon started in either order (issue 21: launchers, pods): the
// reference trainer, started 5 s before its daemon, waits for it and trains the real
// Fashion-MNIST; one whose daemon never comes fails within its start-up timeout,
// naming the socket and how long it waited.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"
#include "tests/experiments/temp_dir.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(Startup, ATrainerStartedBeforeItsDaemonWaitsForItAndTrains) {
  Cluster c(1, {"--strategy", "local-sgd", "--period", "4"});
  const auto result = c.run_dir() / "trainer.json";
  ChildProcess trainer({binary("gossip-train"), "--endpoint", c.ipc_endpoint(0), "--steps", "100",
                        "--startup-timeout-s", "30", "--result", result.string()},
                       c.run_dir() / "trainer.log");
  std::this_thread::sleep_for(5s);
  ASSERT_TRUE(trainer.running()) << "the trainer did not wait:\n" << trainer.log();
  c.start_all();
  ASSERT_EQ(trainer.wait(120s), 0) << trainer.log() << c.log(0);
  const std::string json = read_text(result);
  EXPECT_NE(json.find("\"accuracy_local\""), std::string::npos) << json;
  EXPECT_NE(c.log(0).find("attached"), std::string::npos) << c.log(0);
}

TEST(Startup, ATrainerWhoseDaemonNeverComesFailsAtItsTimeoutNamingTheSocket) {
  // No daemon, so no Cluster (whose clean-up waits out the grace of daemons never started).
  const trainer::testing::TempDir tmp;
  const std::filesystem::path& dir = tmp.path();
  const auto t0 = Clock::now();
  ChildProcess trainer(
      {binary("gossip-train"), "--endpoint", "ipc://" + (dir / "gossipd-0.sock").string(),
       "--steps", "10", "--startup-timeout-s", "2"},
      dir / "trainer.log");
  const int rc = trainer.wait(30s);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "still waiting after 30 s";
  EXPECT_GE(waited, 2.0) << "it gave up before its start-up timeout";
  EXPECT_LT(waited, 10.0);
  const std::string log = trainer.log();
  EXPECT_NE(log.find("no gossipd socket at " + (dir / "gossipd-0.sock").string() +
                     " after waiting 2.0 s"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace gossip::testing

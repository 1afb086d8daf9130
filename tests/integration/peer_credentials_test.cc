// The daemon knows its trainers by the kernel's word (SO_PEERCRED on the IPC socket),
// not by the pid they report: across PID namespaces (containers in a pod share none)
// the reported pid names another process, or none. Real gossipd and gossip-train,
// one of them in a PID namespace of its own made by unshare(1); skipped where this
// user cannot make one.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "tests/experiments/temp_dir.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::vector<std::string> kUnshare{"/usr/bin/unshare", "--pid", "--fork", "--kill-child"};

bool can_unshare_pids(const fs::path& dir) {
  std::vector<std::string> argv = kUnshare;
  argv.push_back("/bin/true");
  ChildProcess probe(argv, dir / "probe.log");
  return probe.wait(10s) == 0;
}

bool wait_for_log(ChildProcess& p, const std::string& text, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (p.log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

class PeerCredentials : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!can_unshare_pids(tmp_.path()))
      GTEST_SKIP() << "unshare --pid fails here (it needs root or user namespaces)";
    port_ = free_ports(1)[0];
  }
  std::vector<std::string> daemon() const {
    return {binary("gossipd"),
            "--id",
            "0",
            "--listen",
            "tcp://127.0.0.1:" + std::to_string(port_),
            "--run-dir",
            tmp_.path().string(),
            "--strategy",
            "local-sgd"};
  }
  std::vector<std::string> trainer() const {
    return {binary("gossip-train"),
            "--endpoint",
            "ipc://" + (tmp_.path() / "gossipd-0.sock").string(),
            "--steps",
            "1000000",
            "--eval-every",
            "0",
            "--startup-timeout-s",
            "30"};
  }
  static std::vector<std::string> in_own_pid_namespace(std::vector<std::string> argv) {
    std::vector<std::string> out = kUnshare;
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  const trainer::testing::TempDir tmp_;
  int port_ = 0;
};

TEST_F(PeerCredentials, ATrainerInItsOwnPidNamespaceIsWatchedByItsRealPid) {
  ChildProcess d(daemon(), tmp_.path() / "gossipd.log");
  ChildProcess t(in_own_pid_namespace(trainer()), tmp_.path() / "trainer.log");
  // It says it is pid 1 (or 2); the daemon sees which process it really is.
  ASSERT_TRUE(wait_for_log(d, "in its own PID namespace)", 30s)) << d.log() << t.log();
  ASSERT_TRUE(wait_for_log(d, "attached in slot 0", 10s)) << d.log();
  EXPECT_EQ(d.log().find("is pid 1 here"), std::string::npos) << d.log();
  // Its death is seen at once through that pid, not the one it reported.
  t.signal(SIGKILL);
  EXPECT_TRUE(wait_for_log(d, "exited without detaching; 0 trainer(s) left", 5s)) << d.log();
}

TEST_F(PeerCredentials, ATrainerTheDaemonCannotSeeIsWatchedByItsConnection) {
  // The daemon in a namespace of its own: the trainer's pid has no number there, as
  // between two containers of a pod without a shared PID namespace.
  ChildProcess d(in_own_pid_namespace(daemon()), tmp_.path() / "gossipd.log");
  ChildProcess t(trainer(), tmp_.path() / "trainer.log");
  ASSERT_TRUE(wait_for_log(d, "runs in a PID namespace this daemon cannot see", 30s))
      << d.log() << t.log();
  ASSERT_TRUE(wait_for_log(d, "attached in slot 0", 10s)) << d.log();
  t.signal(SIGKILL);
  EXPECT_TRUE(wait_for_log(d, "closed its connection without detaching; 0 trainer(s) left", 5s))
      << d.log();
  // And a trainer can attach again in its place.
  ChildProcess again(trainer(), tmp_.path() / "trainer2.log");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  auto attaches = [&] {
    const std::string log = d.log();
    int n = 0;
    for (size_t at = log.find("attached in slot 0"); at != std::string::npos;
         at = log.find("attached in slot 0", at + 1))
      ++n;
    return n;
  };
  while (attaches() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(attaches(), 2) << d.log();
}

}  // namespace
}  // namespace gossip::testing

#include "cli/process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/cli/test_support.h"

namespace gossip::cli {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

Process spawn_ok(std::vector<std::string> argv, std::string output = "") {
  auto p = Process::spawn(SpawnOptions{std::move(argv), std::move(output), ""});
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return p.is_ok() ? std::move(*p) : Process();
}

bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (!std::filesystem::exists(path)) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(Process, ReportsExitStatus) {
  Process p = spawn_ok({"/bin/sh", "-c", "exit 3"});
  auto e = p.wait_until(Clock::now() + 10s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, 3);
  EXPECT_EQ(e->signal, 0);
  EXPECT_FALSE(e->success());
  EXPECT_EQ(e->describe(), "exited with status 3");
  EXPECT_FALSE(p.running());
}

TEST(Process, ReportsDeathBySignal) {
  Process p = spawn_ok({"/bin/sh", "-c", "kill -SEGV $$"});
  auto e = p.wait_until(Clock::now() + 10s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGSEGV);
  EXPECT_NE(e->describe().find("killed by signal 11"), std::string::npos) << e->describe();
}

TEST(Process, ExecFailureIsAnErrorNamingTheProgram) {
  auto p = Process::spawn(SpawnOptions{{"/nonexistent/gossipd", "--id", "0"}, "", ""});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("/nonexistent/gossipd"), std::string::npos)
      << p.status().message();
}

TEST(Process, UnopenableLogIsAnError) {
  auto p = Process::spawn(SpawnOptions{{"/bin/true"}, "/nonexistent-dir/x.log", ""});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("/nonexistent-dir/x.log"), std::string::npos);
}

TEST(Process, RedirectsOutputAndReadsStdinFromDevNull) {
  TempDir dir;
  const std::string log = dir.file("out.log");
  // cat returns at once on /dev/null; a terminal or pipe as stdin would block it.
  Process p = spawn_ok({"/bin/sh", "-c", "cat; echo to-stdout; echo to-stderr >&2"}, log);
  auto e = p.wait_until(Clock::now() + 10s);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->success());
  const std::string text = testing::read_file(log);
  EXPECT_NE(text.find("to-stdout"), std::string::npos);
  EXPECT_NE(text.find("to-stderr"), std::string::npos);
}

TEST(Process, SeparateStderr) {
  TempDir dir;
  auto p = Process::spawn(SpawnOptions{
      {"/bin/sh", "-c", "echo out; echo err >&2"}, dir.file("o.log"), dir.file("e.log")});
  ASSERT_TRUE(p.is_ok());
  ASSERT_TRUE(p->wait_until(Clock::now() + 10s));
  EXPECT_EQ(testing::read_file(dir.file("o.log")), "out\n");
  EXPECT_EQ(testing::read_file(dir.file("e.log")), "err\n");
}

TEST(Process, PollDoesNotBlock) {
  Process p = spawn_ok({"/bin/sleep", "30"});
  const auto start = Clock::now();
  EXPECT_FALSE(p.poll());
  EXPECT_TRUE(p.running());
  EXPECT_LT(Clock::now() - start, 100ms);
  auto e = p.terminate(2000ms);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGTERM);
  EXPECT_FALSE(e->forced);
}

TEST(Process, TerminateKillsAChildThatIgnoresSigterm) {
  TempDir dir;
  const std::string ready = dir.file("ready");
  Process p = spawn_ok(
      {"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; while :; do sleep 0.05; done"});
  ASSERT_TRUE(wait_for_file(ready, 10s));
  const pid_t pid = p.pid();
  const auto start = Clock::now();
  auto e = p.terminate(300ms);
  const auto took = Clock::now() - start;
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_TRUE(e->forced);
  EXPECT_NE(e->describe().find("SIGKILL"), std::string::npos) << e->describe();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 3s);
  EXPECT_FALSE(testing::process_alive(pid));
}

TEST(Process, WhatTheChildLeftInItsGroupIsKilledWhenItEnds) {
  TempDir dir;
  const std::string pid_file = dir.file("grandchild");
  Process p = spawn_ok({"/bin/sh", "-c", "sleep 30 & echo $! > " + pid_file + "; exit 0"});
  auto e = p.wait_until(Clock::now() + 10s);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->success());
  const std::string text = testing::read_file(pid_file);
  ASSERT_FALSE(text.empty());
  EXPECT_TRUE(testing::wait_gone(static_cast<pid_t>(std::stol(text)), 5000ms));
}

TEST(Process, TerminateReachesTheWholeGroup) {
  TempDir dir;
  const std::string pid_file = dir.file("grandchild");
  Process p = spawn_ok({"/bin/sh", "-c", "sleep 30 & echo $! > " + pid_file + "; wait"});
  ASSERT_TRUE(wait_for_file(pid_file, 10s));
  std::this_thread::sleep_for(20ms);  // the pid is written
  const pid_t grandchild = static_cast<pid_t>(std::stol(testing::read_file(pid_file)));
  ASSERT_TRUE(p.terminate(2000ms));
  EXPECT_TRUE(testing::wait_gone(grandchild, 5000ms));
}

TEST(Process, DestructorKillsAndReaps) {
  pid_t pid = -1;
  {
    Process p = spawn_ok({"/bin/sleep", "30"});
    pid = p.pid();
    EXPECT_TRUE(testing::process_alive(pid));
  }
  EXPECT_FALSE(testing::process_alive(pid));
}

TEST(Process, MoveKeepsOwnership) {
  std::vector<Process> ps;
  for (int i = 0; i < 3; ++i) ps.push_back(spawn_ok({"/bin/sleep", "30"}));
  std::vector<pid_t> pids;
  for (const Process& p : ps) pids.push_back(p.pid());
  Process moved = std::move(ps[0]);
  EXPECT_FALSE(ps[0].running());
  EXPECT_TRUE(moved.running());
  ps.clear();
  moved = Process();  // kills the one it held
  for (pid_t pid : pids) EXPECT_FALSE(testing::process_alive(pid)) << pid;
}

TEST(Process, TerminateAllSharesOneGracePeriod) {
  TempDir dir;
  std::vector<Process> ps;
  for (int i = 0; i < 4; ++i) {
    const std::string ready = dir.file("ready" + std::to_string(i));
    ps.push_back(spawn_ok(
        {"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; while :; do sleep 0.05; done"}));
    ASSERT_TRUE(wait_for_file(ready, 10s));
  }
  ps.push_back(spawn_ok({"/bin/sleep", "30"}));
  std::vector<Process*> ptrs;
  for (Process& p : ps) ptrs.push_back(&p);
  const auto start = Clock::now();
  terminate_all(ptrs, 500ms);
  EXPECT_LT(Clock::now() - start, 3s);  // not 4 x the grace
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ps[static_cast<size_t>(i)].exit_status());
    EXPECT_TRUE(ps[static_cast<size_t>(i)].exit_status()->forced);
  }
  ASSERT_TRUE(ps[4].exit_status());
  EXPECT_EQ(ps[4].exit_status()->signal, SIGTERM);
  EXPECT_FALSE(ps[4].exit_status()->forced);
}

// A process that was never started is not waited for: a cluster of which only some
// nodes ran stopped in 10 s (the grace and the reap timeout) instead of at once.
TEST(Process, TerminateAllDoesNotWaitForAProcessNeverStarted) {
  Process never;
  Process sleeper = spawn_ok({"/bin/sleep", "30"});
  std::vector<Process*> ptrs = {&never, &sleeper};
  const auto start = Clock::now();
  terminate_all(ptrs, 5s);
  EXPECT_LT(Clock::now() - start, 2s);
  ASSERT_TRUE(sleeper.exit_status());
  EXPECT_EQ(sleeper.exit_status()->signal, SIGTERM);
  EXPECT_FALSE(never.exit_status());
  const auto again = Clock::now();
  terminate_all(std::vector<Process*>{&never}, 5s);
  EXPECT_LT(Clock::now() - again, 1s);
}

}  // namespace
}  // namespace gossip::cli

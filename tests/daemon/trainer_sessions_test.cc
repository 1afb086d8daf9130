#include "daemon/trainer_sessions.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gossip::daemon {
namespace {

TEST(TrainerSessions, SlotsAreReusedAndTheNodeHasACapacity) {
  TrainerSessions s(2);
  auto a = s.add("a", "A", 0, ::getpid());
  auto b = s.add("b", "B", 1, ::getpid());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ((*a)->slot, 0u);
  EXPECT_EQ((*b)->slot, 1u);
  auto c = s.add("c", "C", 2, ::getpid());
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("full"), std::string::npos);
  s.remove("a");
  auto d = s.add("d", "D", 0, ::getpid());
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ((*d)->slot, 0u);
  EXPECT_FALSE(s.add("d", "D", 0, ::getpid()).is_ok()) << "same connection twice";
}

TEST(TrainerSessions, BarrierNeedsEveryAttachedTrainer) {
  TrainerSessions s(4);
  EXPECT_FALSE(s.all_waiting()) << "no trainer, no round";
  auto a = s.add("a", "A", 0, ::getpid());
  auto b = s.add("b", "B", 1, ::getpid());
  (*a)->waiting = true;
  EXPECT_FALSE(s.all_waiting());
  (*b)->waiting = true;
  EXPECT_TRUE(s.all_waiting());
  s.remove("b");
  EXPECT_TRUE(s.all_waiting());
}

TEST(TrainerSessions, ProcessThatDoesNotExistIsRefusedAndAnExitIsSeenOnThePidfd) {
  TrainerSessions s(4);
  EXPECT_FALSE(s.add("x", "X", 0, 0).is_ok());
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto t = s.add("c", "C", 0, child);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(s.find_by_pidfd((*t)->pidfd), *t);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  pollfd p{(*t)->pidfd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 5000), 1) << "pidfd becomes readable when the trainer dies";
  EXPECT_FALSE(s.add("dead", "D", 0, child).is_ok()) << "a reaped pid cannot be watched";
}

}  // namespace
}  // namespace gossip::daemon

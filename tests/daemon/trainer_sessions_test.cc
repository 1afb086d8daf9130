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
  auto a = s.add("a", "A", 0, ::getpid(), -1);
  auto b = s.add("b", "B", 1, ::getpid(), -1);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ((*a)->slot, 0u);
  EXPECT_EQ((*b)->slot, 1u);
  auto c = s.add("c", "C", 2, ::getpid(), -1);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("full"), std::string::npos);
  s.remove("a");
  auto d = s.add("d", "D", 0, ::getpid(), -1);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ((*d)->slot, 0u);
  EXPECT_FALSE(s.add("d", "D", 0, ::getpid(), -1).is_ok()) << "same connection twice";
}

TEST(TrainerSessions, BarrierNeedsEveryAttachedTrainer) {
  TrainerSessions s(4);
  EXPECT_FALSE(s.all_waiting()) << "no trainer, no round";
  auto a = s.add("a", "A", 0, ::getpid(), -1);
  auto b = s.add("b", "B", 1, ::getpid(), -1);
  (*a)->waiting = true;
  EXPECT_FALSE(s.all_waiting());
  (*b)->waiting = true;
  EXPECT_TRUE(s.all_waiting());
  s.remove("b");
  EXPECT_TRUE(s.all_waiting());
}

TEST(TrainerSessions, ProcessThatDoesNotExistIsRefusedAndAnExitIsSeenOnThePidfd) {
  TrainerSessions s(4);
  EXPECT_FALSE(s.add("x", "X", 0, 0, -1).is_ok()) << "neither a pid nor a connection to watch";
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto t = s.add("c", "C", 0, child, -1);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(s.find_by_pidfd((*t)->pidfd), *t);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  pollfd p{(*t)->pidfd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 5000), 1) << "pidfd becomes readable when the trainer dies";
  EXPECT_FALSE(s.add("dead", "D", 0, child, -1).is_ok()) << "a reaped pid cannot be watched";
}

TEST(TrainerSessions, AnInvisibleProcessIsWatchedByItsConnectionUnlessTheDescriptorIsShared) {
  TrainerSessions s(4);
  auto t = s.add("a", "A", 0, 0, 17);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ((*t)->pidfd, -1);
  EXPECT_EQ(s.find_unwatched_by_connection(17), *t);
  EXPECT_EQ(s.find_unwatched_by_connection(18), nullptr);
  ASSERT_TRUE(s.add("b", "B", 1, 0, 17).is_ok());
  EXPECT_EQ(s.find_unwatched_by_connection(17), nullptr) << "two sessions on one descriptor";
}

}  // namespace
}  // namespace gossip::daemon

#include "daemon/arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "client/shm_mapping.h"

namespace gossip::daemon {
namespace {

std::string unique_name(const char* what) {
  return "/gossipd-test-" + std::string(what) + "-" + std::to_string(::getpid());
}

TEST(Arena, IsOwnerOnlyPageAlignedAndUnlinkedWhenDestroyed) {
  std::string name = unique_name("modes");
  std::filesystem::path file = "/dev/shm" + name;
  {
    mode_t old = ::umask(0);  // the arena must not depend on the caller's umask
    auto arena = Arena::create(name, 3, 1000);
    ::umask(old);
    ASSERT_TRUE(arena.is_ok()) << arena.status().message();
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(arena->slots(), 3u);
    for (uint32_t s = 0; s < 3; ++s) {
      EXPECT_EQ(arena->slot_offset(s) % Arena::kPageBytes, 0u);
      EXPECT_EQ(arena->slot(s).size(), 1000u);
    }
    EXPECT_GE(arena->slot_offset(1), arena->slot_offset(0) + 1000 * sizeof(float));
    EXPECT_LE(arena->slot_offset(2) + 1000 * sizeof(float), arena->size_bytes());
  }
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(Arena, RefusesAnExistingObjectAndBadNames) {
  std::string name = unique_name("dup");
  auto a = Arena::create(name, 1, 16);
  ASSERT_TRUE(a.is_ok());
  auto b = Arena::create(name, 1, 16);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find(name), std::string::npos) << b.status().message();
  EXPECT_FALSE(Arena::create("no-slash", 1, 16).is_ok());
  EXPECT_FALSE(Arena::create("/a/b", 1, 16).is_ok());
  EXPECT_FALSE(Arena::create(unique_name("empty"), 0, 16).is_ok());
}

TEST(Arena, ATrainerMappingSeesTheDaemonsWritesAndViceVersa) {
  std::string name = unique_name("share");
  auto arena = Arena::create(name, 2, 5000);
  ASSERT_TRUE(arena.is_ok());
  auto mapping = client::ShmMapping::map(name, arena->slot_offset(1), 5000 * sizeof(float));
  ASSERT_TRUE(mapping.is_ok()) << mapping.status().message();
  auto* trainer = reinterpret_cast<float*>(mapping->data());
  trainer[4999] = 42.0f;
  EXPECT_EQ(arena->slot(1)[4999], 42.0f);
  EXPECT_EQ(arena->slot(0)[4999], 0.0f);
  arena->slot(1)[0] = -1.0f;
  EXPECT_EQ(trainer[0], -1.0f);
}

TEST(Arena, MappingBeyondTheObjectOrUnalignedIsRefused) {
  std::string name = unique_name("bounds");
  auto arena = Arena::create(name, 1, 100);
  ASSERT_TRUE(arena.is_ok());
  auto too_big = client::ShmMapping::map(name, arena->slot_offset(0), arena->size_bytes());
  EXPECT_FALSE(too_big.is_ok());
  auto unaligned = client::ShmMapping::map(name, 12, 100);
  EXPECT_FALSE(unaligned.is_ok());
  auto missing = client::ShmMapping::map(unique_name("missing"), 0, 100);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot open arena"), std::string::npos);
}

}  // namespace
}  // namespace gossip::daemon

namespace gossip::daemon {
namespace {

TEST(Arena, StaleArenasOfDeadDaemonsAndOfThisPidAreRemovedAndLiveOnesKept) {
  constexpr uint32_t kNode = 987654;
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that no longer runs
  std::string dead = "/gossipd-" + std::to_string(::getuid()) + "-" + std::to_string(kNode) + "-" +
                     std::to_string(child);
  int fd = ::shm_open(dead.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  // A live daemon's: another process that still runs.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t runner = ::fork();
  if (runner == 0) {
    ::close(ready[0]);
    auto arena = Arena::create(Arena::name_for(kNode), 1, 16);
    const char ok = arena.is_ok() ? '1' : '0';
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(ok, '1');
  std::string live;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with("gossipd-" + std::to_string(::getuid()) + "-" +
                                                 std::to_string(kNode) + "-" +
                                                 std::to_string(runner) + "-"))
      live = "/" + e.path().filename().string();
  ASSERT_FALSE(live.empty());
  // A predecessor's with this process's pid: in a container every daemon is pid 1.
  auto predecessor = Arena::create(Arena::name_for(kNode), 1, 16);
  ASSERT_TRUE(predecessor.is_ok());
  const std::string mine = predecessor->name();
  auto removed = Arena::remove_stale(kNode);
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected{dead, mine};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + dead));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + mine));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + live));
  ::kill(runner, SIGKILL);
  ::waitpid(runner, nullptr, 0);
  ::shm_unlink(live.c_str());
}

// The name carries 64 random bits: another local user cannot create it first.
TEST(Arena, NamesAreNotPredictable) {
  const std::string a = Arena::name_for(7), b = Arena::name_for(7);
  EXPECT_NE(a, b);
  const std::string prefix =
      "/gossipd-" + std::to_string(::getuid()) + "-7-" + std::to_string(::getpid()) + "-";
  EXPECT_TRUE(a.starts_with(prefix)) << a;
  EXPECT_EQ(a.size(), prefix.size() + 16) << a;
}

}  // namespace
}  // namespace gossip::daemon

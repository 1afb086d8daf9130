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
#include <fstream>

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

// A 16-bit replica: the trainer's bytes are bf16 or fp16, the daemon's view fp32;
// pull() reads a range exactly, push() rounds a range to nearest even and leaves
// the rest of the replica (the next gradient bucket the trainer writes) alone.
TEST(Arena, SixteenBitReplicasArePulledAndPushedByRange) {
  for (const auto dtype : {proto::DType::kBF16, proto::DType::kF16}) {
    SCOPED_TRACE(proto::dtype_name(dtype));
    const std::string name = unique_name("half");
    auto arena = Arena::create(name, 2, 4096, dtype);
    ASSERT_TRUE(arena.is_ok()) << arena.status().message();
    EXPECT_EQ(arena->dtype(), dtype);
    EXPECT_EQ(arena->slot_offset(1) - arena->slot_offset(0), 8192u) << "2 bytes an element";
    auto mapping = client::ShmMapping::map(name, arena->slot_offset(1), 4096 * 2);
    ASSERT_TRUE(mapping.is_ok()) << mapping.status().message();
    auto* trainer = reinterpret_cast<uint16_t*>(mapping->data());
    const bool bf16 = dtype == proto::DType::kBF16;
    const uint16_t one = bf16 ? 0x3f80 : 0x3c00, minus_two = bf16 ? 0xc000 : 0xc000;
    std::fill(trainer, trainer + 4096, one);
    trainer[100] = minus_two;
    arena->pull(1, 64, 64);  // [64, 128)
    auto view = arena->slot(1);
    ASSERT_EQ(view.size(), 4096u);
    EXPECT_EQ(view[64], 1.0f);
    EXPECT_EQ(view[100], -2.0f);
    EXPECT_EQ(view[63], 0.0f) << "outside the range: not read";
    EXPECT_EQ(view[128], 0.0f);

    // Halfway between 1 and the next value up (bf16: 2^-7 apart, fp16: 2^-10): ties
    // go to the even one, 1; a little more goes up.
    view[70] = bf16 ? 1.0f + 1.0f / 256 : 1.0f + 1.0f / 2048;
    view[72] = bf16 ? 1.0f + 1.0f / 200 : 1.0f + 1.0f / 1800;
    view[71] = 3.0f;
    view[200] = 5.0f;  // outside the pushed range
    arena->push(1, 64, 64);
    EXPECT_EQ(trainer[70], one) << "a tie goes to even";
    EXPECT_EQ(trainer[72], one + 1) << "above the tie: up";
    EXPECT_EQ(trainer[71], bf16 ? 0x4040 : 0x4200) << "3.0";
    EXPECT_EQ(trainer[200], one) << "outside the range: not written";
    EXPECT_EQ(arena->slot(0)[71], 0.0f) << "another slot's view";
  }
  // An fp32 model's view is the replica itself: pull and push have nothing to do.
  const std::string name = unique_name("f32");
  auto arena = Arena::create(name, 1, 64);
  ASSERT_TRUE(arena.is_ok());
  auto mapping = client::ShmMapping::map(name, arena->slot_offset(0), 64 * 4);
  ASSERT_TRUE(mapping.is_ok());
  reinterpret_cast<float*>(mapping->data())[3] = 7.0f;
  EXPECT_EQ(arena->slot(0)[3], 7.0f);
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

// A live daemon in another PID namespace (a container sharing /dev/shm) once had its
// arena removed by a daemon of the same node id starting here: its pid did not exist
// here (seen when two suites ran at once, a daemon in peer_credentials_test's PID
// namespace removing another test's arena: "cannot open arena").
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
  // Killed, it holds no lock.
  const std::string mine = Arena::name_for(kNode);
  fd = ::shm_open(mine.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  // A live daemon's in another PID namespace: its pid means nothing here (this one
  // is dead here, another could be this process's), but it holds its arena's lock.
  pid_t elsewhere = ::fork();
  if (elsewhere == 0) ::_exit(0);
  ::waitpid(elsewhere, nullptr, 0);
  auto namespaced =
      Arena::create("/gossipd-" + std::to_string(::getuid()) + "-" + std::to_string(kNode) + "-" +
                        std::to_string(elsewhere) + "-00000000000000aa",
                    1, 16);
  ASSERT_TRUE(namespaced.is_ok()) << namespaced.status().message();
  // A link another local user planted under a stale arena's name, to a file of ours:
  // neither followed nor removed.
  const std::string target = "/dev/shm/gossipd-arena-test-target-" + std::to_string(::getpid());
  { std::ofstream(target) << "precious"; }
  const std::string planted = "/dev/shm/gossipd-" + std::to_string(::getuid()) + "-" +
                              std::to_string(kNode) + "-" + std::to_string(child) + "-link";
  ASSERT_EQ(::symlink(target.c_str(), planted.c_str()), 0);
  auto removed = Arena::remove_stale(kNode);
  EXPECT_TRUE(std::filesystem::is_symlink(planted));
  EXPECT_TRUE(std::filesystem::exists(target));
  ::unlink(planted.c_str());
  ::unlink(target.c_str());
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected{dead, mine};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + dead));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + mine));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + live));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + namespaced->name()));
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

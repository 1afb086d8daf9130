// The checkpoint file: what is written is read back bit for bit, and every kind of
// damage is refused with a reason that names the file.

#include "daemon/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "daemon/private_files.h"

namespace gossip::daemon {
namespace {

using ::testing::HasSubstr;

class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("gossip-ckpt-unit-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "node.ckpt").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static Checkpoint sample() {
    Checkpoint c;
    c.node = 3;
    c.strategy = "choco";
    c.layout = 0x1234abcd5678ef00ull;
    c.round = 41;
    c.step = 164;
    for (int i = 0; i < 1000; ++i) c.model.push_back(0.001f * static_cast<float>(i) - 0.3f);
    c.state.tensors["choco.public_self"] = std::vector<float>(1000, 0.5f);
    c.state.tensors["choco.mixed"] = std::vector<float>(1000, -1.25f);
    c.state.scalars["push_sum.weight"] = 0.375;
    return c;
  }
  std::string bytes() const {
    std::ifstream f(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  void overwrite(const std::string& b) const {
    std::ofstream f(path_, std::ios::binary | std::ios::trunc);
    f << b;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(CheckpointFile, RoundTripsEveryField) {
  const Checkpoint c = sample();
  ASSERT_TRUE(write_checkpoint(path_, c));
  auto r = read_checkpoint(path_);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->node, c.node);
  EXPECT_EQ(r->strategy, c.strategy);
  EXPECT_EQ(r->layout, c.layout);
  EXPECT_EQ(r->round, c.round);
  EXPECT_EQ(r->step, c.step);
  EXPECT_EQ(r->model, c.model);
  EXPECT_EQ(r->state.tensors, c.state.tensors);
  EXPECT_EQ(r->state.scalars, c.state.scalars);
  // Owner-only, and no temporary file left beside it.
  EXPECT_EQ(std::filesystem::status(path_).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator()),
            1);
}

// The members that joined by seeds; a checkpoint without them (one
// written before any join, or by an older gossipd) reads as none.
TEST_F(CheckpointFile, KeepsTheMembersThatJoinedBySeeds) {
  Checkpoint c = sample();
  ASSERT_TRUE(write_checkpoint(path_, c));
  auto none = read_checkpoint(path_);
  ASSERT_TRUE(none) << none.status().message();
  EXPECT_TRUE(none->members.empty());
  const std::string key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";  // CURVE's test vector
  c.members = {{4, "tcp://10.0.0.9:7004", 17}, {5, "tcp://[::1]:7005", 0, key}};
  ASSERT_TRUE(write_checkpoint(path_, c));
  auto r = read_checkpoint(path_);
  ASSERT_TRUE(r) << r.status().message();
  ASSERT_EQ(r->members.size(), 2u);
  EXPECT_EQ(r->members[0].id, 4u);
  EXPECT_EQ(r->members[0].endpoint, "tcp://10.0.0.9:7004");
  EXPECT_EQ(r->members[0].first_round, 17u);
  EXPECT_EQ(r->members[0].public_key, "");
  EXPECT_EQ(r->members[1].endpoint, "tcp://[::1]:7005");
  EXPECT_EQ(r->members[1].public_key, key) << "under CURVE its key";
  EXPECT_EQ(r->model, c.model);
  EXPECT_TRUE(r->forgotten.empty());
}

TEST_F(CheckpointFile, KeepsTheMembersForgottenForGood) {
  Checkpoint c = sample();
  c.forgotten = {3, 7};
  ASSERT_TRUE(write_checkpoint(path_, c));
  auto r = read_checkpoint(path_);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->forgotten, (std::vector<uint32_t>{3, 7}));
  EXPECT_TRUE(r->members.empty());
  EXPECT_EQ(r->model, c.model);
}

TEST_F(CheckpointFile, ReplacesTheOldOneWhole) {
  Checkpoint c = sample();
  ASSERT_TRUE(write_checkpoint(path_, c));
  c.round = 42;
  c.model.resize(10);
  c.state = {};
  ASSERT_TRUE(write_checkpoint(path_, c));
  auto r = read_checkpoint(path_);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->round, 42u);
  EXPECT_EQ(r->model.size(), 10u);
  EXPECT_TRUE(r->state.empty());
}

TEST_F(CheckpointFile, MissingFileIsNotFound) {
  auto r = read_checkpoint(path_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
}

TEST_F(CheckpointFile, EveryFlippedByteIsCaught) {
  ASSERT_TRUE(write_checkpoint(path_, sample()));
  const std::string good = bytes();
  // Every byte of the header and the first floats, then a stride through the rest.
  for (size_t i = 0; i < good.size(); i += (i < 512 ? 1 : 97)) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    overwrite(bad);
    auto r = read_checkpoint(path_);
    ASSERT_FALSE(r) << "byte " << i << " flipped went unnoticed";
    EXPECT_THAT(r.status().message(), HasSubstr(path_));
  }
}

TEST_F(CheckpointFile, TruncationIsCaughtAtAnyLength) {
  ASSERT_TRUE(write_checkpoint(path_, sample()));
  const std::string good = bytes();
  for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{16}, size_t{40}, good.size() / 2,
                   good.size() - 1}) {
    overwrite(good.substr(0, n));
    auto r = read_checkpoint(path_);
    ASSERT_FALSE(r) << "truncated to " << n << " bytes";
    EXPECT_EQ(r.status().code(), Status::Code::kInvalid);
  }
}

TEST_F(CheckpointFile, UnwritableDirectoryIsAnIoErrorNamingThePath) {
  const std::string path = (dir_ / "no-such-dir" / "node.ckpt").string();
  Status st = write_checkpoint(path, sample());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_THAT(st.message(), HasSubstr("no-such-dir"));
}

// Issue 46: a link planted at the temporary name the checkpoint used to take
// (<path>.tmp.<pid>) or at the checkpoint's own name made gossipd write through it.
// Now neither is followed: the victim keeps its bytes and the checkpoint is a file.
TEST_F(CheckpointFile, APlantedLinkIsNeverWrittenThrough) {
  const auto victim = dir_ / "victim";
  { std::ofstream(victim) << "keep"; }
  std::filesystem::create_symlink(victim, path_ + ".tmp." + std::to_string(::getpid()));
  std::filesystem::create_symlink(victim, path_);
  ASSERT_TRUE(write_checkpoint(path_, sample()));
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep");
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(path_)))
      << "the link at the checkpoint's name is replaced, not followed";
  auto r = read_checkpoint(path_);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->round, 41u);
  const std::string planted = "node.ckpt.tmp." + std::to_string(::getpid());
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    if (e.path().filename() != planted) {
      EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos)
          << "no temporary file of gossipd's is left: " << e.path();
    }
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ / planted)) << "the planted link is left alone";
}

TEST_F(CheckpointFile, ALinkAtTheCheckpointsNameIsNotResumedFrom) {
  ASSERT_TRUE(write_checkpoint((dir_ / "elsewhere").string(), sample()));
  std::filesystem::create_symlink(dir_ / "elsewhere", path_);
  auto r = read_checkpoint(path_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalid);
  EXPECT_THAT(r.status().message(), HasSubstr("symbolic link"));
}

TEST_F(CheckpointFile, AnotherUsersFileIsNotResumedFrom) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the file to another user (chown)";
  ASSERT_TRUE(write_checkpoint(path_, sample()));
  ASSERT_EQ(::chown(path_.c_str(), 65534, 65534), 0);
  auto r = read_checkpoint(path_);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.status().message(), HasSubstr("belongs to uid 65534"));
}

TEST_F(CheckpointFile, ADirectoryOtherUsersCanWriteIsRefusedWithTheFix) {
  EXPECT_TRUE(check_private_dir(dir_.string(), "checkpoint directory"));
  for (const auto mode : {std::filesystem::perms(0777), std::filesystem::perms(01777),
                          std::filesystem::perms(0770)}) {
    std::filesystem::permissions(dir_, mode);
    Status st = check_private_dir(dir_.string(), "checkpoint directory");
    ASSERT_FALSE(st) << std::oct << static_cast<int>(mode);
    EXPECT_THAT(st.message(), HasSubstr("checkpoint directory " + dir_.string()));
    EXPECT_THAT(st.message(), HasSubstr("writable by other users"));
    EXPECT_THAT(st.message(), HasSubstr("chmod go-w"));
  }
  std::filesystem::permissions(dir_, std::filesystem::perms(0700));
  Status missing = check_private_dir((dir_ / "absent").string(), "checkpoint directory");
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.message(), HasSubstr("absent"));
}

}  // namespace
}  // namespace gossip::daemon

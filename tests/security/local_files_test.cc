// Another local user against the files gossipd keeps (issue 46): the attacker is a real
// process running as uid 65534 (setpriv), the daemon a real gossipd.
//
// The attack as found: with --checkpoint in a directory others can write, a symbolic link
// planted at DIR/n0.ck.tmp.<gossipd's pid> made the daemon truncate and overwrite the
// link's target with the checkpoint. Now gossipd refuses such a directory at start,
// naming it and the fix; and whatever is planted, it never writes through a link (the
// checkpoint unit tests plant links at every name it uses).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "harness.h"
#include "node_rounds.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr size_t kNumel = 1000;
constexpr int kNobody = 65534;

struct TempDir {
  fs::path path;
  TempDir() {
    char name[] = "/tmp/gossip-local-files-XXXXXX";
    if (::mkdtemp(name)) path = name;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// util-linux's setpriv, where Debian puts it ("" where it is not).
std::string setpriv() {
  for (const char* p : {"/usr/bin/setpriv", "/bin/setpriv"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// Runs argv as uid/gid 65534 without supplementary groups; its exit code.
int as_another_user(std::vector<std::string> argv, const fs::path& log) {
  argv.insert(argv.begin(), {setpriv(), "--reuid=65534", "--regid=65534", "--clear-groups"});
  ChildProcess p(argv, log);
  return p.wait(10s);
}

// Every test runs an attacker as another user: root is needed to become one.
class LocalFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "needs root to run the attacker as another user (setpriv)";
    if (setpriv().empty()) GTEST_SKIP() << "no setpriv (util-linux)";
  }
};

TEST_F(LocalFiles, ALinkPlantedInASharedCheckpointDirectoryOverwritesNothing) {
  TempDir shared, own;
  ASSERT_FALSE(shared.path.empty() || own.path.empty());
  // A directory like /tmp: everyone may create files in it.
  fs::permissions(shared.path, fs::perms(01777));
  const fs::path victim = own.path / "victim";
  { std::ofstream(victim) << "keep"; }
  const fs::path checkpoint = shared.path / "n0.ck";

  Cluster cluster(2, {"--strategy", "gossip", "--checkpoint-every", "1", "--join-wait", "0"});
  cluster.set_node_flags(0, {"--checkpoint", checkpoint.string()});
  std::string refused;
  try {
    cluster.start(0);
  } catch (const std::exception& e) {
    refused = e.what();
  }
  if (refused.empty()) {
    // The daemon took the directory: mount the attack as found and train a few rounds.
    const std::string link =
        checkpoint.string() + ".tmp." + std::to_string(cluster.daemon(0).pid());
    EXPECT_EQ(as_another_user({"/bin/ln", "-s", victim.string(), link}, own.path / "ln.log"), 0);
    cluster.start(1);
    auto a = attach(cluster, 0, kNumel), b = attach(cluster, 1, kNumel);
    ASSERT_TRUE(a && b);
    sync_rounds({a.get(), b.get()}, 4);
    cluster.daemon(0).signal(SIGTERM);
    cluster.daemon(0).wait(10s);
  }
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep")
      << "gossipd wrote through the link the other user planted";
  EXPECT_NE(refused.find("checkpoint directory " + shared.path.string()), std::string::npos)
      << "gossipd must refuse a checkpoint directory other users can write, naming it:\n"
      << (refused.empty() ? cluster.log(0) : refused);
  EXPECT_NE(refused.find("writable by other users"), std::string::npos) << refused;
}

// The same directory made private: the other user cannot plant anything there any more,
// and gossipd starts and checkpoints.
TEST_F(LocalFiles, APrivateCheckpointDirectoryIsTakenAndTheOtherUserKeptOut) {
  TempDir dir, own;
  ASSERT_FALSE(dir.path.empty() || own.path.empty());
  fs::permissions(dir.path, fs::perms(0755));
  const fs::path checkpoint = dir.path / "n0.ck";
  Cluster cluster(2, {"--strategy", "gossip", "--checkpoint-every", "1", "--join-wait", "0"});
  cluster.set_node_flags(0, {"--checkpoint", checkpoint.string()});
  cluster.start_all();
  EXPECT_NE(as_another_user({"/bin/ln", "-s", "/etc/passwd", checkpoint.string() + ".tmp.1"},
                            own.path / "ln.log"),
            0)
      << "uid 65534 could write the checkpoint's directory";
  auto a = attach(cluster, 0, kNumel), b = attach(cluster, 1, kNumel);
  ASSERT_TRUE(a && b);
  sync_rounds({a.get(), b.get()}, 3);
  cluster.daemon(0).signal(SIGTERM);
  EXPECT_EQ(cluster.daemon(0).wait(10s), 0) << cluster.log(0);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(checkpoint))) << cluster.log(0);
}

// The run directory holds the socket the trainers attach to: another user who may write
// it could put their own socket at its name (in a directory without the sticky bit,
// even after gossipd bound its own) and have the trainers attach to them. gossipd
// refuses such a directory, and one that another user made, at start.
TEST_F(LocalFiles, ARunDirectoryAnotherUserMayWriteIsRefused) {
  TempDir shared, own;
  ASSERT_FALSE(shared.path.empty() || own.path.empty());
  fs::permissions(shared.path, fs::perms(0777));
  const fs::path theirs = shared.path / "theirs";
  ASSERT_EQ(as_another_user({"/bin/mkdir", "-m", "755", theirs.string()}, own.path / "mkdir.log"),
            0);
  const struct {
    fs::path dir;
    std::string why;
  } cases[] = {{shared.path, "writable by other users (mode 0777)"},
               {theirs, "belongs to uid 65534"}};
  for (const auto& c : cases) {
    ChildProcess d({binary("gossipd"), "--id", "0", "--listen", "tcp://127.0.0.1:1", "--run-dir",
                    c.dir.string()},
                   own.path / "gossipd.log");
    EXPECT_NE(d.wait(10s), 0) << d.log();
    EXPECT_NE(d.log().find("run directory " + c.dir.string()), std::string::npos) << d.log();
    EXPECT_NE(d.log().find(c.why), std::string::npos) << d.log();
    EXPECT_FALSE(fs::exists(c.dir / "gossipd-0.sock"));
  }
}

// gossipctl cluster --out DIR --curve writes each node's secret key to DIR/node-<i>.toml.
// Another user who made DIR first (in /tmp, say) and planted a link there had the key
// written through it, into a file of the victim's. Now the run directory must be the
// user's own and writable by no one else.
TEST_F(LocalFiles, AClusterRefusesARunDirectoryAnotherUserMadeAndWritesNoKeyThroughIt) {
  TempDir shared, own;
  ASSERT_FALSE(shared.path.empty() || own.path.empty());
  fs::permissions(shared.path, fs::perms(01777));
  const fs::path victim = own.path / "victim";
  { std::ofstream(victim) << "keep"; }
  const fs::path out = shared.path / "run";
  ASSERT_EQ(as_another_user({"/bin/mkdir", "-m", "777", out.string()}, own.path / "mkdir.log"), 0);
  ASSERT_EQ(as_another_user({"/bin/ln", "-s", victim.string(), (out / "node-0.toml").string()},
                            own.path / "ln.log"),
            0);
  ChildProcess cluster({binary("gossipctl"), "cluster", "--nodes", "2", "--steps", "20", "--curve",
                        "--out", out.string(), "--json", "--timeout", "60"},
                       own.path / "cluster.log");
  const int rc = cluster.wait(90s);
  const std::string log = cluster.log();
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep")
      << "a secret key was written through the planted link";
  EXPECT_NE(rc, 0) << log;
  EXPECT_NE(log.find("--out: the run directory " + out.string()), std::string::npos) << log;
  EXPECT_NE(log.find("belongs to uid 65534"), std::string::npos) << log;
}

}  // namespace
}  // namespace gossip::testing

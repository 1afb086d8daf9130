// GOSSIPD_<FLAG> variables (flags > variables > file > defaults) and --peers-from as the
// whole configuration reads them.

#include <gtest/gtest.h>
#include <zmq.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace gossip::daemon {
namespace {

Result<DaemonConfig> configure(std::vector<std::string> args,
                               std::map<std::string, std::string> variables,
                               std::string hostname = "this-host") {
  args.insert(args.begin(), "gossipd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  Environment env{std::move(variables), std::move(hostname)};
  return config_from_args(static_cast<int>(args.size()), argv.data(), env);
}

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    path_ = std::filesystem::temp_directory_path() /
            ("gossipd-env-test-" + std::to_string(::getpid()) + "-" + std::to_string(count_++));
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int count_ = 0;
  std::filesystem::path path_;
};

std::string message(const Result<DaemonConfig>& r) { return r.is_ok() ? "" : r.status().message(); }

TEST(ConfigEnvironment, VariablesAloneConfigureANode) {
  auto c = configure({}, {{"GOSSIPD_ID", "1"},
                          {"GOSSIPD_LISTEN", "tcp://127.0.0.1:7001"},
                          {"GOSSIPD_RUN_DIR", "/tmp/g"},
                          {"GOSSIPD_PEER", "0=tcp://127.0.0.1:7000, 2=tcp://127.0.0.1:7002"},
                          {"GOSSIPD_STRATEGY", "gossip"},
                          {"GOSSIPD_ROUND_TIMEOUT", "12.5"},
                          {"PATH", "/usr/bin"}});
  ASSERT_TRUE(c.is_ok()) << message(c);
  EXPECT_EQ(c->node_id, 1u);
  EXPECT_EQ(c->strategy.name, "gossip");
  EXPECT_EQ(c->strategy.round_timeout_s, 12.5);
  ASSERT_EQ(c->peers.size(), 2u);
  EXPECT_EQ(c->peers[1].endpoint, "tcp://127.0.0.1:7002");
}

TEST(ConfigEnvironment, FlagsBeatVariablesAndVariablesBeatTheFile) {
  TempFile file(R"([node]
id = 0
listen = "tcp://127.0.0.1:7000"
run_dir = "/tmp/g"
[strategy]
period = 3
chunk_bytes = 65536
[[peers]]
id = 1
endpoint = "tcp://127.0.0.1:7001"
)");
  auto c = configure(
      {"--period", "9"},
      {{"GOSSIPD_CONFIG", file.path()}, {"GOSSIPD_PERIOD", "5"}, {"GOSSIPD_CHUNK_BYTES", "8192"}});
  ASSERT_TRUE(c.is_ok()) << message(c);
  EXPECT_EQ(c->strategy.period, 9u) << "the flag";
  EXPECT_EQ(c->strategy.chunk_bytes, 8192u) << "the variable over the file";
  EXPECT_EQ(c->listen, "tcp://127.0.0.1:7000") << "the file";
  EXPECT_EQ(c->strategy.round_timeout_s, 60.0) << "the default";
  auto with_flag_config =
      configure({"--config", file.path()}, {{"GOSSIPD_CONFIG", "/nonexistent"}});
  EXPECT_TRUE(with_flag_config.is_ok())
      << "--config wins over GOSSIPD_CONFIG: " << message(with_flag_config);
}

TEST(ConfigEnvironment, ABadValueNamesTheVariable) {
  auto c = configure({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir", "/tmp/g"},
                     {{"GOSSIPD_PERIOD", "zero"}});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(message(c).find("environment: variable 'GOSSIPD_PERIOD': must be"), std::string::npos)
      << message(c);
  auto cross = configure({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir", "/tmp/g"},
                         {{"GOSSIPD_CHUNK_BYTES", "5001"}});
  ASSERT_FALSE(cross.is_ok());
  EXPECT_NE(message(cross).find("GOSSIPD_CHUNK_BYTES"), std::string::npos) << message(cross);
  auto peer = configure({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir", "/tmp/g"},
                        {{"GOSSIPD_PEER", "1=udp://x:1"}});
  ASSERT_FALSE(peer.is_ok());
  EXPECT_NE(message(peer).find("variable 'GOSSIPD_PEER' (entry '1=udp://x:1')"), std::string::npos)
      << message(peer);
}

TEST(ConfigEnvironment, AMisspeltVariableIsAnErrorWithASuggestion) {
  auto c = configure({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir", "/tmp/g"},
                     {{"GOSSIPD_ROUND_TIMOUT", "5"}});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(message(c).find("unknown variable 'GOSSIPD_ROUND_TIMOUT'; did you mean "
                            "'GOSSIPD_ROUND_TIMEOUT'?"),
            std::string::npos)
      << message(c);
}

TEST(ConfigEnvironment, EverySettingHasItsVariable) {
  for (const Setting& s : settings()) {
    EXPECT_EQ(s.env, env_name(s.flag));
    EXPECT_TRUE(s.env.starts_with("GOSSIPD_")) << s.key;
  }
  EXPECT_EQ(env_name("--round-timeout"), "GOSSIPD_ROUND_TIMEOUT");
}

TEST(ConfigPeersFrom, AHostfileByHostNamePicksThisNode) {
  TempFile hosts("node-a:7101\nnode-b:7102\nthis-host:7103\n");
  auto c = configure({"--peers-from", "hostfile:" + hosts.path(), "--run-dir", "/tmp/g"}, {});
  ASSERT_TRUE(c.is_ok()) << message(c);
  EXPECT_EQ(c->node_id, 2u);
  EXPECT_EQ(c->node_name, "this-host");
  EXPECT_EQ(c->listen, "tcp://0.0.0.0:7103");
  ASSERT_EQ(c->peers.size(), 2u);
  EXPECT_EQ(c->peers[0].endpoint, "tcp://node-a:7101");
  EXPECT_EQ(c->peers[1].name, "node-b");
  EXPECT_EQ(c->nodes(), 3u);
}

TEST(ConfigPeersFrom, NameOrIdPicksTheNodeAndMustAgree) {
  TempFile hosts("node-a:7101\nnode-b:7102\n");
  const std::string spec = "hostfile:" + hosts.path();
  auto by_name = configure({"--peers-from", spec, "--name", "node-b", "--run-dir", "/tmp/g",
                            "--listen", "tcp://127.0.0.1:7102"},
                           {});
  ASSERT_TRUE(by_name.is_ok()) << message(by_name);
  EXPECT_EQ(by_name->node_id, 1u);
  EXPECT_EQ(by_name->listen, "tcp://127.0.0.1:7102") << "an explicit listen stays";
  auto by_id = configure({"--peers-from", spec, "--id", "0", "--run-dir", "/tmp/g"}, {});
  ASSERT_TRUE(by_id.is_ok()) << message(by_id);
  EXPECT_EQ(by_id->node_name, "node-a");
  auto disagree =
      configure({"--peers-from", spec, "--id", "0", "--name", "node-b", "--run-dir", "/tmp/g"}, {});
  ASSERT_FALSE(disagree.is_ok());
  EXPECT_NE(message(disagree).find("'node-b' is node 1"), std::string::npos) << message(disagree);
  auto past = configure({"--peers-from", spec, "--id", "5", "--run-dir", "/tmp/g"}, {});
  ASSERT_FALSE(past.is_ok());
  EXPECT_NE(message(past).find("lists 2 nodes"), std::string::npos) << message(past);
  auto unknown_host = configure({"--peers-from", spec, "--run-dir", "/tmp/g"}, {});
  ASSERT_FALSE(unknown_host.is_ok());
  EXPECT_NE(message(unknown_host).find("this host's name 'this-host' is none"), std::string::npos)
      << message(unknown_host);
  EXPECT_NE(message(unknown_host).find("pass --name"), std::string::npos);
}

TEST(ConfigPeersFrom, SlurmFromVariablesOnly) {
  auto c = configure({}, {{"GOSSIPD_PEERS_FROM", "slurm:7500"},
                          {"GOSSIPD_RUN_DIR", "/tmp/g"},
                          {"SLURM_STEP_NODELIST", "cn[1-2]"},
                          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                          {"SLURM_PROCID", "2"},
                          {"SLURM_LOCALID", "0"}});
  ASSERT_TRUE(c.is_ok()) << message(c);
  EXPECT_EQ(c->node_id, 2u);
  EXPECT_EQ(c->node_name, "cn2:7500");
  EXPECT_EQ(c->listen, "tcp://0.0.0.0:7500");
  EXPECT_EQ(c->nodes(), 4u);
  EXPECT_EQ(c->run_id, "") << "no job id, no run id";
}

// The step names the run (--run-id), so that a requeued job's stale daemons on the same
// hosts and ports are of another one; a run id given wins, and a bad one is refused.
TEST(ConfigPeersFrom, ASlurmStepNamesTheRun) {
  const std::map<std::string, std::string> step = {{"SLURM_STEP_NODELIST", "cn[1-2]"},
                                                   {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                                                   {"SLURM_PROCID", "1"},
                                                   {"SLURM_JOB_ID", "81234"},
                                                   {"SLURM_STEP_ID", "0"}};
  auto c = configure({"--peers-from", "slurm", "--run-dir", "/tmp/g"}, step);
  ASSERT_TRUE(c.is_ok()) << message(c);
  EXPECT_EQ(c->run_id, "slurm-81234.0");
  auto given =
      configure({"--peers-from", "slurm", "--run-dir", "/tmp/g", "--run-id", "mine"}, step);
  ASSERT_TRUE(given.is_ok()) << message(given);
  EXPECT_EQ(given->run_id, "mine");
  auto bad = configure({"--peers-from", "slurm", "--run-dir", "/tmp/g", "--run-id", "a b"}, step);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(message(bad).find("--run-id"), std::string::npos) << message(bad);
}

TEST(ConfigPeersFrom, APeerListBesideItIsRefused) {
  auto c = configure({"--peers-from", "dns:g-{0..1}.s", "--id", "0", "--run-dir", "/tmp/g",
                      "--peer", "1=tcp://127.0.0.1:7001"},
                     {});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(message(c).find("a peer list is given too"), std::string::npos) << message(c);
  auto bad = configure({"--id", "0", "--run-dir", "/tmp/g"}, {{"GOSSIPD_PEERS_FROM", "dns:nope"}});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(message(bad).find("GOSSIPD_PEERS_FROM"), std::string::npos) << message(bad);
}

TEST(ConfigPeersFrom, BansApplyToListedIds) {
  // Without CURVE a ban is refused, and the refusal names the listed node it reached.
  auto c = configure({"--peers-from", "dns:g-{0..2}.s", "--name", "g-0", "--run-dir", "/tmp/g"},
                     {{"GOSSIPD_BAN_PEER", "2"}});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(message(c).find("variable 'GOSSIPD_BAN_PEER': banning peer 2 needs CURVE"),
            std::string::npos)
      << message(c);
  auto unlisted = configure(
      {"--peers-from", "dns:g-{0..2}.s", "--name", "g-0", "--run-dir", "/tmp/g", "--ban-peer", "7"},
      {});
  ASSERT_FALSE(unlisted.is_ok());
  EXPECT_NE(message(unlisted).find("flag '--ban-peer 7': no peer 7"), std::string::npos)
      << message(unlisted);
}

TEST(ConfigPeersFrom, KeysAndBansTakeListedNames) {
  char pub[3][41], sec[3][41];
  for (int i = 0; i < 3; ++i)
    if (zmq_curve_keypair(pub[i], sec[i]) != 0) GTEST_SKIP() << "this libzmq has no CURVE";
  auto c = configure(
      {"--peers-from", "dns:g-{0..2}.s", "--name", "g-0", "--run-dir", "/tmp/g", "--secret-key",
       sec[0], "--ban-peer", "g-2"},
      // One list for every node: this node's own entry is passed over.
      {{"GOSSIPD_PEER_KEY", std::string("g-0=") + pub[0] + ",g-1=" + pub[1] + ",g-2.s=" + pub[2]}});
  ASSERT_TRUE(c.is_ok()) << message(c);
  ASSERT_EQ(c->peers.size(), 2u);
  EXPECT_EQ(c->peers[0].public_key, pub[1]) << "g-1: the first label of g-1.s";
  EXPECT_EQ(c->peers[1].public_key, pub[2]);
  EXPECT_TRUE(c->peers[1].banned);
  EXPECT_FALSE(c->peers[0].banned);
  auto unknown =
      configure({"--peers-from", "dns:g-{0..2}.s", "--name", "g-0", "--run-dir", "/tmp/g",
                 "--secret-key", sec[0], "--peer-key", std::string("g-7=") + pub[1]},
                {});
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(message(unknown).find("no peer named 'g-7'"), std::string::npos) << message(unknown);
}

}  // namespace
}  // namespace gossip::daemon

// gossipctl cluster, black-box: the real gossipctl binary runs stand-in scripts for
// gossipd and gossip-train (tests/cli/test_support.h) and must start them with the
// agreed command lines, report success and failure, and never leave a process behind.
#include "cli/cluster.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/json.h"
#include "peers/loopback_ports.h"
#include "tests/bin_dir.h"
#include "tests/cli/test_support.h"

namespace gossip::cli {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

// --- option validation (no processes) -----------------------------------------------

TEST(ClusterOptions, DefaultsAreValid) {
  ClusterOptions o;
  EXPECT_TRUE(validate_cluster_options(o).is_ok());
  EXPECT_EQ(o.nodes, 4);
  EXPECT_EQ(o.steps, 600);
  EXPECT_EQ(o.effective_eval_every(), 60);
  o.steps = 5;
  EXPECT_EQ(o.effective_eval_every(), 1);
  o.eval_every = 0;  // at the end only, as gossip-train's --eval-every 0
  EXPECT_EQ(o.effective_eval_every(), 0);
  EXPECT_TRUE(validate_cluster_options(o).is_ok());
}

TEST(ClusterOptions, ErrorsNameTheFlag) {
  struct Case {
    const char* flag;
    void (*set)(ClusterOptions&);
  };
  const Case cases[] = {
      {"--nodes", [](ClusterOptions& o) { o.nodes = 0; }},
      {"--nodes", [](ClusterOptions& o) { o.nodes = 65; }},
      {"--strategy", [](ClusterOptions& o) { o.daemon_flags["--strategy"] = "gossip-ish"; }},
      {"--period", [](ClusterOptions& o) { o.daemon_flags["--period"] = "0"; }},
      {"--period",
       [](ClusterOptions& o) {
         o.daemon_flags["--strategy"] = "allreduce";
         o.daemon_flags["--period"] = "4";  // gradients are averaged at every step
       }},
      {"--topology",
       [](ClusterOptions& o) {
         o.daemon_flags["--strategy"] = "choco";
         o.daemon_flags["--topology"] = "one-peer-exponential";  // CHOCO needs a static graph
       }},
      {"--codec", [](ClusterOptions& o) { o.daemon_flags["--codec"] = "zip"; }},
      {"--steps", [](ClusterOptions& o) { o.steps = 0; }},
      {"--partition", [](ClusterOptions& o) { o.partition = "dirichlet:-1"; }},
      {"--outer-optimizer",
       [](ClusterOptions& o) { o.daemon_flags["--outer-optimizer"] = "adam"; }},
      {"--outer-momentum", [](ClusterOptions& o) { o.daemon_flags["--outer-momentum"] = "1"; }},
      {"--base-port", [](ClusterOptions& o) { o.base_port = 65534; }},
      {"--timeout", [](ClusterOptions& o) { o.timeout_s = 0; }},
      {"--log-level", [](ClusterOptions& o) { o.daemon_flags["--log-level"] = "loud"; }},
  };
  for (const Case& c : cases) {
    ClusterOptions o;
    c.set(o);
    const Status st = validate_cluster_options(o);
    ASSERT_FALSE(st.is_ok()) << c.flag;
    EXPECT_EQ(st.message().rfind(c.flag, 0), 0u) << st.message();
  }
}

// One default per setting: what gossipctl cluster does not set, gossipd decides.
TEST(ClusterOptions, GossipdSettingsAreGossipdsWithItsDefaults) {
  ClusterOptions o;
  ASSERT_TRUE(resolve_cluster_options(o).is_ok());
  const daemon::DaemonConfig defaults;
  EXPECT_EQ(o.daemon.strategy.name, defaults.strategy.name);
  EXPECT_EQ(o.daemon.strategy.period, defaults.strategy.period);
  EXPECT_EQ(o.daemon.strategy.codec, defaults.strategy.codec);
  EXPECT_EQ(o.daemon.seed, defaults.seed);
  EXPECT_EQ(o.daemon.log_level, defaults.log_level);

  o.daemon_flags = {{"--strategy", "gossip"},
                    {"--codec", "int8"},
                    {"--period", "2"},
                    {"--trim", "1"},
                    {"--seed", "9"}};
  const Status st = resolve_cluster_options(o);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(o.daemon.strategy.name, "gossip");
  EXPECT_EQ(o.daemon.strategy.period, 2u);
  EXPECT_EQ(o.daemon.strategy.trim, 1u);
  EXPECT_EQ(o.daemon.seed, 9u);
}

TEST(ClusterOptions, Partition) {
  EXPECT_TRUE(validate_partition("iid").is_ok());
  EXPECT_TRUE(validate_partition("dirichlet:0.5").is_ok());
  EXPECT_TRUE(validate_partition("dirichlet:10").is_ok());
  for (const char* bad : {"", "IID", "dirichlet", "dirichlet:", "dirichlet:0", "dirichlet:x",
                          "dirichlet:1x", "dirichlet:inf", "label-skew"}) {
    EXPECT_FALSE(validate_partition(bad).is_ok()) << bad;
  }
}

TEST(ClusterOptions, PicksDistinctFreePorts) {
  auto ports = peers::pick_loopback_ports(16);
  ASSERT_TRUE(ports.is_ok()) << ports.status().message();
  ASSERT_EQ(ports->size(), 16u);
  std::vector<int> sorted = *ports;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  // Below the kernel's ephemeral ports, which bind(0) (the daemons' ring listeners) and
  // outgoing connections take from: none of those can take a picked port first.
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  for (int p : sorted) {
    EXPECT_GE(p, 10000);
    EXPECT_LT(p, low);
  }
}

// --- gossipctl against stand-ins ------------------------------------------------------

const std::string kGossipctl = ::gossip::test_bin_dir() + "/gossipctl";

class GossipctlCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty()) << "mkdtemp failed";
    ASSERT_TRUE(std::filesystem::exists(kGossipctl)) << kGossipctl << " is not built";
    testing::write_executable(tmp_.file("fake-gossipd"), testing::kFakeDaemon);
    testing::write_executable(tmp_.file("fake-trainer"), testing::kFakeTrainer);
    out_ = tmp_.file("run");
  }

  void TearDown() override {
    // Nothing that gossipctl started may still run, whatever happened in the test.
    for (pid_t pid : testing::recorded_pids(out_)) {
      EXPECT_FALSE(testing::process_alive(pid)) << "left behind: pid " << pid;
    }
    const auto left = testing::processes_mentioning(tmp_.path());
    EXPECT_TRUE(left.empty()) << "left behind: " << (left.empty() ? "" : left.front());
  }

  // Runs `env ENV... gossipctl cluster --gossipd FAKE --trainer FAKE ARGS...`.
  testing::RunResult cluster(std::vector<std::string> args, std::vector<std::string> env = {},
                             std::chrono::seconds timeout = 60s) {
    std::vector<std::string> argv = {"/usr/bin/env", "TMPDIR=" + tmp_.path()};
    argv.insert(argv.end(), env.begin(), env.end());
    for (std::string a :
         {kGossipctl, std::string("cluster"), std::string("--gossipd"), tmp_.file("fake-gossipd"),
          std::string("--trainer"), tmp_.file("fake-trainer"), std::string("--stop-grace"),
          std::string("1")}) {
      argv.push_back(std::move(a));
    }
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = testing::run_program(argv, tmp_.path(), timeout);
    EXPECT_FALSE(r.timed_out) << "gossipctl hung; stderr:\n" << r.err;
    return r;
  }

  static FlatJsonObject parse_report(const testing::RunResult& r) {
    auto obj = parse_flat_json_object(r.out);
    EXPECT_TRUE(obj.is_ok()) << obj.status().message() << "\nstdout: " << r.out
                             << "\nstderr: " << r.err;
    return obj.is_ok() ? *obj : FlatJsonObject{};
  }

  static std::string text_of(const FlatJsonObject& obj, const std::string& key) {
    auto it = obj.find(key);
    return it == obj.end() ? "<missing>" : it->second.text;
  }

  // gossipctl's own temporary run directories (TMPDIR points into tmp_).
  std::vector<std::string> leftover_temp_dirs() const {
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator(tmp_.path())) {
      if (e.path().filename().string().rfind("gossipctl-", 0) == 0)
        found.push_back(e.path().string());
    }
    return found;
  }

  TempDir tmp_;
  std::string out_;
};

TEST_F(GossipctlCluster, SuccessWithJson) {
  auto r = cluster({"--nodes", "3", "--steps", "40", "--period", "5", "--seed", "7", "--partition",
                    "dirichlet:0.5", "--out", out_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const FlatJsonObject obj = parse_report(r);
  EXPECT_TRUE(obj.at("ok").boolean);
  EXPECT_EQ(obj.at("nodes").number, 3);
  EXPECT_EQ(text_of(obj, "strategy"), "local-sgd");
  EXPECT_EQ(obj.at("period").number, 5);
  EXPECT_EQ(obj.at("steps").number, 40);
  EXPECT_EQ(obj.at("seed").number, 7);
  EXPECT_EQ(text_of(obj, "partition"), "dirichlet:0.5");
  EXPECT_EQ(*json_get_uint(obj, "bytes_sent_total"), 2000u + 2001u + 2002u);
  EXPECT_EQ(*json_get_uint(obj, "payload_bytes_sent_total"), 1000u + 1001u + 1002u);
  EXPECT_DOUBLE_EQ(obj.at("accuracy_average_model").number, 0.84);
  EXPECT_EQ(obj.at("accuracy_nodes").kind, JsonScalar::Kind::kNested);
  EXPECT_NE(r.out.find("\"accuracy_nodes\": [0.8, 0.81, 0.82]"), std::string::npos) << r.out;
  EXPECT_EQ(text_of(obj, "out"), out_);
  EXPECT_GT(obj.at("wall_seconds").number, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "exactly one JSON line: " << r.out;

  // Everything is kept in --out.
  for (int i = 0; i < 3; ++i) {
    for (const std::string& f :
         {"node-" + std::to_string(i) + ".csv", "node-" + std::to_string(i) + ".json",
          "gossipd-" + std::to_string(i) + ".log", "trainer-" + std::to_string(i) + ".log"}) {
      EXPECT_TRUE(std::filesystem::exists(out_ + "/" + f)) << f;
    }
  }
  // The command lines of the contract.
  const std::string d1 = testing::read_file(out_ + "/gossipd-1.log");
  EXPECT_NE(d1.find("--id 1 --listen tcp://127.0.0.1:"), std::string::npos) << d1;
  EXPECT_NE(d1.find("--run-dir " + out_ + " --run-id cluster-"), std::string::npos) << d1;
  EXPECT_NE(d1.find(" --peer 0=tcp://127.0.0.1:"), std::string::npos) << d1;
  // One run id, the same on every node: the run's own (peers/zmq_transport.h).
  const size_t at = d1.find("--run-id ");
  ASSERT_NE(at, std::string::npos) << d1;
  const std::string run_id = d1.substr(at, d1.find(' ', at + 9) - at);
  EXPECT_NE(testing::read_file(out_ + "/gossipd-0.log").find(run_id), std::string::npos) << run_id;
  EXPECT_NE(d1.find(" --peer 2=tcp://127.0.0.1:"), std::string::npos) << d1;
  EXPECT_EQ(d1.find("--peer 1="), std::string::npos) << d1;
  // gossipd's settings as given, and no others: the rest are gossipd's defaults.
  EXPECT_NE(d1.find("--period 5 --seed 7"), std::string::npos) << d1;
  for (const char* unset : {"--strategy", "--codec", "--post-local", "--log-level"})
    EXPECT_EQ(d1.find(unset), std::string::npos) << unset << ": " << d1;
  EXPECT_NE(d1.find("gossipd 1 stopping"), std::string::npos) << "stopped with SIGTERM: " << d1;
  const std::string t2 = testing::read_file(out_ + "/trainer-2.log");
  EXPECT_NE(t2.find("--endpoint ipc://" + out_ +
                    "/gossipd-2.sock --node 2 --nodes 3 --steps 40 --seed 7 "
                    "--partition dirichlet:0.5 --batch 64 --lr 0.05 --eval-every 4 --csv " +
                    out_ + "/node-2.csv --result " + out_ + "/node-2.json --save-model " + out_ +
                    "/node-2.model --timeout-s "),
            std::string::npos)
      << t2;
}

TEST_F(GossipctlCluster, SuccessTableAndTemporaryRunDirectoryIsRemoved) {
  auto r = cluster({"--nodes", "2", "--steps", "20", "--base-port", "40100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("accuracy_local"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("accuracy of the averaged model  0.8400"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(4001 B)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("step 20/20"), std::string::npos) << "final progress line: " << r.err;
  EXPECT_TRUE(leftover_temp_dirs().empty());
}

TEST_F(GossipctlCluster, SingleNodeHasNoPeers) {
  auto r = cluster({"--nodes", "1", "--steps", "10", "--out", out_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::read_file(out_ + "/gossipd-0.log").find("--peer"), std::string::npos);
}

TEST_F(GossipctlCluster, FailingTrainerStopsEverything) {
  auto r = cluster({"--nodes", "3", "--steps", "400", "--out", out_, "--json"},
                   {"FAKE_FAIL_NODE=1", "FAKE_STEP_SLEEP=0.02"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const FlatJsonObject obj = parse_report(r);
  EXPECT_FALSE(obj.at("ok").boolean);
  EXPECT_NE(text_of(obj, "error").find("trainer 1 exited with status 3"), std::string::npos)
      << r.out;
  EXPECT_EQ(text_of(obj, "failed_process"), "trainer 1");
  EXPECT_NE(r.out.find("simulated failure"), std::string::npos)
      << "log tail in the JSON: " << r.out;
  EXPECT_NE(r.err.find("node 1: simulated failure"), std::string::npos)
      << "log tail on stderr: " << r.err;
  EXPECT_EQ(obj.at("bytes_sent_total").kind, JsonScalar::Kind::kNull);
  EXPECT_LT(r.seconds, 20);
}

TEST_F(GossipctlCluster, FailingTrainerWithoutJsonAndTemporaryDirectory) {
  auto r = cluster({"--nodes", "2", "--steps", "200"}, {"FAKE_FAIL_NODE=0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("trainer 0 exited with status 3"), std::string::npos) << r.err;
  EXPECT_TRUE(leftover_temp_dirs().empty());
}

TEST_F(GossipctlCluster, CrashingDaemonIsNamed) {
  auto r = cluster({"--nodes", "3", "--steps", "1000", "--out", out_, "--json"},
                   {"FAKE_DAEMON_CRASH_NODE=2", "FAKE_STEP_SLEEP=0.2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const FlatJsonObject obj = parse_report(r);
  EXPECT_FALSE(obj.at("ok").boolean);
  EXPECT_NE(text_of(obj, "error").find("gossipd 2 exited with status 7"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("simulated crash"), std::string::npos) << r.out;
}

// A port picked free and taken before its daemon bound it: the cluster starts again on
// new ports (issue 43), and says so; with --base-port the ports are the user's, and it
// fails naming the daemon.
TEST_F(GossipctlCluster, APortTakenBeforeTheDaemonBindsItStartsTheClusterAgain) {
  auto r = cluster({"--nodes", "3", "--steps", "20", "--out", out_, "--json"},
                   {"FAKE_PORT_TAKEN_NODE=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(parse_report(r).at("ok").boolean);
  EXPECT_NE(r.err.find("starting again on new ports (2/3)"), std::string::npos) << r.err;
  const std::string listened = testing::read_file(out_ + "/listened-1");
  ASSERT_EQ(std::count(listened.begin(), listened.end(), '\n'), 2) << listened;
  EXPECT_NE(listened.substr(0, listened.find('\n')), listened.substr(listened.find('\n') + 1))
      << "the second try listens on another port: " << listened;

  std::filesystem::remove_all(out_);
  auto fixed =
      cluster({"--nodes", "2", "--steps", "20", "--base-port", "40150", "--out", out_, "--json"},
              {"FAKE_PORT_TAKEN_NODE=1"});
  EXPECT_EQ(fixed.exit_code, 1) << fixed.err;
  EXPECT_NE(text_of(parse_report(fixed), "error").find("gossipd 1"), std::string::npos)
      << fixed.out;
  EXPECT_EQ(fixed.err.find("starting again"), std::string::npos) << fixed.err;
}

TEST_F(GossipctlCluster, DaemonIgnoringSigtermIsKilledWithinTheBound) {
  auto r = cluster({"--nodes", "2", "--steps", "20", "--out", out_, "--json"},
                   {"FAKE_DAEMON_IGNORE_TERM=1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const FlatJsonObject obj = parse_report(r);
  EXPECT_FALSE(obj.at("ok").boolean);
  EXPECT_NE(text_of(obj, "error").find("SIGKILL"), std::string::npos) << r.out;
  EXPECT_EQ(text_of(obj, "failed_process").rfind("gossipd ", 0), 0u) << r.out;
  // Training itself finished: the results are still reported.
  EXPECT_EQ(*json_get_uint(obj, "bytes_sent_total"), 4001u);
  EXPECT_LT(r.seconds, 10);  // stop grace 1 s, then SIGKILL
}

TEST_F(GossipctlCluster, DaemonWithoutSocketTimesOut) {
  auto r = cluster({"--nodes", "2", "--steps", "20", "--timeout", "1.5", "--out", out_, "--json"},
                   {"FAKE_DAEMON_NO_SOCKET=1"});
  EXPECT_EQ(r.exit_code, 1);
  const FlatJsonObject obj = parse_report(r);
  EXPECT_NE(text_of(obj, "error").find("gossipd 0 did not create its socket"), std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(out_ + "/trainer-0.log")) << "no trainer may start";
  EXPECT_LT(r.seconds, 10);
}

TEST_F(GossipctlCluster, HangingTrainerHitsTheDeadline) {
  auto r = cluster({"--nodes", "2", "--steps", "20", "--timeout", "2", "--out", out_, "--json"},
                   {"FAKE_HANG_NODE=1"});
  EXPECT_EQ(r.exit_code, 1);
  const FlatJsonObject obj = parse_report(r);
  EXPECT_NE(text_of(obj, "error").find("timed out after 2 s"), std::string::npos) << r.out;
  EXPECT_EQ(text_of(obj, "failed_process"), "trainer 1");
  EXPECT_LT(r.seconds, 12);  // 2 s deadline + 1 s grace + SIGKILL
}

TEST_F(GossipctlCluster, MissingResultIsAFailure) {
  auto r = cluster({"--nodes", "2", "--steps", "10", "--out", out_, "--json"},
                   {"FAKE_NO_RESULT_NODE=1"});
  EXPECT_EQ(r.exit_code, 1);
  const FlatJsonObject obj = parse_report(r);
  EXPECT_NE(text_of(obj, "error").find("trainer 1 exited 0 but its result is unusable"),
            std::string::npos)
      << r.out;
}

TEST_F(GossipctlCluster, SigintStopsEverything) {
  std::vector<std::string> argv = {"/usr/bin/env", "FAKE_STEP_SLEEP=0.1",
                                   kGossipctl,     "cluster",
                                   "--gossipd",    tmp_.file("fake-gossipd"),
                                   "--trainer",    tmp_.file("fake-trainer"),
                                   "--nodes",      "2",
                                   "--steps",      "10000",
                                   "--out",        out_,
                                   "--json"};
  auto p = Process::spawn(SpawnOptions{argv, tmp_.file("run.stdout"), tmp_.file("run.stderr")});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  // Wait until both trainers are writing rows, then interrupt.
  const auto ready_by = Clock::now() + 20s;
  while (!(std::filesystem::exists(out_ + "/node-0.csv") &&
           std::filesystem::exists(out_ + "/node-1.csv"))) {
    ASSERT_LT(Clock::now(), ready_by) << testing::read_file(tmp_.file("run.stderr"));
    ASSERT_FALSE(p->poll()) << testing::read_file(tmp_.file("run.stderr"));
    std::this_thread::sleep_for(20ms);
  }
  ::kill(p->pid(), SIGINT);
  auto e = p->wait_until(Clock::now() + 20s);
  ASSERT_TRUE(e) << "gossipctl did not stop on SIGINT";
  EXPECT_EQ(e->code, 1);
  const std::string out = testing::read_file(tmp_.file("run.stdout"));
  auto obj = parse_flat_json_object(out);
  ASSERT_TRUE(obj.is_ok()) << out;
  EXPECT_NE(obj->at("error").text.find("interrupted by SIGINT"), std::string::npos) << out;
}

TEST_F(GossipctlCluster, MissingProgramIsReported) {
  auto r = testing::run_program(
      {kGossipctl, "cluster", "--gossipd", tmp_.file("no-such-gossipd"), "--json"}, tmp_.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("\"ok\": false"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no-such-gossipd"), std::string::npos) << r.err;
}

// --- the command line -----------------------------------------------------------------

TEST_F(GossipctlCluster, BadValuesAreErrorsNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nodes", "0"}, "--nodes"},
      {{"--nodes", "65"}, "--nodes"},
      {{"--strategy", "all-to-all"}, "--strategy"},
      {{"--partition", "dirichlet:zero"}, "--partition"},
      {{"--partition", "shards"}, "--partition"},
      {{"--outer-optimizer", "adam"}, "--outer-optimizer"},
      {{"--steps", "-3"}, "--steps"},
      {{"--no-such-flag"}, "--no-such-flag"},
  };
  for (const auto& [args, flag] : cases) {
    std::vector<std::string> argv = {kGossipctl, "cluster"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = testing::run_program(argv, tmp_.path(), 20s);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_TRUE(testing::recorded_pids(out_).empty());
  }
}

TEST_F(GossipctlCluster, HelpAndUnknownCommands) {
  auto help = testing::run_program({kGossipctl, "--help"}, tmp_.path(), 20s);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("cluster"), std::string::npos) << help.out;
  auto cluster_help = testing::run_program({kGossipctl, "cluster", "--help"}, tmp_.path(), 20s);
  EXPECT_EQ(cluster_help.exit_code, 0);
  for (const char* flag : {"--nodes",      "--strategy",
                           "--period",     "--steps",
                           "--seed",       "--partition",
                           "--out",        "--json",
                           "--post-local", "--outer-optimizer",
                           "--outer-lr",   "--outer-momentum",
                           "--batch",      "--lr",
                           "--eval-every", "--base-port",
                           "--timeout",    "--gossipd",
                           "--trainer",    "--log-level"}) {
    EXPECT_NE(cluster_help.out.find(flag), std::string::npos) << flag;
  }
  // Every gossipd setting that is the same on all nodes is a flag of the cluster,
  // with gossipd's help; those that differ per node are the cluster's to set.
  for (const daemon::Setting& setting : daemon::settings()) {
    if (setting.per_node) {
      EXPECT_EQ(cluster_help.out.find(setting.flag + " "), std::string::npos) << setting.flag;
    } else {
      EXPECT_NE(cluster_help.out.find(setting.flag), std::string::npos) << setting.flag;
      EXPECT_NE(cluster_help.out.find("gossipd: " + setting.help.substr(0, 20)), std::string::npos)
          << setting.flag;
    }
  }
  auto unknown = testing::run_program({kGossipctl, "frobnicate"}, tmp_.path(), 20s);
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("frobnicate"), std::string::npos) << unknown.err;
  auto none = testing::run_program({kGossipctl}, tmp_.path(), 20s);
  EXPECT_NE(none.exit_code, 0);
}

}  // namespace
}  // namespace gossip::cli

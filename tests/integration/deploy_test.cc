// Clusters configured the way batch and container systems start them (issue 21): only
// GOSSIPD_* variables; a hostfile of names; a StatefulSet's DNS names, with a node that
// comes back at another address. Real gossipd and gossip-train processes on loopback
// train the real Fashion-MNIST. Names resolve through nss_wrapper (Debian's
// libnss-wrapper, the resolver Samba's tests use): a hosts file of the test's own,
// preloaded into each process, maps them to 127.0.0.x; the machine's is not touched.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "tests/experiments/temp_dir.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Found by CMake in this machine's library folders (tests/integration/CMakeLists.txt).
constexpr const char* kNssWrapper = GOSSIP_NSS_WRAPPER;

// The value of "key": in a one-line JSON object (the trainer's --result).
double json_number(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::stod(json.substr(at + key.size() + 3));
}

// Writes the hosts file so that a reader sees the old or the new one, never half.
void write_hosts(const fs::path& path, const std::map<std::string, std::string>& names) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    for (const auto& [name, address] : names) out << address << " " << name << "\n";
  }
  fs::rename(tmp, path);
}

// A program run through env(1): the variables first, then the command.
std::vector<std::string> with_env(const std::map<std::string, std::string>& vars,
                                  std::vector<std::string> argv) {
  std::vector<std::string> out{"/usr/bin/env"};
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

class Deploy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(kNssWrapper).empty() || !fs::exists(kNssWrapper))
      GTEST_SKIP() << "libnss-wrapper is not installed (scripts/install-deps.sh installs it): "
                      "the test's host names cannot be resolved without touching /etc/hosts";
    hosts_ = tmp_.path() / "hosts";
  }

  // nss_wrapper, preloaded: the names below resolve through hosts_ only.
  std::map<std::string, std::string> resolver() const {
    return {{"LD_PRELOAD", kNssWrapper}, {"NSS_WRAPPER_HOSTS", hosts_.string()}};
  }

  std::vector<std::string> trainer(int node, int steps, const fs::path& result) const {
    return {binary("gossip-train"),
            "--endpoint",
            "ipc://" + (tmp_.path() / ("gossipd-" + std::to_string(node) + ".sock")).string(),
            "--node",
            std::to_string(node),
            "--nodes",
            "3",
            "--steps",
            std::to_string(steps),
            "--eval-every",
            "0",
            "--seed",
            "1",
            "--startup-timeout-s",
            "30",
            "--result",
            result.string()};
  }

  // One trainer a node, its result in r<node>.
  void start_trainers(std::vector<ChildProcess>& trainers, int steps) const {
    for (int i = 0; i < 3; ++i)
      trainers.emplace_back(trainer(i, steps, tmp_.path() / ("r" + std::to_string(i))),
                            tmp_.path() / ("t" + std::to_string(i) + ".log"));
  }

  const trainer::testing::TempDir tmp_;
  fs::path hosts_;
};

void expect_trained(ChildProcess& t, const fs::path& result, const std::string& logs) {
  ASSERT_EQ(t.wait(180s), 0) << t.log() << logs;
  const std::string json = read_text(result);
  EXPECT_GT(json_number(json, "accuracy_local"), 0.70) << json;
  EXPECT_GT(json_number(json, "payload_recv"), 0) << "no model came from a peer: " << json;
}

TEST_F(Deploy, VariablesAloneConfigureEveryDaemon) {
  const auto ports = free_ports(3);
  std::vector<ChildProcess> daemons, trainers;
  for (int i = 0; i < 3; ++i) {
    std::string peers;
    for (int j = 0; j < 3; ++j)
      if (j != i) peers += std::to_string(j) + "=tcp://127.0.0.1:" + std::to_string(ports[j]) + ",";
    // No flag at all: what a container's env: block or a batch script's exports give.
    daemons.emplace_back(
        with_env({{"GOSSIPD_ID", std::to_string(i)},
                  {"GOSSIPD_LISTEN", "tcp://127.0.0.1:" + std::to_string(ports[i])},
                  {"GOSSIPD_RUN_DIR", tmp_.path().string()},
                  {"GOSSIPD_PEER", peers},
                  {"GOSSIPD_STRATEGY", "local-sgd"},
                  {"GOSSIPD_PERIOD", "8"},
                  {"GOSSIPD_TRANSPORT", "tcp"}},
                 {binary("gossipd")}),
        tmp_.path() / ("gossipd-" + std::to_string(i) + ".log"));
  }
  start_trainers(trainers, 400);
  for (int i = 0; i < 3; ++i) {
    expect_trained(trainers[i], tmp_.path() / ("r" + std::to_string(i)), daemons[i].log());
    EXPECT_NE(daemons[i].log().find("strategy local-sgd T=8"), std::string::npos)
        << daemons[i].log();
  }
}

TEST_F(Deploy, AHostfileOfNamesStartsACluster) {
  const auto ports = free_ports(3);
  write_hosts(hosts_, {{"node-a", "127.0.0.1"}, {"node-b", "127.0.0.2"}, {"node-c", "127.0.0.3"}});
  const fs::path hostfile = tmp_.path() / "hostfile";
  {
    std::ofstream out(hostfile);
    out << "# as for mpirun\nnode-a:" << ports[0] << " slots=1\nnode-b:" << ports[1]
        << "\nnode-c:" << ports[2] << "\n";
  }
  const char* names[] = {"node-a", "node-b", "node-c"};
  std::vector<ChildProcess> daemons, trainers;
  for (int i = 0; i < 3; ++i)
    daemons.emplace_back(
        with_env(resolver(), {binary("gossipd"), "--peers-from", "hostfile:" + hostfile.string(),
                              "--name", names[i], "--run-dir", tmp_.path().string(), "--strategy",
                              "gossip", "--topology", "complete", "--period", "4"}),
        tmp_.path() / ("gossipd-" + std::to_string(i) + ".log"));
  start_trainers(trainers, 400);
  for (int i = 0; i < 3; ++i) {
    expect_trained(trainers[i], tmp_.path() / ("r" + std::to_string(i)), daemons[i].log());
    EXPECT_NE(
        daemons[i].log().find(std::string("node ") + std::to_string(i) + " (" + names[i] + ")"),
        std::string::npos)
        << "the log names the node: " << daemons[i].log();
  }
}

TEST_F(Deploy, ADnsNamedPeerThatComesBackAtANewAddressIsFoundThere) {
  const int port = free_ports(1)[0];
  std::map<std::string, std::string> names{{"gossip-0.gossip", "127.0.0.1"},
                                           {"gossip-1.gossip", "127.0.0.2"},
                                           {"gossip-2.gossip", "127.0.0.3"}};
  write_hosts(hosts_, names);
  // Every pod listens on the same port at its own address, as in a StatefulSet.
  auto start_daemon = [&](int i, const std::string& address) {
    return ChildProcess(with_env(resolver(), {binary("gossipd"), "--peers-from",
                                              "dns:gossip-{0..2}.gossip:" + std::to_string(port),
                                              "--name", "gossip-" + std::to_string(i), "--listen",
                                              "tcp://" + address + ":" + std::to_string(port),
                                              "--run-dir", tmp_.path().string(), "--strategy",
                                              "gossip", "--topology", "complete", "--heartbeat",
                                              "0.2", "--dead-after", "1", "--join-wait", "1"}),
                        tmp_.path() / ("gossipd-" + std::to_string(i) + "-" + address + ".log"));
  };
  std::vector<ChildProcess> daemons, trainers;
  for (int i = 0; i < 3; ++i)
    daemons.push_back(start_daemon(i, names["gossip-" + std::to_string(i) + ".gossip"]));
  // The survivors train on (they are stopped at the end) while the moved node trains
  // to 1,500 from where they are when it comes back (a few hundred steps in).
  for (int i = 0; i < 2; ++i)
    trainers.emplace_back(trainer(i, 100000, tmp_.path() / ("r" + std::to_string(i))),
                          tmp_.path() / ("t" + std::to_string(i) + ".log"));
  ChildProcess first(trainer(2, 100000, tmp_.path() / "r2-first"), tmp_.path() / "t2-first.log");
  std::this_thread::sleep_for(3s);
  ASSERT_TRUE(first.running()) << first.log() << daemons[2].log();

  // The pod is rescheduled: its name now resolves to another address.
  daemons[2].signal(SIGKILL);
  first.signal(SIGKILL);
  daemons[2].wait(10s);
  first.wait(10s);
  names["gossip-2.gossip"] = "127.0.0.4";
  write_hosts(hosts_, names);
  ::unlink((tmp_.path() / "gossipd-2.sock").c_str());
  ChildProcess moved = start_daemon(2, "127.0.0.4");
  // It resumes at its neighbors' step (state transfer), so it trains to 1,500.
  ChildProcess second(trainer(2, 1500, tmp_.path() / "r2"), tmp_.path() / "t2.log");
  // Its peers reach it only by resolving the name again: what it receives came that way.
  expect_trained(second, tmp_.path() / "r2", moved.log());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(trainers[i].running()) << "a survivor stopped: " << trainers[i].log();
    trainers[i].signal(SIGTERM);
  }
}

}  // namespace
}  // namespace gossip::testing

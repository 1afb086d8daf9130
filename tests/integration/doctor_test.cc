// gossipctl doctor and status --cluster against real daemons on loopback: a healthy
// cluster, then each problem made for real (a dead node, a port that drops every
// connection, a node with the wrong key), which doctor must name, exiting 1.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

std::pair<int, std::string> gossipctl(const std::string& args) {
  const std::string cmd = "timeout 60 " + binary("gossipctl") + " " + args + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Every daemon has heard from every peer once it has run a round; a few local SGD
// steps on every node make that so.
// The clients stay attached while the caller holds them.
std::vector<std::unique_ptr<Client>> train_a_little(Cluster& c, int nodes, int steps) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < nodes; ++i) {
    clients.push_back(connect_to(c, i));
    if (!clients.back() || !clients.back()->attach({{"w", 4096}}).is_ok()) {
      ADD_FAILURE() << "node " << i << ": cannot attach";
      return {};
    }
  }
  std::vector<std::thread> ts;
  for (auto& cl : clients)
    ts.emplace_back([raw = cl.get(), steps] {
      for (int s = 0; s < steps; ++s) ASSERT_TRUE(raw->step().is_ok());
    });
  for (auto& t : ts) t.join();
  return clients;
}

TEST(Doctor, AHealthyClusterHasNoProblemAndStatusClusterListsEveryMember) {
  Cluster c(3, {"--period", "1"});
  c.start_all();
  const auto clients = train_a_little(c, 3, 3);
  ASSERT_EQ(clients.size(), 3u);

  auto [rc, out] = gossipctl("doctor --json --timeout 8 --node " + c.ipc_endpoint(1));
  ASSERT_EQ(rc, 0) << out;
  const json d = json::parse(out);
  EXPECT_EQ(d["asked"], 1);
  EXPECT_TRUE(d["silent"].empty()) << out;
  EXPECT_TRUE(d["problems"].empty()) << out;
  ASSERT_EQ(d["rows"].size(), 3u) << out;
  for (const auto& row : d["rows"]) {
    EXPECT_EQ(row["strategy"], "local-sgd");
    ASSERT_EQ(row["links"].size(), 2u);
    for (const auto& l : row["links"]) {
      SCOPED_TRACE(row["node"].dump() + "->" + l["to"].dump());
      EXPECT_EQ(l["connect"], "ok");
      EXPECT_EQ(l["handshake"], "ok");
      EXPECT_EQ(l["pings"], 5);
      EXPECT_GE(l["pongs"].get<int>(), 1);
      EXPECT_GT(l["rtt_ms"].get<double>(), 0.0);
      EXPECT_LT(l["rtt_ms"].get<double>(), 1000.0);
      EXPECT_FALSE(l["bandwidth_bytes_per_s"].is_null()) << "a probe was measured";
      EXPECT_LT(std::abs(l["clock_offset_ms"].get<double>()), 100.0) << "one host, one clock";
      EXPECT_EQ(l["version"], row["version"]);
    }
  }
  // The table says the same, in words.
  auto [rc_table, table] = gossipctl("doctor --timeout 8 --node " + c.ipc_endpoint(0));
  EXPECT_EQ(rc_table, 0) << table;
  EXPECT_TRUE(has(table, "no problems found")) << table;
  EXPECT_TRUE(has(table, "2->1")) << table;

  auto [rc_status, status] = gossipctl("status --cluster --json --node " + c.ipc_endpoint(2));
  ASSERT_EQ(rc_status, 0) << status;
  const json s = json::parse(status);
  ASSERT_EQ(s["members"].size(), 3u) << status;
  for (const auto& m : s["members"]) {
    SCOPED_TRACE(m.dump());
    EXPECT_EQ(m["step"], 3);
    EXPECT_EQ(m["lag"], 0);
    EXPECT_EQ(m["trainers"], 1);
    EXPECT_EQ(m["state"], "training");
    EXPECT_GT(m["sent_bytes"].get<uint64_t>(), 4096u);
    EXPECT_EQ(m["last_error"], "");
    // Local SGD leaves every replica equal after a round.
    if (!m["distance"].is_null()) {
      EXPECT_LT(m["distance"].get<double>(), 1e-6);
    }
  }
  auto [rc_missing, missing] =
      gossipctl("doctor --node " + (c.run_dir() / "gossipd-9.sock").string());
  EXPECT_EQ(rc_missing, 1);
  EXPECT_TRUE(has(missing, "no gossipd socket at")) << missing;
}

// allreduce's rounds average gradients: the daemon never holds the model, so no
// member reports a distance from the mean (the gradients' would say nothing of it).
TEST(Doctor, StatusClusterShowsNoDistanceForAGradientStrategy) {
  Cluster c(2, {"--strategy", "allreduce"});
  c.start_all();
  const auto clients = train_a_little(c, 2, 2);
  ASSERT_EQ(clients.size(), 2u);
  auto [rc, out] = gossipctl("status --cluster --json --node " + c.ipc_endpoint(0));
  ASSERT_EQ(rc, 0) << out;
  const json s = json::parse(out);
  ASSERT_EQ(s["members"].size(), 2u) << out;
  for (const auto& m : s["members"]) {
    EXPECT_EQ(m["step"], 2) << out;
    EXPECT_TRUE(m["distance"].is_null()) << out;
  }
}

TEST(Doctor, NamesADeadNode) {
  Cluster c(3, {"--period", "1"});
  c.start_all();
  ASSERT_EQ(train_a_little(c, 3, 2).size(), 3u);
  c.daemon(2).signal(SIGKILL);
  ASSERT_NE(c.daemon(2).wait(5s), -1);

  auto [rc, out] = gossipctl("doctor --timeout 3 --node " + c.ipc_endpoint(0));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "silent: 2")) << out;
  EXPECT_TRUE(has(out,
                  "node 2 is down, or its gossipd is not running: nodes 0 and 1 cannot "
                  "connect to it at " +
                      c.peer_endpoint(2) + " (refused) although they did before"))
      << out;
  auto [rc_status, status] = gossipctl("status --cluster --timeout 2 --node " + c.ipc_endpoint(1));
  EXPECT_EQ(rc_status, 0) << status;
  EXPECT_TRUE(has(status, "silent: 2")) << status;
  EXPECT_TRUE(has(status, "no answer: down, unreachable, or busy")) << status;
}

// A firewall that drops a port sends nothing back: the SYN goes unanswered. A
// listener whose accept queue is full does the same (the kernel drops SYNs past it),
// so this port stands for node 2's port behind such a firewall in the others' peer
// lists. No root needed.
class DroppingPort {
 public:
  DroppingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 0) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    port_ = ntohs(a.sin_port);
    for (int i = 0; i < 3; ++i) fillers_.push_back(connect_nonblocking());
  }
  ~DroppingPort() {
    for (int f : fillers_) ::close(f);
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  // Whether a new connection really gets no answer here (a kernel could differ).
  bool drops() {
    const int f = connect_nonblocking();
    pollfd p{f, POLLOUT, 0};
    const int ready = ::poll(&p, 1, 500);
    ::close(f);
    return port_ > 0 && ready == 0;
  }

 private:
  int connect_nonblocking() {
    const int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    (void)::connect(f, reinterpret_cast<sockaddr*>(&a), sizeof a);
    return f;
  }
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

TEST(Doctor, NamesABlockedPort) {
  DroppingPort blocked;
  if (!blocked.drops()) GTEST_SKIP() << "this kernel answers connections past a full backlog";
  Cluster c(3, {"--period", "1"});
  c.advertise(2, "tcp://127.0.0.1:" + std::to_string(blocked.port()));
  c.start_all();

  auto [rc, out] = gossipctl("doctor --timeout 5 --node " + c.ipc_endpoint(0));
  EXPECT_EQ(rc, 1) << out;
  const std::string port = std::to_string(blocked.port());
  EXPECT_TRUE(has(out, "cannot connect to its port " + port) ||
              has(out, "(timed out: no answer in"))
      << out;
  EXPECT_TRUE(has(out, "firewall")) << out;
  EXPECT_TRUE(has(out, "0->2     timed out")) << out;
}

struct KeyPair {
  std::string pub, sec;
};
KeyPair new_keys() {
  char p[41], s[41];
  EXPECT_EQ(zmq_curve_keypair(p, s), 0);
  return {p, s};
}

TEST(Doctor, NamesAWrongKey) {
  KeyPair k[3] = {new_keys(), new_keys(), new_keys()};
  const KeyPair stranger = new_keys();  // what node 2 runs with by mistake
  Cluster c(3, {"--period", "1"});
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> flags = {"--secret-key", i == 2 ? stranger.sec : k[i].sec};
    for (int j = 0; j < 3; ++j)
      if (j != i) flags.insert(flags.end(), {"--peer-key", std::to_string(j) + "=" + k[j].pub});
    c.set_node_flags(i, flags);
  }
  c.start_all();
  std::this_thread::sleep_for(1s);  // node 2's connections try and fail

  auto [rc, out] = gossipctl("doctor --timeout 4 --node " + c.ipc_endpoint(0));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "node 0 connects to node 2 on port")) << out;
  EXPECT_TRUE(has(out, "the CURVE handshake fails")) << out;
  EXPECT_TRUE(has(out, "is node 2 running with the right key?")) << out;
  EXPECT_TRUE(has(out, "node 0 refused a CURVE handshake: public key")) << out;
  EXPECT_TRUE(has(out, "silent: 2")) << out;
}

uint64_t payload_sent(const Cluster& c, int node) {
  auto [rc, out] = gossipctl("status --json --node " + c.ipc_endpoint(node));
  if (rc != 0) {
    ADD_FAILURE() << out;
    return 0;
  }
  return json::parse(out)["traffic"]["payload_sent"].get<uint64_t>();
}

// A peer that asks and asks (plain mode: anyone who reaches the port is any node) makes
// the node probe at most once a second and measure bandwidth at most once every 30 s,
// and answer it a few times a second: kilobytes, where answering every ask with a
// fresh probe would send a megabyte per link per ask. Its row, full of terminal escapes
// and absurd numbers, reaches doctor's table as printable text.
TEST(DoctorAttack, AnAskFloodCostsKilobytesAndAHostileRowPrintsHarmlessly) {
  Cluster c(3, {"--period", "1"});
  c.start(0);
  c.start(1);  // node 2's address is the attacker's
  std::this_thread::sleep_for(500ms);
  const uint64_t before = payload_sent(c, 0);
  ChildProcess attacker(
      {binary("gossip-attacker"), "inspect-flood", "--target", c.peer_endpoint(0), "--run-id",
       c.run_id(), "--listen", c.peer_endpoint(2), "--as-node", "2", "--seconds", "5"},
      c.run_dir() / "attacker.log");
  std::this_thread::sleep_for(1500ms);
  auto [rc, out] = gossipctl("doctor --timeout 3 --node " + c.ipc_endpoint(0));
  ASSERT_EQ(attacker.wait(20s), 0) << attacker.log();
  const uint64_t sent = payload_sent(c, 0) - before;

  EXPECT_TRUE(has(attacker.log(), "sent ")) << attacker.log();
  const uint64_t asks = std::stoull(attacker.log().substr(attacker.log().find("sent ") + 5));
  EXPECT_GT(asks, 1000u) << attacker.log();
  // Two 1 MiB bandwidth probes (doctor's own, to node 1 and the attacker) and small
  // change; without the limits, a probe of both links per ask.
  EXPECT_LT(sent, 3u << 20) << asks << " asks cost node 0 " << sent << " bytes";

  EXPECT_EQ(out.find(''), std::string::npos) << "no escape reaches the terminal";
  EXPECT_EQ(out.find(''), std::string::npos);
  EXPECT_TRUE(has(out, "?[2J?]0;owned??[31mEVIL")) << out;
  EXPECT_TRUE(has(out, "node 2: ")) << "the hostile row was read, cut to size: " << out;
  // Node 0 is unharmed and still answers.
  auto [rc_status, status] = gossipctl("status --node " + c.ipc_endpoint(0));
  EXPECT_EQ(rc_status, 0) << status;
  EXPECT_TRUE(c.daemon(0).running());
}

}  // namespace
}  // namespace gossip::testing

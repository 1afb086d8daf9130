// CURVE on the daemons' channel, with real daemons: the model crosses the wire
// encrypted (a relay between two nodes records what passes and finds no trace of a
// known pattern, which it does find without keys), and a stranger's key is refused.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "gossip/client.h"
#include "harness.h"
#include "peers/ring_hello.h"
#include "peers/zmq_transport.h"
#include "proto/layout.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;

KeyPair keypair() { return curve_keypair(); }

// Relays TCP connections from its port to 127.0.0.1:target and records the bytes that
// go towards the target.
class Relay {
 public:
  explicit Relay(int target) : target_(target) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 8) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("relay: cannot listen");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  std::string recorded() {
    std::lock_guard lock(mu_);
    return recorded_;
  }

 private:
  static int connect_to(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  void run() {
    std::vector<std::pair<int, int>> pairs;  // (from client, to target)
    char buf[65536];
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto [c, t] : pairs) {
        fds.push_back({c, POLLIN, 0});
        fds.push_back({t, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      const size_t polled = pairs.size();  // pairs accepted below are polled next turn
      if (fds[0].revents & POLLIN) {
        const int c = ::accept(listen_fd_, nullptr, nullptr);
        const int t = c >= 0 ? connect_to(target_) : -1;
        if (t >= 0)
          pairs.push_back({c, t});
        else if (c >= 0)
          ::close(c);
      }
      for (size_t i = 0; i < polled; ++i) {
        auto [c, t] = pairs[i];
        bool closed = false;
        for (int dir = 0; dir < 2 && !closed; ++dir) {
          const pollfd& p = fds[1 + 2 * i + dir];
          if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
          const ssize_t n = ::read(p.fd, buf, sizeof buf);
          if (n <= 0) {
            closed = true;
            break;
          }
          if (dir == 0) {
            std::lock_guard lock(mu_);
            recorded_.append(buf, static_cast<size_t>(n));
          }
          if (::write(dir == 0 ? t : c, buf, static_cast<size_t>(n)) != n) closed = true;
        }
        if (closed) {
          ::close(c);
          ::close(t);
          pairs[i] = {-1, -1};
        }
      }
      std::erase_if(pairs, [](auto p) { return p.first < 0; });
    }
    for (auto [c, t] : pairs) {
      ::close(c);
      ::close(t);
    }
  }

  int target_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string recorded_;
};

constexpr uint64_t kNumel = 8192;
constexpr float kMagic = 1234.5678f;

// Two daemons, node 1 reaching node 0 through the relay; one averaging round of a
// model that node 1 fills with kMagic. Returns what node 1 sent towards node 0.
std::string one_round_through_relay(bool with_keys) {
  const auto ports = free_ports(2);
  Relay relay(ports[0]);
  const KeyPair k0 = keypair(), k1 = keypair();
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("curve-" + std::to_string(::getpid()) + (with_keys ? "-k" : "-p"));
  std::filesystem::create_directories(dir);
  // Removed on every way out, after the daemons below (declared later, so stopped first).
  struct RemoveAtExit {
    std::filesystem::path path;
    ~RemoveAtExit() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{dir};
  const auto ep = [](int port) { return "tcp://127.0.0.1:" + std::to_string(port); };
  std::vector<std::string> common = {"--run-dir", dir.string(),  "--period",
                                     "1",         "--transport", "allgather"};
  std::vector<std::string> a0 = {
      binary("gossipd"), "--id", "0", "--listen", ep(ports[0]), "--peer", "1=" + ep(ports[1])};
  std::vector<std::string> a1 = {
      binary("gossipd"), "--id", "1", "--listen", ep(ports[1]), "--peer", "0=" + ep(relay.port())};
  a0.insert(a0.end(), common.begin(), common.end());
  a1.insert(a1.end(), common.begin(), common.end());
  if (with_keys) {
    a0.insert(a0.end(), {"--secret-key", k0.sec, "--peer-key", "1=" + k1.pub});
    a1.insert(a1.end(), {"--secret-key", k1.sec, "--peer-key", "0=" + k0.pub});
  }
  ChildProcess d0(a0, dir / "gossipd-0.log"), d1(a1, dir / "gossipd-1.log");
  std::unique_ptr<Client> c[2];
  std::span<float> w[2];
  for (int i = 0; i < 2; ++i) {
    const auto sock = dir / ("gossipd-" + std::to_string(i) + ".sock");
    for (auto end = std::chrono::steady_clock::now() + 10s; !std::filesystem::exists(sock);) {
      if (std::chrono::steady_clock::now() > end) {
        ADD_FAILURE() << "no socket " << sock << "\n" << d0.log() << d1.log();
        return {};
      }
      std::this_thread::sleep_for(10ms);
    }
    auto client = Client::connect({.endpoint = "ipc://" + sock.string(),
                                   .trainer = "t",
                                   .local_rank = 0,
                                   .timeout = std::chrono::milliseconds(20000)});
    EXPECT_TRUE(client.is_ok()) << client.status().message();
    if (!client.is_ok()) return {};
    c[i] = std::move(client).value();
    auto m = c[i]->attach({{"w", kNumel}});
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    if (!m.is_ok()) return {};
    w[i] = m->tensors[0];
  }
  std::fill(w[0].begin(), w[0].end(), 0.0f);
  std::fill(w[1].begin(), w[1].end(), kMagic);
  std::thread other([&] { EXPECT_TRUE(c[1]->step().is_ok()); });
  EXPECT_TRUE(c[0]->step().is_ok());
  other.join();
  EXPECT_EQ(w[0][100], kMagic / 2) << "the round averaged";
  EXPECT_EQ(w[1][100], kMagic / 2);
  return relay.recorded();
}

bool has_pattern(const std::string& bytes) {
  std::string pattern;
  for (int i = 0; i < 16; ++i)
    pattern.append(reinterpret_cast<const char*>(&kMagic), sizeof kMagic);
  return bytes.find(pattern) != std::string::npos;
}

// One trainer on each node of a 2-node cluster, node i's model filled with fill[i].
struct Pair {
  std::unique_ptr<Client> client[2];
  std::span<float> w[2];
};
void attach_both(const Cluster& c, uint64_t numel, const float (&fill)[2], Pair& p) {
  for (int i = 0; i < 2; ++i) {
    auto client = Client::connect({.endpoint = c.ipc_endpoint(i),
                                   .trainer = "t",
                                   .local_rank = 0,
                                   .timeout = std::chrono::milliseconds(20000)});
    ASSERT_TRUE(client.is_ok()) << client.status().message();
    p.client[i] = std::move(client).value();
    auto m = p.client[i]->attach({{"w", numel}});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    p.w[i] = m->tensors[0];
    std::fill(p.w[i].begin(), p.w[i].end(), fill[i]);
  }
}
void step_both(Pair& p) {
  std::thread other([&] { EXPECT_TRUE(p.client[1]->step().is_ok()); });
  EXPECT_TRUE(p.client[0]->step().is_ok());
  other.join();
}
void use_keys(Cluster& c, const KeyPair& k0, const KeyPair& k1) {
  c.set_node_flags(0, {"--secret-key", k0.sec, "--peer-key", "1=" + k1.pub});
  c.set_node_flags(1, {"--secret-key", k1.sec, "--peer-key", "0=" + k0.pub});
}

TEST(Curve, TheModelCrossesTheWireEncrypted) {
  const std::string plain = one_round_through_relay(false);
  ASSERT_GT(plain.size(), kNumel * 4) << "node 1 sent its model through the relay";
  EXPECT_TRUE(has_pattern(plain)) << "without keys the relay sees the floats (the check can fail)";
  const std::string sealed = one_round_through_relay(true);
  ASSERT_GT(sealed.size(), kNumel * 4);
  EXPECT_FALSE(has_pattern(sealed)) << "with CURVE the relay must not see the model";
}

TEST(Curve, AStrangersKeyIsRefused) {
  const KeyPair k0 = keypair(), k1 = keypair(), stranger = keypair();
  Cluster c(2, {"--period", "1"});
  use_keys(c, k0, k1);
  c.start_all();
  // Someone who knows node 0's public key, claims to be node 1, but holds another key.
  peers::TransportOptions o;
  o.secret_key = stranger.sec;
  auto impostor =
      peers::ZmqTransport::create(1, "tcp://127.0.0.1:" + std::to_string(free_ports(1)[0]),
                                  {{0, c.peer_endpoint(0), k0.pub}}, o);
  ASSERT_TRUE(impostor.is_ok()) << impostor.status().message();
  ASSERT_TRUE((*impostor)->send(0, 0, proto::Hello{}).is_ok());
  const std::string stranger_pub = stranger.pub;
  std::string log;
  for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;) {
    log = c.log(0);
    if (log.find("refused a CURVE handshake") != std::string::npos) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(log.find("public key " + stranger_pub + " is not a peer's"), std::string::npos) << log;
  EXPECT_TRUE(c.daemon(0).running());
  // The real node 1, whose key node 0 knows, still averages with it.
  Pair p;
  attach_both(c, 100, {0.0f, 2.0f}, p);
  if (HasFatalFailure()) return;
  step_both(p);
  EXPECT_EQ(p.w[0][0], 1.0f);
  EXPECT_EQ(p.w[1][99], 1.0f);
}

// The ring all-reduce's TCP links: a node requires, in the hello of whoever connects
// as its left neighbor, the token it handed that neighbor over the (encrypted) control
// channel. Someone who knows the layout and the ids but not the token is refused, and
// the round goes on with the real neighbor.
TEST(Curve, TheRingAdmitsOnlyTheNeighborThatGotItsToken) {
  const KeyPair k0 = keypair(), k1 = keypair();
  Cluster c(2, {"--period", "1", "--transport", "tcp", "--allreduce-algorithm", "ring"});
  use_keys(c, k0, k1);
  c.start_all();
  Pair p;
  attach_both(c, 50000, {0.0f, 4.0f}, p);  // above the whole-vector threshold: a real ring
  if (HasFatalFailure()) return;
  // Node 0's ring port, from its log.
  std::smatch port;
  const std::string log0 = c.log(0);
  ASSERT_TRUE(std::regex_search(log0, port,
                                std::regex(R"(all-reduce \(ring\) over tcp \(port ([0-9]+)\))")))
      << log0;
  // A hello as node 1 would send it without the token: the layout's fingerprint alone.
  proto::Layout layout;
  layout.tensors = {{"w", proto::DType::kF32, 50000}};
  const peers::RingHello forged{.from = 1, .to = 0, .session = layout.fingerprint()};
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port[1])));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::write(fd, &forged, sizeof forged), static_cast<ssize_t>(sizeof forged));
  step_both(p);
  ::close(fd);
  EXPECT_EQ(p.w[0][123], 2.0f);
  EXPECT_EQ(p.w[1][49999], 2.0f);
  EXPECT_NE(c.log(0).find("ring: refused a connection: session"), std::string::npos) << c.log(0);
}

// Banning (issue 20): nodes 0 and 1 ban node 2, which runs and connects as usual.
// Its handshakes are refused, nothing is sent to it, and the all-gather's mean is
// over nodes 0 and 1 alone, without waiting for node 2. Its key on their list of keys
// that may join (--admit-keys) does not let it back in as a joiner's either.
TEST(Curve, ABannedPeersKeyIsRefusedAndItIsLeftOutOfTheMean) {
  const KeyPair k[3] = {keypair(), keypair(), keypair()};
  Cluster c(3, {"--period", "1", "--transport", "allgather", "--round-timeout", "10"});
  const auto admit = c.run_dir() / "admit.keys";
  std::ofstream(admit) << k[2].pub << "\n";
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> flags = {"--secret-key", k[i].sec, "--admit-keys", admit.string()};
    for (int j = 0; j < 3; ++j)
      if (j != i) flags.insert(flags.end(), {"--peer-key", std::to_string(j) + "=" + k[j].pub});
    if (i != 2) flags.insert(flags.end(), {"--ban-peer", "2"});
    c.set_node_flags(i, flags);
  }
  c.start_all();
  Pair p;
  attach_both(c, 1000, {0.0f, 2.0f}, p);
  if (HasFatalFailure()) return;
  const auto t0 = std::chrono::steady_clock::now();
  step_both(p);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the round waited for the banned node";
  EXPECT_EQ(p.w[0][0], 1.0f) << "node 2's model (zeros, never sent) is not in the mean";
  EXPECT_EQ(p.w[1][999], 1.0f);
  std::string log;
  for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;) {
    log = c.log(0);
    if (log.find("public key " + k[2].pub + " is not a peer's") != std::string::npos) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(log.find("peer 2 is banned"), std::string::npos) << log;
  EXPECT_NE(log.find("public key " + k[2].pub + " is not a peer's"), std::string::npos) << log;
  EXPECT_TRUE(c.daemon(2).running());
}

// `gossipctl ban ID` on a running node (issue 46): what --ban-peer does at start, from
// the next round on. Three nodes average by the all-gather (node 2 in the mean); nodes
// 0 and 1 ban node 2 through gossipctl; their next round is the mean of the two, without
// waiting for node 2, though node 2 steps too and sends them 100s on the connections it
// has (dropped), and its round fails.
std::pair<int, std::string> gossipctl(const Cluster& c, std::vector<std::string> args) {
  args.insert(args.begin(), binary("gossipctl"));
  const auto log = c.run_dir() / ("gossipctl-" + std::to_string(::getpid()) + ".log");
  ChildProcess p(args, log);
  const int rc = p.wait(20s);
  return {rc, p.log()};
}

TEST(Curve, AGossipctlBanOnARunningNodeLeavesThePeerOutFromThen) {
  const KeyPair k[3] = {keypair(), keypair(), keypair()};
  Cluster c(3, {"--period", "1", "--transport", "allgather", "--round-timeout", "5"});
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> flags = {"--secret-key", k[i].sec};
    for (int j = 0; j < 3; ++j)
      if (j != i) flags.insert(flags.end(), {"--peer-key", std::to_string(j) + "=" + k[j].pub});
    c.set_node_flags(i, flags);
  }
  c.start_all();
  Pair p;
  attach_both(c, 1000, {0.0f, 2.0f}, p);
  if (HasFatalFailure()) return;
  auto third = Client::connect({.endpoint = c.ipc_endpoint(2),
                                .trainer = "t",
                                .local_rank = 0,
                                .timeout = std::chrono::milliseconds(20000)});
  ASSERT_TRUE(third.is_ok()) << third.status().message();
  auto m = (*third)->attach({{"w", 1000}});
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  std::fill(m->tensors[0].begin(), m->tensors[0].end(), 7.0f);
  {
    std::thread t2([&] { EXPECT_TRUE((*third)->step().is_ok()); });
    step_both(p);
    t2.join();
  }
  ASSERT_EQ(p.w[0][0], 3.0f) << "(0 + 2 + 7) / 3: node 2 is in the mean";

  auto [bad_rc, bad] = gossipctl(c, {"ban", "9", "--node", c.ipc_endpoint(0)});
  EXPECT_EQ(bad_rc, 1) << bad;
  EXPECT_NE(bad.find("node 9 is not a peer of node 0"), std::string::npos) << bad;
  for (int i = 0; i < 2; ++i) {
    auto [rc, out] = gossipctl(c, {"ban", "2", "--node", c.ipc_endpoint(i)});
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("node 2 is banned"), std::string::npos) << out;
  }
  // The worker takes the ban at its next poll, within milliseconds.
  for (int i = 0; i < 2; ++i) {
    for (auto end = std::chrono::steady_clock::now() + 10s;
         std::chrono::steady_clock::now() < end &&
         c.log(i).find("peer 2 is banned (gossipctl ban)") == std::string::npos;)
      std::this_thread::sleep_for(20ms);
    ASSERT_NE(c.log(i).find("peer 2 is banned (gossipctl ban)"), std::string::npos) << c.log(i);
  }
  std::fill(p.w[0].begin(), p.w[0].end(), 0.0f);
  std::fill(p.w[1].begin(), p.w[1].end(), 2.0f);
  std::fill(m->tensors[0].begin(), m->tensors[0].end(), 100.0f);
  std::thread banned([&] { EXPECT_FALSE((*third)->step().is_ok()) << "no one answers node 2"; });
  const auto t0 = std::chrono::steady_clock::now();
  step_both(p);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s) << "the round waited for the banned node";
  EXPECT_EQ(p.w[0][0], 1.0f) << "node 2's model is out of the mean";
  EXPECT_EQ(p.w[1][999], 1.0f);
  banned.join();
  // What node 2 sent them on its open connections was dropped, and counted.
  for (int i = 0; i < 2; ++i) {
    auto status = p.client[i]->status();
    ASSERT_TRUE(status.is_ok()) << status.status().message();
    const auto two = std::find_if(status->peers.begin(), status->peers.end(),
                                  [](const auto& peer) { return peer.id == 2; });
    ASSERT_NE(two, status->peers.end());
    EXPECT_GT(two->traffic.dropped, 0u) << "node " << i;
  }
  EXPECT_TRUE(c.daemon(2).running());
}

TEST(Curve, AGossipctlBanWithoutKeysIsRefusedNamingWhy) {
  Cluster c(2, {"--period", "1"});
  c.start_all();
  auto [rc, out] = gossipctl(c, {"ban", "1", "--node", c.ipc_endpoint(0)});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("a ban needs CURVE"), std::string::npos) << out;
}

TEST(Curve, KeysAreCheckedWhenTheDaemonStarts) {
  const KeyPair k = keypair();
  const auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> argv = {binary("gossipd"),    "--id",      "0",    "--listen",
                                     "tcp://127.0.0.1:1",  "--run-dir", "/tmp", "--peer",
                                     "1=tcp://127.0.0.1:2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto log = std::filesystem::path(::testing::TempDir()) /
                     ("curve-bad-" + std::to_string(::getpid()) + ".log");
    ChildProcess p(argv, log);
    const int rc = p.wait(10s);
    auto out = std::make_pair(rc, p.log());
    std::error_code ignored;
    std::filesystem::remove(log, ignored);
    return out;
  };
  auto [rc1, log1] = run({"--secret-key", k.sec});
  EXPECT_EQ(rc1, 2);
  EXPECT_NE(log1.find("peer 1 needs its public key"), std::string::npos) << log1;
  auto [rc2, log2] = run({"--peer-key", "1=" + k.pub});
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(log2.find("needs node.secret_key"), std::string::npos) << log2;
  auto [rc3, log3] = run({"--secret-key", "tooshort", "--peer-key", "1=" + k.pub});
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(log3.find("40 Z85 characters"), std::string::npos) << log3;
  EXPECT_EQ(log3.find("tooshort"), std::string::npos) << "a secret is never echoed: " << log3;
  auto [rc4, log4] = run({"--secret-key", k.sec, "--peer-key", "7=" + k.pub});
  EXPECT_EQ(rc4, 2);
  EXPECT_NE(log4.find("no peer 7"), std::string::npos) << log4;
}

}  // namespace
}  // namespace gossip::testing

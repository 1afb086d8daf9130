// The sealed ring channel over real TCP ring links on loopback, with a man in the
// middle on one link (a proxy thread, or gossip-attacker's ring-replay): the ring's
// mean is exact through it, the proxy sees no plaintext, and a byte it alters, a key
// of another pair, or a whole connection recorded and replayed into a later one fails
// the link with the reason and a count, never a wrong mean.

#include "peers/sealed_ring_channel.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/refusals.h"
#include "harness.h"
#include "peers/curve_auth.h"
#include "sgd/collectives/ring_all_reduce.h"

namespace gossip::peers {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int listen_on_loopback(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd, 4);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  port = ntohs(a.sin_port);
  return fd;
}

// Accepts one connection and relays it to 127.0.0.1:`to`, keeping what passes
// towards `to`; `alter` may change the byte at each offset of that direction.
class Proxy {
 public:
  Proxy(uint16_t to, std::function<void(size_t, std::byte&)> alter = {})
      : to_(to), alter_(std::move(alter)) {
    listener_ = listen_on_loopback(port_);
    thread_ = std::thread([this] { run(); });
  }
  ~Proxy() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  uint16_t port() const { return port_; }
  std::vector<std::byte> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void run() {
    pollfd p{listener_, POLLIN, 0};
    while (!stop_ && ::poll(&p, 1, 20) == 0) {
    }
    if (stop_) return;
    const int in = ::accept(listener_, nullptr, nullptr);
    const int out = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(to_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    std::vector<std::byte> buf(1 << 16);
    size_t offset = 0;
    while (!stop_) {
      pollfd fds[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
      if (::poll(fds, 2, 20) <= 0) continue;
      if (fds[0].revents) {
        const ssize_t n = ::recv(in, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; ++i)
          if (alter_) alter_(offset + static_cast<size_t>(i), buf[static_cast<size_t>(i)]);
        offset += static_cast<size_t>(n);
        {
          std::lock_guard lock(mu_);
          seen_.insert(seen_.end(), buf.begin(), buf.begin() + n);
        }
        if (::send(out, buf.data(), static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
      }
      if (fds[1].revents) {
        const ssize_t n = ::recv(out, buf.data(), buf.size(), 0);
        if (n <= 0 || ::send(in, buf.data(), static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
      }
    }
    ::close(in);
    ::close(out);
  }

  uint16_t to_;
  std::function<void(size_t, std::byte&)> alter_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::byte> seen_;
};

struct KeyPair {
  std::string public_key, secret_key;
  KeyPair() {
    char pub[41], sec[41];
    EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
    public_key = pub;
    secret_key = sec;
  }
};

LinkKey link(uint32_t from, uint32_t to, const KeyPair& own, const KeyPair& other) {
  return curve_link_key(from, to, own.secret_key, other.public_key).value();
}

constexpr float kPattern = 1234.5f;

// Where rank 0 connects to reach rank 1, given rank 1's port: a man in the middle's.
using Middle = std::function<uint16_t(uint16_t)>;

// A mean over 3 ranks on TCP ring links, rank 0's link to rank 1 through `middle`,
// sealed unless `plain`, with the nodes' `keys`. `wrong_key`: rank 1 opens with a key
// rank 2 and rank 1 share instead. Returns each rank's status; `data` holds the
// results.
std::vector<Status> ring_mean(std::vector<std::vector<float>>& data, bool plain,
                              const Middle& middle,
                              const std::vector<KeyPair>& keys = std::vector<KeyPair>(3),
                              bool wrong_key = false) {
  constexpr uint32_t n = 3;
  std::vector<std::unique_ptr<RingTransport>> transports;
  for (uint32_t r = 0; r < n; ++r) transports.push_back(make_ring_transport("tcp", {}).value());
  const uint16_t rank1 = middle(transports[1]->port());
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const uint32_t left = (r + n - 1) % n, right = (r + 1) % n;
      const RingEnds ends{.self = r,
                          .left = left,
                          .right = right,
                          .right_host = "127.0.0.1",
                          .right_port = r == 0 ? rank1 : transports[right]->port(),
                          .session = 7};
      auto ch = transports[r]->connect(ends, {Clock::now() + 5s, nullptr});
      if (!ch) {
        results[r] = ch.status();
        return;
      }
      std::unique_ptr<RingChannel> channel = std::move(ch).value();
      if (!plain) {
        SealKeys k{.to_right = link(r, right, keys[r], keys[right]),
                   .from_left = link(left, r, keys[r], keys[left]),
                   .right_session = 7,
                   .left_session = 7};
        if (wrong_key && r == 1) k.from_left = link(2, 1, keys[1], keys[2]);
        channel = seal_ring_channel(std::move(channel), k);
      }
      sgd::RingOptions o;
      o.size = n;
      o.rank = r;
      o.round = 1;
      o.chunk_elems = 4096;
      o.wait = {Clock::now() + 5s, nullptr};
      sgd::RingAllReduce ring;
      results[r] = ring.mean(*channel, data[r], o);
    });
  for (auto& t : threads) t.join();
  return results;
}

std::vector<std::vector<float>> inputs(size_t numel) {
  std::vector<std::vector<float>> data(3, std::vector<float>(numel, kPattern));
  for (size_t i = 0; i < numel; ++i) data[1][i] = kPattern + static_cast<float>(i % 7);
  return data;
}

// Whether 64 bytes of kPattern in a row crossed the proxy.
bool shows_plaintext(const std::vector<std::byte>& wire) {
  std::vector<std::byte> needle(64);
  for (size_t i = 0; i < needle.size(); i += sizeof(float))
    std::memcpy(needle.data() + i, &kPattern, sizeof(float));
  return std::search(wire.begin(), wire.end(), needle.begin(), needle.end()) != wire.end();
}

// A proxy made at `proxy`, from rank 1's port, altering bytes by `alter`.
Middle through(std::unique_ptr<Proxy>& proxy, std::function<void(size_t, std::byte&)> alter = {}) {
  return [&proxy, alter](uint16_t to) {
    proxy = std::make_unique<Proxy>(to, alter);
    return proxy->port();
  };
}

TEST(SealedRing, TheMeanIsExactAndTheWireShowsNoPlaintext) {
  for (bool plain : {true, false}) {
    auto data = inputs(300'000);
    std::unique_ptr<Proxy> proxy;
    const auto st = ring_mean(data, plain, through(proxy));
    for (const auto& s : st) ASSERT_TRUE(s.is_ok()) << s.message();
    for (size_t i = 0; i < data[0].size(); ++i)
      ASSERT_FLOAT_EQ(data[2][i], kPattern + static_cast<float>(i % 7) / 3) << i;
    EXPECT_EQ(data[0], data[2]);
    const auto wire = proxy->seen();
    EXPECT_GT(wire.size(), 300'000u * 4 / 3);
    // The check sees plaintext where there is some: it can fail.
    EXPECT_EQ(shows_plaintext(wire), plain) << (plain ? "plain" : "sealed");
  }
}

TEST(SealedRing, AnAlteredByteFailsTheLinkWithTheReasonAndIsCounted) {
  const uint64_t before = refusals(Refusal::kForged);
  auto data = inputs(100'000);
  std::unique_ptr<Proxy> proxy;
  // Past the hello (24 bytes), the salt's frame (40) and a frame header (24): inside
  // the first sealed chunk. (The proxy counts the bytes towards rank 1 only.)
  const auto st = ring_mean(data, false, through(proxy, [](size_t at, std::byte& b) {
                              if (at == 200) b ^= std::byte{1};
                            }));
  ASSERT_FALSE(st[1].is_ok()) << "rank 1 took an altered chunk";
  EXPECT_NE(st[1].message().find("from peer 0 (left) does not open"), std::string::npos)
      << st[1].message();
  EXPECT_GE(refusals(Refusal::kForged), before + 1);
}

TEST(SealedRing, AKeyOfAnotherPairDoesNotOpen) {
  auto data = inputs(10'000);
  std::unique_ptr<Proxy> proxy;
  const auto st = ring_mean(data, false, through(proxy), std::vector<KeyPair>(3), true);
  ASSERT_FALSE(st[1].is_ok());
  EXPECT_NE(st[1].message().find("does not open"), std::string::npos) << st[1].message();
}

// A man in the middle records a whole sealed connection, rank 0 to rank 1, then
// replays it (gossip-attacker ring-replay, a process of its own) into the next
// connection of the same session and round, as a retry after a break would make,
// while rank 0 now holds other values. The session names no connection and the
// sender picks its salt, so before the receivers answered each hello with a nonce of
// their own the recording opened and rank 1 averaged rank 0's old values in
// silently. Now the link fails, counted as forged, and no rank takes them.
TEST(SealedRing, AConnectionRecordedAndReplayedIntoARetryDoesNotOpen) {
  const std::vector<KeyPair> keys(3);
  auto first = inputs(50'000);
  std::unique_ptr<Proxy> recorder;
  auto st = ring_mean(first, false, through(recorder), keys);
  for (const auto& s : st) ASSERT_TRUE(s.is_ok()) << s.message();
  const auto dir =
      std::filesystem::temp_directory_path() / ("gossip-replay-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto capture = dir / "rank0-to-rank1.bin";
  {
    const auto wire = recorder->seen();
    std::ofstream(capture, std::ios::binary)
        .write(reinterpret_cast<const char*>(wire.data()),
               static_cast<std::streamsize>(wire.size()));
  }

  auto second = inputs(50'000);
  for (float& v : second[0]) v += 100.0f;
  const uint64_t forged = refusals(Refusal::kForged);
  std::optional<testing::ChildProcess> attacker;
  const int port = testing::free_ports(1).at(0);
  st = ring_mean(
      second, false,
      [&](uint16_t to) {
        attacker.emplace(
            std::vector<std::string>{testing::binary("gossip-attacker"), "ring-replay", "--listen",
                                     std::to_string(port), "--target", std::to_string(to),
                                     "--capture", capture.string(), "--seconds", "8"},
            dir / "attacker.log");
        return static_cast<uint16_t>(port);
      },
      keys);
  ASSERT_TRUE(attacker);
  attacker->wait(10s);
  const std::string log = attacker->log();
  std::filesystem::remove_all(dir);
  EXPECT_NE(log.find("replaying"), std::string::npos) << log;
  ASSERT_FALSE(st[1].is_ok()) << "rank 1 took the recorded connection: its mean starts "
                              << second[1][0] << "\n"
                              << log;
  EXPECT_NE(st[1].message().find("from peer 0 (left) does not open"), std::string::npos)
      << st[1].message();
  EXPECT_GE(refusals(Refusal::kForged), forged + 1);
  // The receiver took the replayed hello (the session is right) and answered it: the
  // seal, not the hello, is what turned the recording away.
  EXPECT_NE(log.find("relayed 24 bytes from the receiver"), std::string::npos) << log;
  // No rank finished with the recording's values in its mean.
  for (size_t r = 0; r < 3; ++r)
    if (st[r].is_ok()) ADD_FAILURE() << "rank " << r << " finished a mean over a broken link";
}

}  // namespace
}  // namespace gossip::peers

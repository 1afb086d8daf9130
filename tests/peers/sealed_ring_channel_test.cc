// The sealed ring channel over real TCP ring links on loopback, with a man in the
// middle on one link (a proxy thread): the ring's mean is exact through it, the
// proxy sees no plaintext, and a byte it alters, or a key of another pair, fails
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
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/refusals.h"
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

// A mean over 3 ranks on TCP ring links, rank 0's link to rank 1 through `proxy`
// (made from rank 1's port), sealed unless `plain`. `wrong_key`: rank 1 opens with
// a key rank 2 and rank 1 share instead. Returns each rank's status; `data` holds
// the results.
std::vector<Status> ring_mean(std::vector<std::vector<float>>& data, bool plain,
                              const std::function<std::unique_ptr<Proxy>(uint16_t)>& proxy_to,
                              std::unique_ptr<Proxy>& proxy, bool wrong_key = false) {
  constexpr uint32_t n = 3;
  const std::vector<KeyPair> keys(n);
  std::vector<std::unique_ptr<RingTransport>> transports;
  for (uint32_t r = 0; r < n; ++r) transports.push_back(make_ring_transport("tcp", {}).value());
  proxy = proxy_to(transports[1]->port());
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const uint32_t left = (r + n - 1) % n, right = (r + 1) % n;
      const RingEnds ends{.self = r,
                          .left = left,
                          .right = right,
                          .right_host = "127.0.0.1",
                          .right_port = r == 0 ? proxy->port() : transports[right]->port(),
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

TEST(SealedRing, TheMeanIsExactAndTheWireShowsNoPlaintext) {
  const auto plain_proxy = [](uint16_t to) { return std::make_unique<Proxy>(to); };
  for (bool plain : {true, false}) {
    auto data = inputs(300'000);
    std::unique_ptr<Proxy> proxy;
    const auto st = ring_mean(data, plain, plain_proxy, proxy);
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
  // the first sealed chunk.
  const auto st = ring_mean(
      data, false,
      [](uint16_t to) {
        return std::make_unique<Proxy>(to, [](size_t at, std::byte& b) {
          if (at == 200) b ^= std::byte{1};
        });
      },
      proxy);
  ASSERT_FALSE(st[1].is_ok()) << "rank 1 took an altered chunk";
  EXPECT_NE(st[1].message().find("from peer 0 (left) does not open"), std::string::npos)
      << st[1].message();
  EXPECT_GE(refusals(Refusal::kForged), before + 1);
}

TEST(SealedRing, AKeyOfAnotherPairDoesNotOpen) {
  auto data = inputs(10'000);
  std::unique_ptr<Proxy> proxy;
  const auto st = ring_mean(
      data, false, [](uint16_t to) { return std::make_unique<Proxy>(to); }, proxy, true);
  ASSERT_FALSE(st[1].is_ok());
  EXPECT_NE(st[1].message().find("does not open"), std::string::npos) << st[1].message();
}

}  // namespace
}  // namespace gossip::peers

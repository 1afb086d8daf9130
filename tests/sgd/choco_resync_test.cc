// CHOCO-SGD's public copies under churn, with three in-process nodes on a ring over
// real ZeroMQ transports on loopback: a node that stalls loses corrections both ways
// (its neighbors stop waiting for it, then send it hellos instead of corrections),
// and without resynchronization the copies disagree for good and consensus is never
// reached. With it, the nodes agree again. Plus the exchange's side: a public copy
// is refused by a node that does not run CHOCO, and a copy-request is handed over.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "peers/zmq_transport.h"
#include "sgd/strategies/choco/choco_sgd.h"
#include "tests/sgd/loopback_port.h"

namespace gossip::sgd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kLayout = 0xc0c0;
constexpr size_t kNumel = 4096;

struct ChocoNode {
  std::unique_ptr<peers::ZmqTransport> transport;
  std::unique_ptr<peers::Router> router;
  std::unique_ptr<NeighborExchange> exchange;
  std::unique_ptr<ChocoSgd> choco;
  std::vector<float> x;
  uint64_t next = 0;  // next round
  std::string error;

  // Runs rounds until `last`, catching up as the daemon does.
  void run_until(uint64_t last) {
    while (next <= last) {
      const uint64_t round = choco->round_to_run(next);
      if (round > last) break;
      RoundOptions o;
      o.deadline = Clock::now() + 20s;
      if (Status st = choco->synchronize(x, round, o); !st) {
        error = "round " + std::to_string(round) + ": " + st.message();
        return;
      }
      next = round + 1;
    }
  }
};

struct Ring3 {
  std::unique_ptr<Overlay> overlay;
  std::vector<ChocoNode> nodes;

  explicit Ring3(std::chrono::milliseconds patience) {
    overlay = std::make_unique<Overlay>("ring", 1, peers::make_topology("ring", 3, 1).value());
    std::vector<std::string> ep;
    for (int i = 0; i < 3; ++i) ep.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
    nodes.resize(3);
    for (uint32_t i = 0; i < 3; ++i) {
      std::vector<peers::Peer> peers;
      for (uint32_t j = 0; j < 3; ++j)
        if (j != i) peers.push_back({j, ep[j], ""});
      ChocoNode& n = nodes[i];
      n.transport = peers::ZmqTransport::create(i, ep[i], peers).value();
      n.router = std::make_unique<peers::Router>(*n.transport);
      ExchangeLimits limits;
      limits.heartbeat = 100ms;
      limits.dead_after = 5000ms;  // the stall is found by the patience, as for a slow node
      n.exchange = std::make_unique<NeighborExchange>(*n.router, nullptr, nullptr, limits);
      n.exchange->set_layout_fingerprint(kLayout);
      GossipOptions o;
      o.patience = patience;
      n.choco = std::make_unique<ChocoSgd>(*n.exchange, *overlay, o, 1.0);
      n.x.resize(kNumel);
      for (size_t e = 0; e < kNumel; ++e)
        n.x[e] = static_cast<float>(i) * 3.0f + std::sin(0.01f * e * (i + 1));
    }
  }

  // Every node in `who` runs to round `last` at once.
  void run(std::vector<int> who, uint64_t last) {
    std::vector<std::jthread> threads;
    for (int i : who) threads.emplace_back([&, i] { nodes[i].run_until(last); });
  }

  double spread() const {
    double d = 0;
    for (size_t e = 0; e < kNumel; ++e) {
      float lo = nodes[0].x[e], hi = lo;
      for (const auto& n : nodes) {
        lo = std::min(lo, n.x[e]);
        hi = std::max(hi, n.x[e]);
      }
      d = std::max(d, static_cast<double>(hi - lo));
    }
    return d;
  }
};

TEST(ChocoResync, AStalledNodesCopiesAreResynchronizedAndTheRingAveragesItAgain) {
  constexpr auto kPatience = 300ms;
  Ring3 ring(kPatience);
  const double start = ring.spread();
  ring.run({0, 1, 2}, 4);
  EXPECT_LT(ring.spread(), 1e-4 * start) << "a ring of three with raw copies averages in one round";
  // Node 2 stalls while its neighbors run five rounds: they wait for it once (the
  // patience), then go on without its corrections. It trained meanwhile.
  ring.run({0, 1}, 9);
  for (float& v : ring.nodes[2].x) v += 6.0f;
  // All three again: node 2 catches up to its neighbors' round; their copies of it
  // missed corrections and are resynchronized.
  ring.run({0, 1, 2}, 30);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ring.nodes[i].error, "") << "node " << i;
  EXPECT_LT(ring.spread(), 1e-4 * start);

  // With every copy in step on both sides of each edge, mixing keeps the mean: what
  // node 2 learns next reaches the others as a third. A copy left stale (or left out)
  // would keep node 2 a follower, and the ring would settle at the others' value.
  const float before = ring.nodes[0].x[0];
  for (float& v : ring.nodes[2].x) v += 6.0f;
  ring.run({0, 1, 2}, 40);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(ring.nodes[i].error, "") << "node " << i;
    EXPECT_EQ(ring.nodes[i].next, 41u) << "node " << i << " ran every round";
    EXPECT_NEAR(ring.nodes[i].x[0], before + 2.0f, 1e-4) << "node " << i;
  }
}

TEST(ChocoResync, APublicCopyIsRefusedWhereChocoDoesNotRunAndACopyRequestIsHandedOver) {
  const std::string ea = "tcp://127.0.0.1:" + std::to_string(free_port());
  const std::string eb = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto a = peers::ZmqTransport::create(0, ea, {{1, eb, ""}}).value();
  auto b = peers::ZmqTransport::create(1, eb, {{0, ea, ""}}).value();
  peers::Router ra(*a), rb(*b);
  const uint32_t from_a[] = {0};
  auto send_copy = [&](uint64_t round) {
    OutgoingModel m;
    m.tensor = proto::kPublicCopyTensor;
    std::vector<float> x(64, 1.5f);
    ASSERT_TRUE(m.encode(x, 0, round, 1 << 20, {}));
    ASSERT_TRUE(m.send(*a, 1, kLayout));
  };
  RoundOptions o;
  o.deadline = Clock::now() + 5s;

  {
    // Refused, which leaves the sender out of its round; in the third round in a
    // row it is a misconfiguration, and the round fails saying so.
    NeighborExchange dpsgd(rb, nullptr, nullptr);
    dpsgd.set_layout_fingerprint(kLayout);
    for (uint64_t round = 0; round < NeighborExchange::kMismatchRounds; ++round) {
      send_copy(round);
      size_t taken = 0;
      auto d = dpsgd.receive(round, from_a, 64, Clock::now() + 3s, o, [&](auto...) { ++taken; });
      EXPECT_EQ(taken, 0u);
      if (round + 1 < NeighborExchange::kMismatchRounds) {
        ASSERT_TRUE(d) << d.status().message();
        EXPECT_FALSE(d->complete[0]);
        continue;
      }
      ASSERT_FALSE(d);
      EXPECT_NE(d.status().message().find("tensor 1"), std::string::npos) << d.status().message();
      EXPECT_NE(d.status().message().find("3 rounds in a row"), std::string::npos)
          << d.status().message();
    }
  }

  NeighborExchange choco(rb, nullptr, nullptr);
  choco.set_layout_fingerprint(kLayout);
  choco.accept_public_copies();
  NeighborExchange asker(ra, nullptr, nullptr);
  asker.request_copy(1, 1);
  send_copy(1);
  size_t got = 0;
  auto d = choco.receive(1, from_a, 64, Clock::now() + 3s, o,
                         [&](size_t, const proto::ModelChunk& h, std::span<const float> v) {
                           EXPECT_EQ(h.tensor, proto::kPublicCopyTensor);
                           got += v.size();
                         });
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(got, 64u);
  EXPECT_EQ(choco.take_copy_requests(), std::vector<uint32_t>{0});
  EXPECT_TRUE(choco.take_copy_requests().empty()) << "a request is handed over once";
}

}  // namespace
}  // namespace gossip::sgd

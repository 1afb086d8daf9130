// A join over real ZeroMQ transports on loopback: the joiner gets a member's model
// and, after it in the same chunks, the strategy's shared state (local SGD's outer
// momentum), bit for bit; an offer whose size is not the joiner's model plus its
// shared state is not taken.

#include "sgd/state_transfer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "peers/zmq_transport.h"
#include "tests/sgd/loopback_port.h"

namespace gossip::sgd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kLayout = 0x5678;
constexpr uint64_t kChunk = 300;  // elements: a chunk holds the model's end and the state's start

// Node 0 joins; the others are members that answer from a router polled on a thread.
struct Members {
  std::vector<std::unique_ptr<peers::ZmqTransport>> t;
  std::vector<std::unique_ptr<peers::Router>> r;
  std::vector<std::unique_ptr<StateTransfer>> s;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;

  explicit Members(uint32_t n) {
    std::vector<std::string> ep;
    for (uint32_t i = 0; i < n; ++i) ep.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
    for (uint32_t i = 0; i < n; ++i) {
      std::vector<peers::Peer> peers;
      for (uint32_t j = 0; j < n; ++j)
        if (j != i) peers.push_back({j, ep[j], ""});
      t.push_back(peers::ZmqTransport::create(i, ep[i], peers).value());
      r.push_back(std::make_unique<peers::Router>(*t.back()));
      s.push_back(std::make_unique<StateTransfer>(*r.back(), [](uint32_t) { return true; }));
    }
  }
  void serve() {
    for (size_t i = 1; i < r.size(); ++i)
      threads.emplace_back([this, i] {
        while (!stop) r[i]->poll(10ms);
      });
  }
  ~Members() {
    stop = true;
    for (auto& th : threads) th.join();
  }
};

JoinOptions options() {
  JoinOptions o;
  o.offer_wait = 3s;
  o.chunk_elems = kChunk;
  o.deadline = Clock::now() + 20s;
  return o;
}

std::vector<float> ramp(size_t n, float start) {
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), start);
  return x;
}

TEST(StateTransfer, AJoinerTakesTheModelAndTheSharedStateAfterIt) {
  Members m(2);
  const auto model = ramp(1000, 0.25f);
  const auto momentum = ramp(1000, -500.5f);
  m.s[1]->publish(model, momentum, 7, 42, 1.0, kLayout, kChunk);
  m.serve();
  auto got = m.s[0]->fetch(model.size(), momentum.size(), kLayout, options());
  ASSERT_TRUE(got) << got.status().message();
  ASSERT_TRUE(got->has_value()) << "the member offers its state";
  const NodeState& st = **got;
  EXPECT_EQ(st.from, 1u);
  EXPECT_EQ(st.round, 7u);
  EXPECT_EQ(st.step, 42u);
  EXPECT_EQ(st.model, model);
  EXPECT_EQ(st.shared, momentum);
}

TEST(StateTransfer, AStrategyWithoutSharedStateTakesTheModelAlone) {
  Members m(2);
  const auto model = ramp(1000, 3.0f);
  m.s[1]->publish(model, {}, 3, 9, 1.0, kLayout, kChunk);
  m.serve();
  auto got = m.s[0]->fetch(model.size(), 0, kLayout, options());
  ASSERT_TRUE(got && got->has_value()) << (got ? "no state" : got.status().message());
  EXPECT_EQ((*got)->model, model);
  EXPECT_TRUE((*got)->shared.empty());
}

// A member that runs without the outer optimizer offers the model alone; a joiner
// that expects the momentum too does not take it (it would start the outer steps
// from zero and part from the members), and takes the offer of the right size.
TEST(StateTransfer, AnOfferOfAnotherSizeIsNotTaken) {
  Members m(3);
  const auto model = ramp(1000, 1.0f);
  const auto momentum = ramp(1000, 2.0f);
  m.s[1]->publish(model, {}, 9, 90, 1.0, kLayout, kChunk);        // fresher, but no momentum
  m.s[2]->publish(model, momentum, 8, 80, 1.0, kLayout, kChunk);  // the joiner's strategy
  m.serve();
  auto got = m.s[0]->fetch(model.size(), momentum.size(), kLayout, options());
  ASSERT_TRUE(got && got->has_value()) << (got ? "no state" : got.status().message());
  EXPECT_EQ((*got)->from, 2u) << "the fresher offer of another size is not taken";
  EXPECT_EQ((*got)->shared, momentum);

  // With that member alone, nothing is taken.
  Members alone(2);
  alone.s[1]->publish(model, {}, 9, 90, 1.0, kLayout, kChunk);
  alone.serve();
  auto none = alone.s[0]->fetch(model.size(), momentum.size(), kLayout, options());
  ASSERT_TRUE(none) << none.status().message();
  EXPECT_FALSE(none->has_value());
}

}  // namespace
}  // namespace gossip::sgd

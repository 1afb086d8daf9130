// A join over real ZeroMQ transports on loopback: the joiner gets a member's model
// and, after it in the same chunks, the strategy's shared state (local SGD's outer
// momentum), bit for bit; an offer whose size is not the joiner's model plus its
// shared state is not taken. Donors of the same state share the chunks; one that
// dies half way or sends a chunk that is not its manifest's leaves its chunks to
// the others, and the state still comes out bit for bit.

#include "sgd/membership/state_transfer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "peers/channel_decorator.h"
#include "peers/zmq_transport.h"
#include "tests/sgd/loopback_port.h"

namespace gossip::sgd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kLayout = 0x5678;
constexpr uint64_t kChunk = 300;  // elements: a chunk holds the model's end and the state's start

// Node 0 joins; the others are members that answer from a router polled on a
// thread of their own. `wrap` may put a member's channel in a decorator.
struct Members {
  std::vector<std::unique_ptr<peers::PeerChannel>> t;
  std::vector<std::unique_ptr<peers::Router>> r;
  std::vector<std::unique_ptr<StateTransfer>> s;
  std::vector<std::unique_ptr<std::atomic<bool>>> stop;
  std::vector<std::thread> threads;

  using Wrap = std::function<std::unique_ptr<peers::PeerChannel>(
      uint32_t, std::unique_ptr<peers::PeerChannel>)>;
  explicit Members(uint32_t n, const Wrap& wrap = nullptr) {
    std::vector<std::string> ep;
    for (uint32_t i = 0; i < n; ++i) ep.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
    for (uint32_t i = 0; i < n; ++i) {
      std::vector<peers::Peer> peers;
      for (uint32_t j = 0; j < n; ++j)
        if (j != i) peers.push_back({j, ep[j], ""});
      std::unique_ptr<peers::PeerChannel> c = peers::ZmqTransport::create(i, ep[i], peers).value();
      t.push_back(wrap ? wrap(i, std::move(c)) : std::move(c));
      r.push_back(std::make_unique<peers::Router>(*t.back()));
      s.push_back(std::make_unique<StateTransfer>(*r.back(), [](uint32_t) { return true; }));
      stop.push_back(std::make_unique<std::atomic<bool>>(false));
    }
    threads.resize(n);
  }
  void serve() {
    for (size_t i = 1; i < r.size(); ++i)
      threads[i] = std::thread([this, i] {
        while (!*stop[i]) r[i]->poll(10ms);
      });
  }
  // Member i dies: its thread stops and its sockets close.
  void kill(size_t i) {
    *stop[i] = true;
    if (threads[i].joinable()) threads[i].join();
    s[i].reset();
    r[i].reset();
    t[i].reset();
  }
  ~Members() {
    for (auto& x : stop) *x = true;
    for (auto& th : threads)
      if (th.joinable()) th.join();
  }
};

// A member's channel that counts the state chunks it sends and, from the
// `die_after`th on, sends none (the member dies; the test closes its sockets), or
// alters the `corrupt`th (a donor whose chunk is not its manifest's), and sends one
// every `pace` (a slow donor).
class DonorChannel final : public peers::ChannelDecorator {
 public:
  DonorChannel(std::unique_ptr<peers::PeerChannel> inner, uint64_t die_after, uint64_t corrupt,
               std::chrono::milliseconds pace = 0ms)
      : ChannelDecorator(std::move(inner)), die_after_(die_after), corrupt_(corrupt), pace_(pace) {}
  Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                     std::shared_ptr<const std::vector<std::byte>> buffer) override {
    if (!std::holds_alternative<proto::StateChunk>(body))
      return ChannelDecorator::send_shared(peer, round, body, std::move(buffer));
    if (sent_ >= die_after_) {
      dead_ = true;
      return Status::ok();
    }
    std::this_thread::sleep_for(pace_);
    if (++sent_ == corrupt_) {
      auto bad = std::make_shared<std::vector<std::byte>>(*buffer);
      (*bad)[0] ^= std::byte{1};
      buffer = std::move(bad);
    }
    return ChannelDecorator::send_shared(peer, round, body, std::move(buffer));
  }
  uint64_t sent() const { return sent_; }
  bool dead() const { return dead_; }

 private:
  uint64_t die_after_, corrupt_;
  std::chrono::milliseconds pace_;
  std::atomic<uint64_t> sent_{0};
  std::atomic<bool> dead_{false};
};

JoinOptions options() {
  JoinOptions o;
  o.offer_wait = 3s;
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

// 100 chunks of 300 elements, the model and momentum of a local-SGD ring's members
// after a round: the same on every member.
struct RingState {
  std::vector<float> model = ramp(20000, 0.5f);
  std::vector<float> momentum = ramp(10000, -7.25f);
  void publish(Members& m, std::initializer_list<size_t> on) const {
    for (size_t i : on) m.s[i]->publish(model, momentum, 12, 48, 1.0, kLayout, kChunk);
  }
};

DonorChannel& donor(Members& m, size_t i) { return static_cast<DonorChannel&>(*m.t[i]); }

// Node 0 fetches the state that members 1 and 2 publish (m serves from here on); it
// must come out bit for bit.
std::optional<NodeState> fetch_ring_state(Members& m, const RingState& state) {
  state.publish(m, {1, 2});
  m.serve();
  auto got = m.s[0]->fetch(state.model.size(), state.momentum.size(), kLayout, options());
  EXPECT_TRUE(got && got->has_value()) << (got ? "no state" : got.status().message());
  if (!got || !got->has_value()) return std::nullopt;
  EXPECT_EQ((*got)->model, state.model) << "bit for bit";
  EXPECT_EQ((*got)->shared, state.momentum);
  return std::move(got).value();
}

Members::Wrap donors(uint64_t die_after_2, uint64_t corrupt_2,
                     std::chrono::milliseconds pace_2 = 0ms) {
  return [=](uint32_t i,
             std::unique_ptr<peers::PeerChannel> c) -> std::unique_ptr<peers::PeerChannel> {
    if (i == 0) return c;
    return std::make_unique<DonorChannel>(std::move(c), i == 2 ? die_after_2 : UINT64_MAX,
                                          i == 2 ? corrupt_2 : 0, i == 2 ? pace_2 : 0ms);
  };
}

TEST(StateTransfer, TwoDonorsOfOneStateSendHalfOfItEach) {
  Members m(3, donors(UINT64_MAX, 0));
  const auto got = fetch_ring_state(m, RingState{});
  ASSERT_TRUE(got);
  EXPECT_EQ(got->round, 12u);
  // 50 each, and a few more where one, done first, took the other's last chunks.
  EXPECT_GE(donor(m, 1).sent(), 45u);
  EXPECT_GE(donor(m, 2).sent(), 45u);
  EXPECT_LE(donor(m, 1).sent() + donor(m, 2).sent(), 110u);
}

TEST(StateTransfer, ADonorThatDiesHalfWayLeavesItsChunksToTheOther) {
  Members m(3, donors(20, 0));
  std::jthread killer([&] {
    const auto give_up = Clock::now() + 10s;
    while (!donor(m, 2).dead() && Clock::now() < give_up) std::this_thread::sleep_for(1ms);
    m.kill(2);
  });
  const auto start = Clock::now();
  ASSERT_TRUE(fetch_ring_state(m, RingState{}));
  // Taken over, or dropped with its connection, within about a second: not the 10 s
  // that a silent donor is given.
  EXPECT_LT(Clock::now() - start, 6s);
  EXPECT_GE(donor(m, 1).sent(), 80u) << "its own 50 and most of the dead one's";
}

TEST(StateTransfer, AChunkThatIsNotItsManifestsDropsItsDonor) {
  Members m(3, donors(UINT64_MAX, 3));
  const auto got = fetch_ring_state(m, RingState{});
  ASSERT_TRUE(got);
  EXPECT_EQ(got->from, 1u) << "the honest donor sent most of it";
}

// Donor 2 sends a chunk every 100 ms (its 50 would take 5 s); donor 1, done with its
// share, takes half of what donor 2 still owes, again and again, and the state is
// here in a fraction of that.
TEST(StateTransfer, AnIdleDonorTakesOverASlowOnesChunks) {
  Members m(3, donors(UINT64_MAX, 0, 100ms));
  const auto start = Clock::now();
  ASSERT_TRUE(fetch_ring_state(m, RingState{}));
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_GT(donor(m, 1).sent(), 70u) << "it took over most of donor 2's";
}

}  // namespace
}  // namespace gossip::sgd

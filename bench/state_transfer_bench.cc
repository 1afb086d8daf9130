// How long a node of N parameters (100M by default) takes to come back by state
// transfer (sgd/membership/state_transfer.h), over real ZeroMQ sockets on loopback: from one
// donor or two that hold the same state, with and without a donor lost half way.
// Each donor is a thread with a transport of its own; a donor that dies stops
// sending at half its share and its sockets are closed, as a killed process's are.
// The anchor is what the joiner did before wire version 4 whenever a donor was lost:
// the next donor holds another state (a gossip neighbor, or a member a round later),
// so nothing already here is kept and the download starts over.
//
//   build/bin/state_transfer_bench [--params 100000000] [--donor-gbps 0] [--repeat 3]
//
// --donor-gbps caps each donor's sending rate (its uplink, shared with its own
// rounds on a real cluster); 0: loopback as fast as the CPUs go.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "peers/channel_decorator.h"
#include "peers/router.h"
#include "peers/zmq_transport.h"
#include "sgd/membership/state_transfer.h"
#include "tests/sgd/loopback_port.h"

namespace {

using namespace gossip;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr uint64_t kLayout = 0xbe4c;

// A donor's channel: paces its state chunks to `gbps` and, once it has sent
// `die_after` of them, sends nothing more (the process died; its sockets close next).
class Donor final : public peers::ChannelDecorator {
 public:
  Donor(std::unique_ptr<peers::PeerChannel> inner, double gbps, uint64_t die_after)
      : ChannelDecorator(std::move(inner)), gbps_(gbps), die_after_(die_after) {}
  Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                     std::shared_ptr<const std::vector<std::byte>> buffer) override {
    if (!std::holds_alternative<proto::StateChunk>(body))
      return ChannelDecorator::send_shared(peer, round, body, std::move(buffer));
    if (sent_ >= die_after_) {
      dead_ = true;
      return Status::ok();
    }
    if (gbps_ > 0) {
      if (sent_ == 0) start_ = Clock::now();
      bytes_ += buffer->size();
      std::this_thread::sleep_until(
          start_ + std::chrono::nanoseconds(static_cast<int64_t>(bytes_ * 8 / gbps_)));
    }
    ++sent_;
    return ChannelDecorator::send_shared(peer, round, body, std::move(buffer));
  }
  bool dead() const { return dead_; }

 private:
  double gbps_;
  uint64_t die_after_;
  std::atomic<uint64_t> sent_{0};
  std::atomic<bool> dead_{false};
  uint64_t bytes_ = 0;
  Clock::time_point start_;
};

struct Node {
  std::unique_ptr<peers::PeerChannel> channel;
  std::unique_ptr<peers::Router> router;
  std::unique_ptr<sgd::StateTransfer> transfer;
  std::atomic<bool> stop{false};
  std::thread thread;
};

struct Scenario {
  const char* name;
  size_t donors;        // --join-donors
  bool alike;           // both donors hold the same state
  bool second;          // a second donor exists
  uint64_t dies_after;  // chunks donor 1 sends before it dies (UINT64_MAX: never)
};

double run(const Scenario& sc, const std::vector<float>& state, const std::vector<float>& other,
           uint64_t chunk_elems, double gbps) {
  const uint32_t n = sc.second ? 3 : 2;
  std::vector<std::string> ep;
  for (uint32_t i = 0; i < n; ++i)
    ep.push_back("tcp://127.0.0.1:" + std::to_string(sgd::free_port()));
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<Donor*> donors(n, nullptr);
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<peers::Peer> peers;
    for (uint32_t j = 0; j < n; ++j)
      if (j != i) peers.push_back({j, ep[j], ""});
    auto node = std::make_unique<Node>();
    std::unique_ptr<peers::PeerChannel> c = peers::ZmqTransport::create(i, ep[i], peers).value();
    if (i > 0) {
      auto d = std::make_unique<Donor>(std::move(c), gbps, i == 1 ? sc.dies_after : UINT64_MAX);
      donors[i] = d.get();
      c = std::move(d);
    }
    node->channel = std::move(c);
    node->router = std::make_unique<peers::Router>(*node->channel);
    node->transfer =
        std::make_unique<sgd::StateTransfer>(*node->router, [](uint32_t) { return true; });
    nodes.push_back(std::move(node));
  }
  nodes[1]->transfer->publish(state, {}, 10, 40, 1.0, kLayout, chunk_elems);
  if (sc.second)
    nodes[2]->transfer->publish(sc.alike ? state : other, {}, 10, sc.alike ? 40 : 41, 1.0, kLayout,
                                chunk_elems);
  for (uint32_t i = 1; i < n; ++i)
    nodes[i]->thread = std::thread([&node = *nodes[i]] {
      while (!node.stop) node.router->poll(10ms);
    });
  // Donor 1 dies: its thread stops and its sockets close.
  std::jthread killer([&] {
    while (!donors[1]->dead() && !nodes[0]->stop) std::this_thread::sleep_for(1ms);
    if (nodes[0]->stop) return;
    nodes[1]->stop = true;
    nodes[1]->thread.join();
    nodes[1]->transfer.reset();
    nodes[1]->router.reset();
    nodes[1]->channel.reset();
  });
  sgd::JoinOptions o;
  o.offer_wait = 3s;
  o.max_donors = sc.donors;
  o.deadline = Clock::now() + 300s;
  const auto t0 = Clock::now();
  auto got = nodes[0]->transfer->fetch(state.size(), 0, kLayout, o);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  nodes[0]->stop = true;
  killer.join();
  for (uint32_t i = 1; i < n; ++i) {
    nodes[i]->stop = true;
    if (nodes[i]->thread.joinable()) nodes[i]->thread.join();
  }
  if (!got || !got->has_value()) {
    std::fprintf(stderr, "%s: no state: %s\n", sc.name,
                 got ? "none offered" : got.status().message().c_str());
    return -1;
  }
  const auto& want = (*got)->step == 40 ? state : other;
  if ((*got)->model != want) std::fprintf(stderr, "%s: the state is not the donor's!\n", sc.name);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("state transfer: time to bring a node back from one or two donors");
  uint64_t params = 100'000'000;
  uint64_t chunk_bytes = 4u << 20;
  double gbps = 0;
  int repeat = 3;
  std::string log_level = "error";
  app.add_option("--params", params, "parameters of the model");
  app.add_option("--chunk-bytes", chunk_bytes, "bytes per state chunk (gossipd's --chunk-bytes)");
  app.add_option("--donor-gbps", gbps, "cap on each donor's sending rate, Gbit/s; 0: none");
  app.add_option("--repeat", repeat, "runs of each scenario (the median is shown)");
  app.add_option("--log-level", log_level, "the transfers' log (info shows every donor's share)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  std::vector<float> state(params), other(params);
  for (size_t i = 0; i < params; ++i) {
    state[i] = static_cast<float>(i % 9973) * 1e-3f;
    other[i] = state[i] + 1.0f;
  }
  const uint64_t chunk_elems = chunk_bytes / sizeof(float);
  const uint64_t chunks = (params + chunk_elems - 1) / chunk_elems;
  const Scenario scenarios[] = {
      {"one donor", 1, true, false, UINT64_MAX},
      {"two donors", 2, true, true, UINT64_MAX},
      {"one donor lost half way, the next holds another state (before wire 4)", 1, false, true,
       chunks / 2},
      {"one donor lost half way, the next holds the same state", 1, true, true, chunks / 2},
      {"two donors, one lost half way", 2, true, true, chunks / 4},
  };
  std::printf(
      "%llu parameters (%.0f MB) in %llu chunks of %llu bytes; donors %s\n",
      static_cast<unsigned long long>(params), params * 4.0 / 1e6,
      static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(chunk_bytes),
      gbps > 0 ? fmt::format("capped at {} Gbit/s each", gbps).c_str() : "on loopback, uncapped");
  double anchor = 0;
  for (const Scenario& sc : scenarios) {
    std::vector<double> t;
    for (int r = 0; r < repeat; ++r) t.push_back(run(sc, state, other, chunk_elems, gbps));
    std::sort(t.begin(), t.end());
    const double median = t[t.size() / 2];
    if (anchor == 0) anchor = median;
    std::printf("%-75s %7.2f s  (%.2fx one donor)\n", sc.name, median, median / anchor);
    std::fflush(stdout);
  }
  return 0;
}

#include "sim/world.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numbers>

#include "base/split_mix64.h"
#include "compression/codec_spec.h"
#include "peers/memory_ring.h"
#include "peers/router.h"
#include "peers/topology.h"
#include "sgd/collectives/all_gather_all_reduce.h"
#include "sgd/membership/peer_ring.h"
#include "sgd/membership/state_transfer.h"
#include "sgd/overlay/neighbor_exchange.h"
#include "sgd/overlay/overlay.h"
#include "sgd/round_deadline.h"
#include "sgd/strategies/sma/sma.h"
#include "sim/sim_clock.h"

namespace gossip::sim {

namespace {

using namespace std::chrono_literals;

constexpr double kBytesPerNodePair = 330;
constexpr uint64_t kLayout = 0x51a7;  // every node's model has the same layout

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

// A standard normal draw for (seed, node, element): Box-Muller on two counter-based
// uniforms, so each node's optimum is the same whatever else was drawn.
// A uniform draw in (0, 1): never 0, so that its logarithm is finite.
double open_unit(SplitMix64& g) { return (static_cast<double>(g.next() >> 11) + 0.5) * 0x1.0p-53; }

double normal(uint64_t seed, uint64_t node, uint64_t e) {
  SplitMix64 g = SplitMix64::keyed(seed, node, e);
  const double u1 = open_unit(g);
  const double u2 = static_cast<double>(g.next() >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// --peer-lists: each node's peers. "graph": those it ever exchanges with over a period
// of `t` (in- and out-neighbors), and nodes 0 and 1, the coordinators, which list all.
std::vector<std::vector<uint32_t>> peer_lists(const WorldOptions& o, const peers::Topology& t) {
  std::vector<std::vector<uint32_t>> lists(o.nodes);
  const bool graph = o.peer_lists == "graph";
  for (uint32_t i = 0; i < o.nodes; ++i) {
    if (graph && i > 1) {
      lists[i] = {0, 1};
      continue;
    }
    lists[i].reserve(o.nodes - 1);
    for (uint32_t j = 0; j < o.nodes; ++j)
      if (j != i) lists[i].push_back(j);
  }
  if (!graph) return lists;
  for (uint64_t r = 0; r < t.period(); ++r)
    for (uint32_t i = 2; i < o.nodes; ++i)
      for (uint32_t j : t.out_neighbors(i, r)) {
        lists[i].push_back(j);
        if (j > 1) lists[j].push_back(i);
      }
  for (uint32_t i = 2; i < o.nodes; ++i) {
    auto& l = lists[i];
    std::sort(l.begin(), l.end());
    l.erase(std::unique(l.begin(), l.end()), l.end());
  }
  return lists;
}

struct Node {
  std::unique_ptr<peers::MemoryChannel> channel;
  std::unique_ptr<peers::Router> router;
  std::unique_ptr<sgd::NeighborExchange> exchange;  // the gossip family's
  std::unique_ptr<peers::RingTransport> ring;       // local SGD's and allreduce's:
  std::unique_ptr<sgd::AllReduce> all_reduce;       // the elastic ring or the all-gather
  std::unique_ptr<sgd::Strategy> strategy;
  std::unique_ptr<sgd::RoundDeadline> deadline;
  std::vector<float> x;  // the node's model: what its rounds run on (SMA's central model)
  std::vector<float> b;  // the node's optimum (quadratic)
  // SMA (--strategy sma): the node's learners, each a replica that takes the local
  // steps, and the central model they follow (sgd/strategies/sma/sma.h), as the
  // daemon holds them for its trainers (daemon/rounds.cc).
  std::vector<std::vector<float>> learners;
  std::unique_ptr<sgd::CentralModel> central;
  uint64_t wire_before = 0;  // sent before its last restart (the channel then counts anew)
};

// What the nodes that finished one round had: sums of their deviation from x*.
struct RoundSums {
  std::vector<double> deviation;  // sum over nodes of x_i - x*
  double squares = 0;             // sum over nodes of |x_i - x*|^2
  uint32_t nodes = 0;
  double last_time_s = 0;
  uint64_t wire = 0;
  double loss = 0;  // sum over nodes of their local steps' loss (mlp)
};

class World {
 public:
  World(const WorldOptions& o, const sgd::StrategyDescriptor& descriptor,
        std::unique_ptr<peers::Topology> first, compression::CodecSpec codec,
        std::unique_ptr<MlpCluster> mlp)
      : o_(o),
        descriptor_(descriptor),
        hub_(clock_, o.links),
        ring_hub_(hub_),
        codec_(std::move(codec)),
        mlp_(std::move(mlp)) {
    const std::string topology =
        o.topology.empty() ? std::string(descriptor.default_topology) : o.topology;
    overlay_ = std::make_unique<sgd::Overlay>(topology, o.seed, std::move(first));
    optimum_.assign(o.numel, 0.0);
    // The MLP's starting point, the same for every node (as every gossip-train's): drawn once.
    std::vector<float> mlp_start;
    if (mlp_) {
      mlp_start.resize(o.numel);
      mlp_->init(mlp_start);
    }
    nodes_.resize(o.nodes);
    ran_last_.assign(o.nodes, false);
    next_record_.assign(o.nodes, 0);
    next_come_back_.assign(o.nodes, TimePoint::min());
    come_back_wait_.assign(o.nodes, Duration::zero());
    std::vector<std::vector<uint32_t>> lists = peer_lists(o, overlay_->at(0));
    for (uint32_t i = 0; i < o.nodes; ++i) {
      Node& n = nodes_[i];
      status_ = build(i, lists[i]);
      std::vector<uint32_t>().swap(lists[i]);
      if (!status_) return;
      if (mlp_) {
        n.x = mlp_start;
      } else if (o.start_mode > 0) {
        // K i mod n before the division: exact phases at any n.
        const double node_phase =
            static_cast<double>(uint64_t{o.start_mode} * i % o.nodes) / o.nodes;
        n.x.resize(o.numel);
        for (size_t e = 0; e < o.numel; ++e) {
          const double phase = node_phase + static_cast<double>(e) / static_cast<double>(o.numel);
          n.x[e] = static_cast<float>(std::cos(2 * std::numbers::pi * phase));
          optimum_[e] += n.x[e];
        }
      } else {
        n.b.resize(o.numel);
        for (size_t e = 0; e < o.numel; ++e) {
          n.b[e] = static_cast<float>(o.heterogeneity * normal(o.seed, i, e));
          optimum_[e] += n.b[e];
        }
        // Training starts every replica from one point; consensus alone from the b_i.
        n.x = o.model == "mixing" ? n.b : std::vector<float>(o.numel, 0.0f);
        if (o.model == "mixing") std::vector<float>().swap(n.b);
      }
      if (descriptor.central_model) {
        n.learners.assign(o.params.learners_per_device, n.x);
        n.central = std::make_unique<sgd::CentralModel>(o.params.sma_alpha, o.sma_momentum);
      }
      if (mlp_) {
        // Each learner of SMA's is a trainer of its own, on a shard of its own (as each of
        // a gossipd's trainers is), at i K + j; otherwise the node's one, at i.
        std::vector<std::span<float>> replicas(n.learners.begin(), n.learners.end());
        if (replicas.empty()) replicas.push_back(n.x);
        for (size_t j = 0; j < replicas.size(); ++j)
          if (Status st = mlp_->attach(i * replicas.size() + j, replicas[j]); !st) {
            status_ = st;
            return;
          }
      }
    }
    for (double& v : optimum_) v /= o.nodes;
  }

  const Status& status() const { return status_; }

  // Node i's channel (to `peers`), router, exchange or ring, strategy and round deadline,
  // as the sync worker builds them: at the start, and again for a node that restarts.
  Status build(uint32_t i, const std::vector<uint32_t>& list) {
    Node& n = nodes_[i];
    n.channel = hub_.join(i, list);
    n.router = std::make_unique<peers::Router>(*n.channel);
    sgd::ExchangeLimits limits;
    limits.heartbeat = o_.heartbeat;
    limits.dead_after = peers::DeadAfter(o_.dead_after);
    limits.dead_after.factor = o_.dead_after_factor;
    limits.dead_after.floor = o_.dead_after_floor;
    limits.dead_after.ceiling = o_.round_timeout;
    limits.robust = o_.params.trim > 0 || o_.params.clip;
    limits.patience_factor = o_.patience_factor;
    limits.patience_floor = o_.patience_floor;
    const compression::Codec* codec = codec_.codec.get();
    sgd::StrategyResources r;
    if (descriptor_.fabric == sgd::Fabric::kServers) {
      // As the sync worker: the servers and workers talk over the node's router.
      r.router = n.router.get();
      r.error_feedback = codec_.error_feedback;
    } else if (descriptor_.fabric == sgd::Fabric::kOverlay) {
      n.exchange = std::make_unique<sgd::NeighborExchange>(*n.router, codec, nullptr, limits);
      n.exchange->watched_over(overlay_.get());
      r.exchange = n.exchange.get();
      r.overlay = overlay_.get();
    } else if (o_.transport == "allgather") {
      n.all_reduce = std::make_unique<sgd::AllGatherAllReduce>(
          *n.router, o_.chunk_elems * sizeof(float), codec, nullptr,
          static_cast<uint32_t>(o_.params.trim));
      r.all_reduce = n.all_reduce.get();
      r.error_feedback = codec_.error_feedback;
    } else {
      // As the sync worker makes it over TCP (daemon/sync_worker.cc).
      n.ring = ring_hub_.transport(i, &n.channel->traffic_counters());
      sgd::PeerRingOptions po;
      po.chunk_bytes = std::min<uint64_t>(o_.chunk_elems * sizeof(float), 1 << 20);
      po.elastic = o_.elastic;
      po.reform_wait = o_.dead_after;
      po.admit_joiners = descriptor_.takes_nodes_back;
      po.algorithm = o_.allreduce_algorithm == "auto"
                         ? std::nullopt
                         : sgd::parse_algorithm(o_.allreduce_algorithm);
      po.clip = o_.params.clip;
      if (po.clip) po.algorithm = sgd::Algorithm::kRing;
      n.all_reduce = std::make_unique<sgd::PeerRing>(*n.router, *n.ring, po);
      r.all_reduce = n.all_reduce.get();
      r.error_feedback = codec_.error_feedback;
    }
    r.gossip.patience = o_.patience;
    r.gossip.chunk_elems = o_.chunk_elems;
    r.gossip.compression.codec = codec;
    r.codec = codec;
    r.heartbeat = o_.heartbeat;
    r.dead_after = limits.dead_after;
    r.params = o_.params;
    std::string detail;
    auto strategy = descriptor_.make(r, &detail);
    if (!strategy) return strategy.status();
    n.strategy = std::move(strategy).value();
    const double factor = o_.round_timeout_factor >= 0 ? o_.round_timeout_factor
                          : descriptor_.fabric == sgd::Fabric::kOverlay
                              ? sgd::RoundDeadline::kGossipFamilyFactor
                              : 0.0;
    n.deadline =
        std::make_unique<sgd::RoundDeadline>(o_.round_timeout, factor, o_.round_timeout_floor);
    n.strategy->set_layout_fingerprint(kLayout);
    return Status::ok();
  }

  Report run(const std::function<void(const RoundRow&)>& progress) {
    progress_ = &progress;
    const auto real_start = std::chrono::steady_clock::now();
    std::vector<SimClock::Task> tasks;
    report_.finished.assign(o_.nodes, {});
    running_ = o_.nodes;
    training_ = o_.nodes;
    for (uint32_t i = 0; i < o_.nodes; ++i)
      tasks.push_back({fmt::format("node {}", i), [this, i] { run_node(i); }});
    clock_.run(std::move(tasks));
    // Rounds that not every node finished (a node failed): what the others had.
    while (!sums_.empty()) finish(sums_.begin());
    if (mlp_) evaluate_mean();
    report_.virtual_s = seconds(clock_.elapsed());
    report_.real_s = seconds(std::chrono::steady_clock::now() - real_start);
    report_.events = clock_.events();
    report_.wire_bytes = retired_wire_;
    report_.messages = retired_messages_;
    for (const Node& n : nodes_) {
      const auto t = n.channel->traffic().totals();
      report_.wire_bytes += t.wire_sent;
      report_.messages += t.msgs_sent;
    }
    return std::move(report_);
  }

 private:
  // --churn: when node i dies in its life `life` (0: from the start; k: since its k-th
  // restart), an exponential draw of mean 100 / churn minutes from now.
  TimePoint death_time(uint32_t i, uint64_t life) const {
    if (o_.churn_per_minute <= 0) return TimePoint::max();
    SplitMix64 g = SplitMix64::keyed(o_.seed ^ 0x636875726e, i, life);
    const double minutes = -std::log(open_unit(g)) * 100.0 / o_.churn_per_minute;
    if (minutes > 1e6) return TimePoint::max();
    return clock_.now() +
           std::chrono::duration_cast<Duration>(std::chrono::duration<double>(minutes * 60.0));
  }

  // What keeps node i's membership and offers its state to restarted peers, as the
  // sync worker's membership_: the gossip family's exchange, or the elastic ring.
  sgd::Membership* membership(Node& n) const {
    if (n.exchange) return n.exchange.get();
    return dynamic_cast<sgd::PeerRing*>(n.all_reduce.get());
  }

  // --rejoin-after: node i comes back as a restarted gossipd does, a new process with
  // the same id: empty queues, fresh per-peer state, and the model of a live peer
  // (sgd/membership/state_transfer.h) before the round that peer is at, which it
  // returns. Into an elastic ring it asks back in after the fetch, and when the members
  // went on meanwhile, fetches again from them (daemon/sync_worker.cc, fetch_state).
  Result<uint64_t> restart(uint32_t i) {
    Node& n = nodes_[i];
    const auto t = n.channel->traffic().totals();
    retired_wire_ += t.wire_sent;
    retired_messages_ += t.msgs_sent;
    n.wire_before += t.wire_sent;
    n.strategy.reset();
    n.deadline.reset();
    n.exchange.reset();
    n.all_reduce.reset();
    n.ring.reset();
    n.router.reset();
    n.channel.reset();
    hub_.restart(i);
    std::vector<uint32_t> list;
    list.reserve(o_.nodes - 1);
    for (uint32_t j = 0; j < o_.nodes; ++j)
      if (j != i) list.push_back(j);
    GOSSIP_RETURN_IF_ERROR(build(i, list));
    // A new process: its sync worker has not backed off from anything yet.
    next_come_back_[i] = TimePoint::min();
    come_back_wait_[i] = Duration::zero();
    auto fetched = fetch_state(n, 0);
    if (!fetched) return fetched.status().with_context("restarted: fetching a peer's state");
    if (!*fetched) return Status::timeout("restarted, but no peer offered its state");
    membership(n)->joined(true);
    take_state(n, **fetched);
    return (*fetched)->round;
  }

  // A live peer's state, and into an elastic ring, back in: after the fetch it asks in,
  // and when the members went on meanwhile, fetches again from them, as gossipd's sync
  // worker does (daemon/sync_worker.cc, fetch_state). nullopt: no peer offered one.
  Result<std::optional<sgd::NodeState>> fetch_state(Node& n, uint64_t next_round) {
    sgd::Membership& members = *membership(n);
    sgd::JoinOptions jo;
    jo.trim = o_.params.trim;
    jo.deadline = clock_.now() + o_.round_timeout;
    jo.tick = [&members, next_round] { members.tick(next_round); };
    sgd::StateTransfer& transfer = *members.state();
    const size_t shared = n.strategy->shared_state_numel(n.x.size());
    auto fetched = transfer.fetch(n.x.size(), shared, kLayout, jo);
    if (!fetched || !*fetched) return fetched;
    auto members_next = members.rejoin((*fetched)->round, jo.deadline, nullptr);
    if (!members_next) {
      spdlog::warn("{}", members_next.status().message());
    } else if (*members_next) {
      jo.min_round = (*fetched)->round;
      jo.only = members.members();
      if (auto fresher = transfer.fetch(n.x.size(), shared, kLayout, jo); fresher && *fresher)
        return fresher;
    }
    return fetched;
  }

  // Into the replicas' own buffers: the MLP's trainers view them (sim/mlp.h). SMA's
  // learners start from it too, under a central model of its own, as a restarted
  // daemon's do.
  void take_state(Node& n, const sgd::NodeState& state) {
    std::copy(state.model.begin(), state.model.end(), n.x.begin());
    for (auto& learner : n.learners) std::copy(n.x.begin(), n.x.end(), learner.begin());
    if (n.central)
      n.central = std::make_unique<sgd::CentralModel>(o_.params.sma_alpha, o_.sma_momentum);
    n.strategy->took_model(n.x, state.shared);
    report_.state_bytes += (n.x.size() + state.shared.size()) * sizeof(float);
  }

  // After a round in which the elastic ring left node i out (it came back while the
  // members re-formed without it, say): a member's state, and back in, as the sync
  // worker's come_back does, at once and then after a doubling wait. The state, when
  // one was taken (it is the caller's to take).
  std::optional<sgd::NodeState> come_back(uint32_t i, uint64_t ran) {
    Node& n = nodes_[i];
    sgd::Membership* members = membership(n);
    if (!members || !members->left_out() || clock_.now() < next_come_back_[i]) return std::nullopt;
    auto fetched = fetch_state(n, ran + 1);
    const bool took = fetched && *fetched;
    if (!took || members->left_out()) {
      const Duration offer_wait = sgd::JoinOptions{}.offer_wait;
      come_back_wait_[i] = std::min<Duration>(
          std::max<Duration>(2 * come_back_wait_[i], 2 * offer_wait), std::chrono::seconds(60));
      next_come_back_[i] = clock_.now() + come_back_wait_[i];
    } else {
      come_back_wait_[i] = Duration::zero();
    }
    if (!took) return std::nullopt;
    ++report_.came_back;
    return std::move(**fetched);
  }

  void run_node(uint32_t i) {
    struct Ends {
      uint32_t& running;
      ~Ends() { --running; }
    } ends{running_};
    train(i);
    --training_;
    // A parameter server whose own rounds are done still serves its shard to the
    // workers that are not, as a gossipd whose trainer has finished still answers.
    if (descriptor_.fabric == sgd::Fabric::kServers && ran_last_[i])
      while (training_ > 0) nodes_[i].strategy->progress(o_.rounds, nodes_[i].x.size(), 20ms);
  }

  // Node i's rounds, to the last or to its death (or a failure, in the report).
  void train(uint32_t i) {
    Node& n = nodes_[i];
    const float lr = static_cast<float>(o_.lr > 0 ? o_.lr : 0.1);
    uint64_t life = 0;
    TimePoint dies_at = death_time(i, life);
    const auto killed = o_.deaths.find(i);
    for (uint64_t r = 0; r < o_.rounds;) {
      // Before round r: a --kill (in the node's first life) or its churn's time.
      if ((life == 0 && killed != o_.deaths.end() && killed->second == r) ||
          clock_.now() >= dies_at) {
        ++report_.died;
        report_.death_s.push_back(seconds(clock_.elapsed()));
        hub_.cut(i, o_.dies_as == "process");
        ring_hub_.cut(i);
        const size_t away = away_.size();
        away_.push_back({r, UINT64_MAX});  // rounds from r on lack it
        // Rounds the survivors had all finished wait no longer for this node.
        finish_complete();
        if (!o_.rejoin_after) return;
        const TimePoint down = clock_.now();
        ++asleep_;
        clock_.sleep_until(down + *o_.rejoin_after);
        --asleep_;
        // Every other node is done or down: the run is over, and no one could offer a
        // model (a finished node's daemon answers no more in the simulation).
        if (running_ - asleep_ == 1) return;
        auto back = restart(i);
        if (!back) {
          // Some node has run the last round: the others finish while this one comes
          // back, and a finished node's daemon answers no more here, so its peers' offers
          // (or chunks) do not come in time. It stays down, as one that died at the end,
          // and the summary counts it. Any other failure, or one before then, is one.
          if (back.status().code() == Status::Code::kTimeout &&
              std::find(ran_last_.begin(), ran_last_.end(), true) != ran_last_.end()) {
            ++report_.restarts_too_late;
            return;
          }
          report_.failures.push_back(fmt::format("node {}: {}", i, back.status().message()));
          return;
        }
        // Runs from the round its state came before: the rounds' rows count it again.
        away_[away].second = std::max(*back, r);
        ++report_.rejoined;
        rejoined_at_[i] = down + *o_.rejoin_after;
        r = *back;
        dies_at = death_time(i, ++life);
        continue;
      }
      double loss = 0;
      if (mlp_) {
        // The round's loss: the mean of its trainers' (SMA's learners').
        const size_t k = std::max<size_t>(1, n.learners.size());
        for (size_t j = 0; j < k; ++j) loss += mlp_->step(i * k + j);
        loss /= static_cast<double>(k);
      }
      if (n.central) {
        for (uint32_t j = 0; j < n.learners.size(); ++j)
          local_step(n.learners[j], n.b, i, j, r, lr);
      } else {
        local_step(n.x, n.b, i, 0, r, lr);
      }
      // The step's compute, while the node answers its peers as the sync worker does
      // between jobs.
      Duration busy = o_.step_time;
      if (const auto it = o_.slow.find(i); it != o_.slow.end())
        busy = std::chrono::duration_cast<Duration>(busy * it->second);
      for (const auto& p : o_.pauses)
        if (p.node == i && p.round == r) busy += p.length;
      const TimePoint computed = clock_.now() + busy;
      while (clock_.now() < computed)
        n.strategy->progress(r, n.x.size(),
                             std::chrono::ceil<std::chrono::milliseconds>(
                                 std::min<Duration>(computed - clock_.now(), 20ms)));
      // As the sync worker: a node whose neighbors have all moved on (it was away, or
      // cut off) skips to their round rather than run its way there alone.
      bool jumped = false;
      if (const uint64_t to = n.strategy->round_to_run(r); to > r) {
        away_.push_back({r, to});
        finish_complete();
        r = to;
        jumped = true;
        if (r >= o_.rounds) return;
      }
      sgd::RoundOptions ro;
      const auto allowed = n.deadline->next();
      ro.deadline = clock_.now() + std::chrono::duration_cast<Duration>(allowed);
      const TimePoint began = clock_.now();
      // SMA's round runs on the central model, moved by its learners first and
      // followed by them after, as the daemon does (daemon/rounds.cc).
      std::span<float> model = n.x;
      std::vector<std::span<float>> learners(n.learners.begin(), n.learners.end());
      if (n.central) model = n.central->update(learners);
      if (Status st = n.strategy->synchronize(model, r, ro); !st) {
        if (n.deadline->adapting())
          st = st.with_context(sgd::RoundDeadline::failure_context(allowed));
        report_.failures.push_back(fmt::format("node {}: round {}: {}", i, r, st.message()));
        return;
      }
      n.deadline->completed(clock_.now() - began);
      // A node the elastic ring left out asks back in, and the member's model it takes
      // is the round's result, that of the round before the members' next (the sync
      // worker's come_back, before after_round).
      uint64_t result = r;
      bool came_back = false;
      if (o_.rejoin_after) {
        if (auto state = come_back(i, r)) {
          std::copy(state->model.begin(), state->model.end(), model.begin());
          n.strategy->took_model(model, state->shared);
          result = state->round - 1;
          came_back = true;
          // Rounds from this one to the result's that it did not run with them.
          if (result > r) {
            away_.push_back({r, result});
            finish_complete();
          }
        }
      }
      if (n.central) {
        // The round's result is a later round's (the node skipped to its neighbors'
        // round, or an elastic ring handed it the members' model): the central model is
        // theirs, and its momentum starts again from it, as the daemon's does.
        if (jumped || came_back || n.strategy->round_to_run(r + 1) > r + 1) n.central->took(model);
        n.central->correct(learners);
        std::copy(model.begin(), model.end(), n.x.begin());
      }
      record(i, result, loss);
      // What a restarted peer takes, as gossipd's sync worker offers it after a round.
      if (o_.rejoin_after)
        membership(n)->state()->publish(n.x, n.strategy->shared_state(), result + 1, result + 1,
                                        1.0, kLayout, o_.chunk_elems);
      r = result + 1;
    }
  }

  // A local step of replica x (learner `learner` of node i) on f_i(x) = |x - b_i|^2 / 2,
  // with the gradient's noise: each learner draws its own (learner 0 as a node without
  // learners does, so SMA with one learner is local SGD exactly).
  void local_step(std::vector<float>& x, const std::vector<float>& b, uint32_t i, uint32_t learner,
                  uint64_t r, float lr) const {
    if (b.empty()) return;  // mixing, or the MLP (its step is mlp_->step)
    if (o_.noise > 0) {
      const uint64_t key = o_.seed ^ 0x6e6f ^ (learner * 0x9e3779b97f4a7c15ULL);
      for (size_t e = 0; e < x.size(); ++e) {
        float g = x[e] - b[e];
        g += static_cast<float>(o_.noise * normal(key, i, r * o_.numel + e));
        x[e] -= lr * g;
      }
    } else {
      // Without noise, a loop the compiler vectorizes (the branch above kept it scalar).
      for (size_t e = 0; e < x.size(); ++e) x[e] -= lr * (x[e] - b[e]);
    }
  }

  // The mean of the replicas of the nodes that ran the last round, on the test set.
  void evaluate_mean() {
    std::vector<float> mean(o_.numel, 0.0f);
    uint32_t count = 0;
    for (uint32_t i = 0; i < o_.nodes; ++i) {
      if (!ran_last_[i]) continue;
      for (size_t e = 0; e < mean.size(); ++e) mean[e] += nodes_[i].x[e];
      ++count;
    }
    if (count == 0) return;
    for (float& v : mean) v /= static_cast<float>(count);
    const trainer::Evaluation ev = mlp_->evaluate(mean);
    report_.test_accuracy = ev.accuracy;
    report_.test_loss = ev.loss;
  }

  // Tasks run one at a time: no lock.
  void record(uint32_t i, uint64_t r, double loss) {
    const Node& n = nodes_[i];
    if (const auto it = rejoined_at_.find(i); it != rejoined_at_.end()) {
      report_.rejoin_s.push_back(seconds(clock_.now() - it->second));
      rejoined_at_.erase(it);
    }
    // A restarted node whose state came from a peer behind it runs rounds it had run
    // before it died: each counts once. (And a row that went out stays out: a guard.)
    if (r < next_record_[i] || r < next_row_) return;
    next_record_[i] = r + 1;
    if (r + 1 == o_.rounds) ran_last_[i] = true;
    RoundSums& s = sums_[r];
    if (s.deviation.empty()) s.deviation.assign(o_.numel, 0.0);
    // Eight partial sums: one running sum is a chain of dependent adds, which neither
    // vectorizes nor pipelines (a tenth of a 1,000-node round).
    constexpr size_t kLanes = 8;
    double sq[kLanes] = {};
    const size_t numel = n.x.size();
    size_t e = 0;
    for (; e + kLanes <= numel; e += kLanes)
      for (size_t l = 0; l < kLanes; ++l) {
        const double d = n.x[e + l] - optimum_[e + l];
        s.deviation[e + l] += d;
        sq[l] += d * d;
      }
    for (; e < numel; ++e) {
      const double d = n.x[e] - optimum_[e];
      s.deviation[e] += d;
      sq[0] += d * d;
    }
    for (double v : sq) s.squares += v;
    s.loss += loss;
    ++s.nodes;
    s.last_time_s = seconds(clock_.elapsed());
    report_.finished[i].push_back(s.last_time_s);
    s.wire += n.wire_before + n.channel->traffic().totals().wire_sent;
    finish_complete();
  }

  // The nodes that run round r: those not away then (dead, or not back yet).
  uint32_t runners(uint64_t r) const {
    uint32_t n = o_.nodes;
    for (const auto& [from, back] : away_) n -= from <= r && r < back ? 1 : 0;
    return n;
  }

  // Rows go out in round order: a round waits for the slowest node of those before it.
  void finish_complete() {
    while (!sums_.empty() && sums_.begin()->second.nodes >= runners(sums_.begin()->first))
      finish(sums_.begin());
  }

  void finish(std::map<uint64_t, RoundSums>::iterator it) {
    const RoundSums& s = it->second;
    RoundRow row;
    row.round = it->first;
    row.nodes = s.nodes;
    row.time_s = s.last_time_s;
    double mean_sq = 0;
    for (double d : s.deviation) {
      const double m = d / s.nodes;
      mean_sq += m * m;
    }
    const double numel = static_cast<double>(o_.numel);
    // |x_i - mean|^2 summed = sum |x_i - x*|^2 - n |mean - x*|^2, per element.
    row.consensus = std::max(0.0, (s.squares - s.nodes * mean_sq) / (s.nodes * numel));
    row.suboptimality = mean_sq / numel;
    row.wire_bytes_per_node = static_cast<double>(s.wire) / s.nodes;
    row.train_loss = s.loss / s.nodes;
    report_.rounds.push_back(row);
    next_row_ = row.round + 1;
    if (*progress_) (*progress_)(row);
    sums_.erase(it);
  }

  WorldOptions o_;
  const sgd::StrategyDescriptor& descriptor_;
  SimClock clock_;        // before the hub: deliveries it holds refer to the hub
  peers::MemoryHub hub_;  // outlives the channels
  peers::MemoryRingHub ring_hub_;
  compression::CodecSpec codec_;
  std::unique_ptr<MlpCluster> mlp_;  // --model mlp; before the nodes, whose replicas it views
  std::unique_ptr<sgd::Overlay> overlay_;
  std::vector<Node> nodes_;
  std::vector<double> optimum_;
  std::map<uint64_t, RoundSums> sums_;  // rounds not every live node finished yet
  uint64_t next_row_ = 0;               // rows out so far
  // The rounds a node did not run: [the round it died before, the round it came back
  // before), UINT64_MAX while it is away; or the rounds it skipped to catch up.
  std::vector<std::pair<uint64_t, uint64_t>> away_;
  std::map<uint32_t, TimePoint> rejoined_at_;  // restarted, first round not finished yet
  std::vector<bool> ran_last_;                 // finished the last round
  // --rejoin-after in an elastic ring: when a node left out asks back in next, and the
  // wait after that try (sync worker's come_back).
  std::vector<TimePoint> next_come_back_;
  std::vector<Duration> come_back_wait_;
  std::vector<uint64_t> next_record_;  // per node: the rounds below it are counted
  uint32_t running_ = 0;               // nodes whose task has not ended
  uint32_t training_ = 0;              // nodes whose rounds have not ended (run, died or failed)
  uint32_t asleep_ = 0;                // of them, dead and waiting to restart
  uint64_t retired_wire_ = 0, retired_messages_ = 0;  // restarted nodes' old channels
  Report report_;
  const std::function<void(const RoundRow&)>* progress_ = nullptr;
  Status status_ = Status::ok();
};

}  // namespace

Result<Report> simulate(const WorldOptions& o,
                        const std::function<void(const RoundRow&)>& progress) {
  if (o.nodes < 2) return Status::invalid(fmt::format("--nodes {}: at least 2", o.nodes));
  if (o.numel == 0) return Status::invalid("--numel 0: the model needs an element");
  for (const auto& [node, round] : o.deaths)
    if (node >= o.nodes)
      return Status::invalid(fmt::format("--kill {}@{}: there is no node {}", node, round, node));
  if (o.dies_as != "process" && o.dies_as != "machine")
    return Status::invalid(fmt::format("--dies-as '{}': process or machine", o.dies_as));
  if (!(o.churn_per_minute >= 0 && o.churn_per_minute <= 100))
    return Status::invalid(
        fmt::format("--churn {}: a percentage from 0 to 100", o.churn_per_minute));
  for (const peers::Outage& p : o.links.outages) {
    if (p.until <= p.from || p.side.empty())
      return Status::invalid(
          "--partition: a side of at least one node, and an end after its start");
    for (uint32_t node : p.side)
      if (node >= o.nodes)
        return Status::invalid(fmt::format("--partition: there is no node {}", node));
  }
  const double step_s = std::chrono::duration<double>(o.step_time).count();
  if (!(step_s >= 0 && step_s <= 1e6))
    return Status::invalid(fmt::format("--step-time-ms {}: from 0 to 1e9", step_s * 1e3));
  for (const auto& [node, factor] : o.slow)
    if (node >= o.nodes || !(factor >= 0 && factor <= 1e6) || step_s * factor > 1e6)
      return Status::invalid(
          fmt::format("--slow {}:{}: a node below {}, and a factor between 0 and 1e6 whose "
                      "steps take at most 1e6 s",
                      node, factor, o.nodes));
  for (const auto& p : o.pauses)
    if (p.node >= o.nodes)
      return Status::invalid(
          fmt::format("--pause {}@{}: there is no node {}", p.node, p.round, p.node));
  if (o.heartbeat.count() <= 0)
    return Status::invalid(fmt::format("--heartbeat {} ms: above 0", o.heartbeat.count()));
  if (o.model != "quadratic" && o.model != "mixing" && o.model != "mlp")
    return Status::invalid(fmt::format("--model '{}': one of quadratic, mixing, mlp", o.model));
  if (o.start_mode > 0 && (o.model != "mixing" || o.start_mode > o.nodes / 2))
    return Status::invalid(
        fmt::format("--start-mode {}: with --model mixing only, and at most half the nodes ({})",
                    o.start_mode, o.nodes / 2));
  if (!(o.lr >= 0 && o.lr < 10))
    return Status::invalid(fmt::format("--lr {}: from 0 (the model's) to 10", o.lr));
  const sgd::StrategyDescriptor* descriptor = sgd::find_strategy(o.strategy);
  if (!descriptor)
    return Status::invalid(fmt::format("--strategy '{}': no such strategy", o.strategy));
  // As gossipd refuses it (daemon/config_check.cc): where heartbeats are what the bound
  // watches.
  if (descriptor->fabric != sgd::Fabric::kAllReduce && o.dead_after < 2 * o.heartbeat)
    return Status::invalid(fmt::format("--dead-after {} ms: at least two heartbeats ({} ms each)",
                                       o.dead_after.count(), o.heartbeat.count()));
  if (o.rejoin_after) {
    const double s = std::chrono::duration<double>(*o.rejoin_after).count();
    if (!(s >= 0 && s <= 1e6))
      return Status::invalid(fmt::format("--rejoin-after {}: from 0 to 1e6 seconds", s));
    const bool ring_takes_back = descriptor->fabric == sgd::Fabric::kAllReduce &&
                                 descriptor->takes_nodes_back && o.elastic && o.transport == "tcp";
    if (descriptor->fabric != sgd::Fabric::kOverlay && !ring_takes_back)
      return Status::invalid(fmt::format(
          "--rejoin-after with --strategy {}: the gossip family, or local SGD and SMA on an "
          "elastic ring (--elastic on, --transport tcp), which take a restarted node back "
          "(a parameter server's restart is not simulated)",
          o.strategy));
    if (o.deaths.empty() && o.churn_per_minute <= 0)
      return Status::invalid("--rejoin-after: nothing dies (--kill, --churn)");
  }
  if (o.params.learners_per_device < 1 || o.params.learners_per_device > 64)
    return Status::invalid(fmt::format("--learners-per-device {}: from 1 to 64 (as gossipd's)",
                                       o.params.learners_per_device));
  // As gossipd refuses them (daemon/config_check.cc): another strategy's options.
  const sgd::ParameterServerOptions ps_defaults;
  if (!descriptor->takes("servers") &&
      (o.params.ps.servers != ps_defaults.servers || o.params.ps.replicas != ps_defaults.replicas ||
       o.params.ps.mode != ps_defaults.mode || o.params.ps.fetch != ps_defaults.fetch ||
       o.params.ps.optimizer.kind != ps_defaults.optimizer.kind ||
       o.params.ps.optimizer.lr != ps_defaults.optimizer.lr ||
       o.params.ps.optimizer.momentum != ps_defaults.optimizer.momentum))
    return Status::invalid(
        fmt::format("--servers, --ps-replicas, --ps-mode, --ps-fetch, --ps-optimizer, --ps-lr and "
                    "--ps-momentum are the parameter servers' (--strategy ps), not {}'s",
                    o.strategy));
  if (!descriptor->takes("sma") && (o.params.sma_alpha != 0 || o.sma_momentum != 0))
    return Status::invalid(
        fmt::format("--sma-alpha and --sma-momentum are sma's, not {}'s", o.strategy));
  if (o.params.learners_per_device > 1 && !descriptor->central_model)
    return Status::invalid(fmt::format(
        "--learners-per-device {} with --strategy {}: sma's option (its learners follow a "
        "central model; a simulated node of the others has one replica)",
        o.params.learners_per_device, o.strategy));
  if (!(o.sma_momentum >= 0 && o.sma_momentum < 1))
    return Status::invalid(fmt::format("--sma-momentum {}: in [0, 1)", o.sma_momentum));
  if (!(o.params.sma_alpha >= 0))  // the top is the strategy's check, with the learners
    return Status::invalid(
        fmt::format("--sma-alpha {}: 0 (1 / the learners) or more", o.params.sma_alpha));
  // The strategy's own checks, as gossipd makes them; named by the flag (a config key
  // strategy.sma_alpha is --sma-alpha here, as it is gossipd's).
  if (descriptor->check)
    if (auto problem = descriptor->check(o.params, o.nodes)) {
      std::string flag = problem->key;
      if (flag.starts_with("strategy.")) flag = "--" + flag.substr(9);
      std::replace(flag.begin(), flag.end(), '_', '-');
      return Status::invalid(fmt::format("{}: {}", flag, problem->message));
    }
  if (descriptor->fabric == sgd::Fabric::kAllReduce) {
    if (o.transport != "tcp" && o.transport != "allgather")
      return Status::invalid(fmt::format(
          "--transport '{}': tcp (the ring's all-reduces, over the simulated links) or allgather",
          o.transport));
    if (o.allreduce_algorithm != "auto" && !sgd::parse_algorithm(o.allreduce_algorithm))
      return Status::invalid(
          fmt::format("--allreduce-algorithm '{}': ring, tree, butterfly, master or auto",
                      o.allreduce_algorithm));
    if (o.transport == "tcp" && o.nodes > sgd::RingSchedule::kMaxRanks)
      return Status::invalid(fmt::format("--nodes {}: the all-reduces over tcp take at most {}",
                                         o.nodes, sgd::RingSchedule::kMaxRanks));
  }
  auto codec = compression::make_codec(o.codec);
  if (!codec) return codec.status().with_context("--codec");
  const std::string spec =
      o.topology.empty() ? std::string(descriptor->default_topology) : o.topology;
  auto topology = peers::make_topology(spec, o.nodes, o.seed);
  if (!topology) return topology.status().with_context("--topology");
  // Every node keeps a row for every peer (its channel's peer list and traffic counters):
  // measured at 4,096 nodes, about 330 bytes a pair, besides the replicas. Refused, once
  // the options are valid, when that is more than the machine's memory, rather than left
  // to the kernel's killer.
  if (o.peer_lists != "all" && o.peer_lists != "graph")
    return Status::invalid(fmt::format("--peer-lists '{}': all or graph", o.peer_lists));
  if (o.peer_lists == "graph" &&
      (descriptor->fabric != sgd::Fabric::kOverlay || (*topology)->period() == 0 ||
       !o.deaths.empty() || o.churn_per_minute > 0))
    return Status::invalid(
        "--peer-lists graph: the gossip family on a graph that repeats, without --kill or "
        "--churn (a node that dies would make a node that lists only its neighbors a "
        "coordinator, which beats every member)");
  const double pairs = o.peer_lists == "graph"
                           ? 2.0 * o.nodes *
                                 (2.0 + 2.0 * static_cast<double>((*topology)->period()) *
                                            (*topology)->out_neighbors(0, 0).size())
                           : static_cast<double>(o.nodes) * o.nodes;
  // A trainer a node, or one a learner of SMA's (each on a shard of its own).
  const uint64_t trainers =
      uint64_t{o.nodes} * (descriptor->central_model ? o.params.learners_per_device : 1);
  if (o.model == "mlp" && trainers > MlpCluster::kMaxBatch)
    return Status::invalid(fmt::format(
        "--nodes {} x --learners-per-device {}: {} trainers of the MLP, but Fashion-MNIST's "
        "training set has {} images to give each a shard",
        o.nodes, o.params.learners_per_device, trainers, MlpCluster::kMaxBatch));
  const double numel = static_cast<double>(o.model == "mlp" ? MlpCluster::numel() : o.numel);
  // A replica, its optimum and the strategy's buffers, about 16 bytes an element; SMA's
  // learners and the central model's two copies besides; an MLP trainer's gradients,
  // momentum and scratch (3 floats an element) and its batch's images and activations.
  const double copies = descriptor->central_model ? 4.0 * (o.params.learners_per_device + 2) : 0;
  // (A batch past the training set is refused by name below: not counted past it here.)
  const double batch = static_cast<double>(std::min(o.mlp.batch, MlpCluster::kMaxBatch));
  const double trained =
      o.model == "mlp" ? static_cast<double>(trainers) * (12.0 * numel + 4.0 * batch * (784 + 788))
                       : 0;
  const double need = pairs * kBytesPerNodePair + (16.0 + copies) * o.nodes * numel + trained;
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (have > 0 && need > have)
    return Status::invalid(fmt::format(
        "--nodes {}: about {:.1f} GB ({} bytes for each pair of nodes, and the replicas and "
        "trainers), more than this machine's {:.1f} GB",
        o.nodes, need / 1e9, kBytesPerNodePair, have / 1e9));
  WorldOptions with = o;
  std::unique_ptr<MlpCluster> mlp;
  if (o.model == "mlp") {
    with.mlp.lr = o.lr > 0 ? static_cast<float>(o.lr) : with.mlp.lr;
    with.mlp.seed = o.seed;
    auto loaded = MlpCluster::load(with.mlp, static_cast<uint32_t>(trainers));
    if (!loaded) return loaded.status();
    mlp = std::move(loaded).value();
    with.numel = MlpCluster::numel();
  }
  World world(with, *descriptor, std::move(topology).value(), std::move(codec).value(),
              std::move(mlp));
  if (!world.status().is_ok()) return world.status();
  return world.run(progress);
}

}  // namespace gossip::sim

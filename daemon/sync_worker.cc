#include "daemon/sync_worker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "base/failures.h"
#include "base/version.h"
#include "peers/curve_auth.h"
#include "peers/mixing_matrix.h"
#include "sgd/collectives/all_gather_all_reduce.h"
#include "sgd/membership/peer_ring.h"
#include "sgd/registry.h"
#ifdef GOSSIP_WITH_NCCL
#include "sgd/collectives/nccl/nccl_peer_group.h"
#endif
#include <spdlog/spdlog.h>

namespace gossip::daemon {

Result<std::unique_ptr<SyncWorker>> SyncWorker::start(const DaemonConfig& config,
                                                      const DaemonHooks& hooks,
                                                      const Checkpoint* resume) {
  std::unique_ptr<SyncWorker> w(new SyncWorker());
  std::vector<peers::Peer> remote;
  for (const auto& p : config.remote_peers())
    remote.push_back({p.id, p.endpoint, p.public_key, p.banned});
  peers::TransportOptions to;
  to.secret_key = config.secret_key;
  to.run_id = config.run_id;
  if (!config.admit_keys.empty()) {
    auto keys = read_admit_keys(config.admit_keys);
    if (!keys) return keys.status();
    to.admit_keys = std::move(keys).value();
  }
  auto transport = peers::ZmqTransport::create(config.node_id, config.listen, remote, to);
  if (!transport) return transport.status();
  w->zmq_ = transport->get();
  w->transport_ = std::move(transport).value();
  if (hooks.wrap_channel) w->transport_ = hooks.wrap_channel(std::move(w->transport_));
  w->router_ = std::make_unique<peers::Router>(*w->transport_);
  w->initial_ =
      std::make_unique<sgd::InitialModel>(*w->router_, config.strategy.chunk_bytes / sizeof(float));
  auto codec = compression::make_codec(config.strategy.codec);
  if (!codec) return codec.status();
  w->codec_ = std::move(codec).value();
  if (config.strategy.tuned()) GOSSIP_RETURN_IF_ERROR(w->make_tuner(config));
  Inspector::Options io;
  io.version = kVersion;
  io.strategy = config.strategy.name;
  io.curve = !config.secret_key.empty();
  SyncWorker* self = w.get();
  w->inspector_ = std::make_unique<Inspector>(*w->router_, *w->transport_, std::move(io),
                                              [self] { return self->member_status(); });
  // Whoever polls (a round that waits, the idle loop), gossipctl's questions move on.
  w->router_->set_after_poll([self] {
    self->apply_bans();
    self->serve_inspector();
    if (self->admission_) self->admission_->tick();
  });
  if (config.strategy.codec_threads > 1)
    w->pool_ = std::make_unique<compression::ThreadPool>(config.strategy.codec_threads);
  GOSSIP_RETURN_IF_ERROR(w->make_strategy(config, hooks));
  w->peers_copy_ = w->transport_->peers();
  Admission::Options ao;
  ao.self_endpoint = config.listen;
  ao.dead_after =
      std::chrono::milliseconds(static_cast<int64_t>(config.strategy.dead_after_s * 1000.0));
  ao.needs_majority = config.join_quorum == "majority";
  ao.curve = !config.secret_key.empty();
  ao.joiner = !config.join.empty();
  if (ao.curve) {
    auto pub = peers::curve_public_of(config.secret_key);
    if (!pub) return pub.status();
    ao.self_key = *pub;
  }
  if (!w->membership_ || !w->membership_->takes_new_members())
    ao.refuse = fmt::format(
        "node {} runs {}{}: only the gossip family, local SGD and SMA on an elastic ring "
        "(--elastic) and the parameter servers (where --servers + --ps-replicas is at most "
        "the node count) take new members yet",
        config.node_id, config.strategy.name, w->membership_ ? "" : " on a fabric without churn");
  ao.check = [self](uint32_t id) {
    return self->overlay_ ? self->overlay_->check_grow(id + 1) : Status::ok();
  };
  ao.take = [self](uint32_t id, const std::string& endpoint) {
    if (!self->membership_) return Status::invalid("this node's fabric takes no new members");
    GOSSIP_RETURN_IF_ERROR(self->membership_->add_member(id, endpoint));
    std::lock_guard lock(self->peers_mu_);
    self->peers_copy_ = self->transport_->peers();
    return Status::ok();
  };
  if (w->overlay_) {
    // A few rounds past this node's: the members ahead of it by up to the graph's
    // diameter (fewer than n rounds), and 200 ms worth, so that the add reaches every
    // member before it runs that round (one that hears of it later waits a patience
    // for a neighbor that moved to the new graph).
    ao.first_round = [self] {
      const uint64_t n = self->transport_->peers().size() + 1;
      const uint64_t slack =
          self->last_round_ms_ > 0
              ? static_cast<uint64_t>(std::ceil(200.0 / std::max(self->last_round_ms_, 1.0)))
              : 0;
      return self->next_round_ + n + 4 + std::min<uint64_t>(slack, 128);
    };
    ao.schedule = [self](uint32_t id, uint64_t round) {
      if (auto st = self->overlay_->grow(id + 1, round); !st) {
        spdlog::error("node {} cannot take part from round {}: {}", id, round, st.message());
        return;
      }
      self->exchange_->schedule(id, round);
      if (round < self->next_round_)
        spdlog::warn(
            "node {} takes part from round {}, which this node has run: its graph changes at "
            "round {}",
            id, round, self->next_round_);
    };
  }
  w->joined_by_seeds_ = !config.join.empty();
  w->period_ = std::max<uint64_t>(config.strategy.period, 1);
  w->admission_ = std::make_unique<Admission>(*w->router_, std::move(ao));
  if (resume) w->admission_->remember(resume->members, resume->forgotten);
  w->round_timeout_ =
      std::chrono::milliseconds(static_cast<int64_t>(config.strategy.round_timeout_s * 1000.0));
  w->round_deadline_ = std::make_unique<sgd::RoundDeadline>(
      sgd::RoundDeadline::Duration(config.strategy.round_timeout_s),
      config.strategy.round_timeout_factor_in_force(),
      sgd::RoundDeadline::Duration(config.strategy.round_timeout_floor_s));
  w->node_ = config.node_id;
  w->strategy_name_ = config.strategy.name;
  if (const auto* d = sgd::find_strategy(config.strategy.name))
    w->model_is_gradient_ = d->gradients;
  w->chunk_elems_ = config.strategy.chunk_bytes / sizeof(float);
  w->join_options_.offer_wait =
      std::chrono::milliseconds(static_cast<int64_t>(config.strategy.join_wait_s * 1000.0));
  w->join_options_.max_donors = config.strategy.join_donors;
  w->join_options_.trim = config.strategy.trim;
  w->join_options_.max_weight = static_cast<double>(config.nodes());
  w->done_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  w->inspect_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->done_fd_ < 0 || w->inspect_fd_ < 0)
    return Status::io_error(fmt::format("eventfd: {}", std::strerror(errno)));

  // Every peer this node knows, those its checkpoint remembers too: a member that heard
  // this node's bye takes it as gone until a hello (or a chunk) says it is back, and
  // would otherwise skip it while this node mixed alone (Churn.ACheckpointRemembers...).
  const std::vector<peers::Peer> known = w->transport_->peers();
  for (const auto& p : known)
    (void)w->transport_->send(p.id, 0, proto::Hello{});  // queued until p is up

  w->thread_ = std::thread([raw = w.get()] { raw->run(); });
  return w;
}

Status SyncWorker::make_all_reduce(const DaemonConfig& config,
                                   const sgd::StrategyDescriptor& strategy,
                                   const compression::Codec* codec, const DaemonHooks& hooks) {
  const auto& sc = config.strategy;
  std::string name = sc.transport;
  if (name == "allgather") {
    all_reduce_ = std::make_unique<sgd::AllGatherAllReduce>(*router_, sc.chunk_bytes, codec,
                                                            pool_.get(), sc.trim);
    if (sc.trim > 0)
      spdlog::info("averaging: all-gather over the ZeroMQ channel, trimmed mean ({} from each end)",
                   sc.trim);
    else
      spdlog::info("averaging: all-gather over the ZeroMQ channel");
    return Status::ok();
  }
  if (name == "nccl") {
#ifdef GOSSIP_WITH_NCCL
    // The models live in the host arena: NCCL stages them through GPU 0 (CUDA
    // trainers' device buffers are the next step). Refused here, at start, on a
    // node that could not take part.
    if (Status st = sgd::nccl_available(); !st)
      return Status::invalid("transport 'nccl': " + st.message());
    all_reduce_ = std::make_unique<sgd::NcclPeerGroup>(*router_, 0, size_t{256} << 20);
    spdlog::info("averaging: NCCL all-reduce, staged through GPU 0");
    return Status::ok();
#else
    return Status::invalid("transport 'nccl': this gossipd was built without CUDA and NCCL");
#endif
  }
  peers::RingTransportOptions ro;
  ro.listen_host = peers::endpoint_host(config.listen);
  ro.traffic = &transport_->traffic_counters();
  ro.busy_poll = std::chrono::microseconds(sc.ring_busy_poll_us);
  if (name == "auto") {
    // RDMA where this build has it and a device answers, TCP otherwise.
    auto rdma = peers::make_ring_transport("rdma", ro);
    if (rdma) {
      ring_ = std::move(rdma).value();
    } else {
      spdlog::info("transport auto: no RDMA ({}), using tcp", rdma.status().message());
      name = "tcp";
    }
  }
  if (!ring_) {
    auto ring = peers::make_ring_transport(name, ro);
    if (!ring) return ring.status();
    ring_ = std::move(ring).value();
  }
  if (hooks.wrap_ring_transport) ring_ = hooks.wrap_ring_transport(std::move(ring_));
  sgd::PeerRingOptions po;
  po.chunk_bytes = std::min<uint64_t>(sc.chunk_bytes, 1 << 20);
  po.elastic = sc.elastic_ring();
  po.reform_wait = std::chrono::milliseconds(static_cast<int64_t>(sc.dead_after_s * 1000.0));
  // Where the daemon holds the model (local SGD), a restarted node can resume from a
  // member's; synchronous SGD's trainers keep theirs.
  po.admit_joiners = strategy.takes_nodes_back;
  // With CURVE keys, the ring's links are sealed with keys only each pair can derive.
  if (!config.secret_key.empty()) {
    po.link_keys_of = [self = config.node_id, secret = config.secret_key,
                       transport = transport_.get()](
                          uint32_t id) -> Result<std::pair<peers::LinkKey, peers::LinkKey>> {
      const auto& peers = transport->peers();
      const auto p = std::find_if(peers.begin(), peers.end(),
                                  [&](const peers::Peer& q) { return q.id == id; });
      if (p == peers.end()) return Status::not_found(fmt::format("no peer {}", id));
      auto to = peers::curve_link_key(self, id, secret, p->public_key);
      if (!to) return to.status();
      auto from = peers::curve_link_key(id, self, secret, p->public_key);
      if (!from) return from.status();
      return std::make_pair(*to, *from);
    };
    for (const auto& p : config.remote_peers()) {
      auto keys = po.link_keys_of(p.id);
      if (!keys) return keys.status().with_context(fmt::format("peer {}", p.id));
      po.link_keys[p.id] = *keys;
    }
  }
  if (auto mode = sgd::parse_sparse_reduce(sc.sparse_allreduce); mode)
    po.sparse_reduce = *mode;
  else
    return Status::invalid("unknown --sparse-allreduce " + sc.sparse_allreduce);
  if (sc.allreduce_algorithm == "auto") {
    po.algorithm.reset();
    if (!sc.allreduce_table.empty()) {
      auto table = read_allreduce_table(sc.allreduce_table);
      if (!table) return table.status();
      po.table = std::move(table).value();
    }
  } else {
    po.algorithm = sgd::parse_algorithm(sc.allreduce_algorithm);
    if (!po.algorithm) return Status::invalid("unknown all-reduce " + sc.allreduce_algorithm);
  }
  if (std::string_view(ring_->name()) != "tcp" && po.algorithm != sgd::Algorithm::kRing) {
    // The mesh algorithms need links the verbs transport does not make.
    if (po.algorithm)
      return Status::invalid(fmt::format(
          "--allreduce-algorithm {} runs over the tcp transport, and this node's is {} (set "
          "--transport tcp)",
          sc.allreduce_algorithm, ring_->name()));
    po.algorithm = sgd::Algorithm::kRing;
    spdlog::info("--allreduce-algorithm auto over {}: the ring only", ring_->name());
  }
  po.clip = sc.clip == "on";
  if (po.clip && !po.algorithm) {
    po.algorithm = sgd::Algorithm::kRing;  // robust mode bounds the ring's partial sums
    spdlog::info("--allreduce-algorithm auto with --clip on: the ring only");
  }
  auto peer_ring = std::make_unique<sgd::PeerRing>(*router_, *ring_, po);
  if (peer_ring->admits_joiners()) membership_ = peer_ring.get();
  peer_ring_ = peer_ring.get();
  spdlog::info("averaging: {}{}all-reduce ({}) over {} (port {}), rank {} of {}",
               po.elastic ? "elastic " : "", po.clip ? "robust (clipped) " : "",
               po.algorithm ? sgd::algorithm_name(*po.algorithm) : "auto", ring_->name(),
               ring_->port(), peer_ring->order().rank, peer_ring->order().ids.size());
  all_reduce_ = std::move(peer_ring);
  return Status::ok();
}

std::vector<std::pair<std::string, uint64_t>> SyncWorker::allreduce_rounds() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  if (peer_ring_)
    for (sgd::Algorithm a : sgd::kAlgorithms)
      out.emplace_back(std::string(sgd::algorithm_name(a)), peer_ring_->rounds_by(a));
  return out;
}

Status SyncWorker::make_strategy(const DaemonConfig& config, const DaemonHooks& hooks) {
  const auto& sc = config.strategy;
  const sgd::StrategyDescriptor* descriptor = sgd::find_strategy(sc.name);
  if (!descriptor)
    return Status::invalid(
        fmt::format("unknown strategy '{}' (valid: {})", sc.name, sgd::strategy_names()));
  const compression::Codec* codec = codec_.codec.get();
  sgd::StrategyResources r;
  r.codec = codec;
  r.pool = pool_.get();
  auto params = strategy_params(sc);
  if (!params) return params.status();
  r.params = *params;
  r.heartbeat = std::chrono::milliseconds(static_cast<int64_t>(sc.heartbeat_s * 1000.0));
  r.dead_after = config.strategy.dead_after();
  std::string detail;
  if (descriptor->fabric == sgd::Fabric::kServers) {
    if (codec->biased() && !codec_.error_feedback) {
      codec_.error_feedback = true;
      spdlog::info("codec {} is biased: error feedback turned on", codec->spec());
    }
    r.error_feedback = codec_.error_feedback;
    r.router = router_.get();
    r.gossip.chunk_elems = sc.chunk_bytes / sizeof(float);
    auto strategy = descriptor->make(r, &detail);
    if (!strategy) return strategy.status();
    strategy_ = std::move(strategy).value();
    membership_ = dynamic_cast<sgd::Membership*>(strategy_.get());  // new workers
    spdlog::info("{}{}, exchanging {}", sc.name, detail, codec_.canonical());
    return Status::ok();
  }
  if (descriptor->fabric == sgd::Fabric::kAllReduce) {
    if (codec->biased() && !codec_.error_feedback) {
      // A biased codec without error feedback does not converge (Karimireddy et al. 2019).
      codec_.error_feedback = true;
      spdlog::info("codec {} is biased: error feedback turned on", codec->spec());
    }
    r.error_feedback = codec_.error_feedback;
    GOSSIP_RETURN_IF_ERROR(make_all_reduce(config, *descriptor, codec, hooks));
    r.all_reduce = all_reduce_.get();
    auto strategy = descriptor->make(r, &detail);
    if (!strategy) return strategy.status();
    strategy_ = std::move(strategy).value();
    spdlog::info("{}{}, exchanging {}", sc.name, detail, codec_.canonical());
    return Status::ok();
  }

  // A node that joined by seeds takes part from the round a member schedules once it
  // holds a state (daemon/admission.h): until then the members' graph, on which it
  // runs alone. The answer brings that round when it was scheduled before (it restarted).
  const bool joined = !config.join.empty() && config.nodes() > 1;
  auto topology = peers::make_topology(config.topology_spec(),
                                       joined ? config.nodes() - 1 : config.nodes(), config.seed);
  if (!topology) return topology.status();
  overlay_ = std::make_unique<sgd::Overlay>(config.topology_spec(), config.seed,
                                            std::move(topology).value());
  if (joined && config.joined_round > 0)
    GOSSIP_RETURN_IF_ERROR(overlay_->grow(config.nodes(), config.joined_round));
  const peers::Topology& topology_now = overlay_->latest();
  sgd::ExchangeLimits limits;
  limits.heartbeat = std::chrono::milliseconds(static_cast<int64_t>(sc.heartbeat_s * 1000.0));
  limits.dead_after = config.strategy.dead_after();
  limits.robust = sc.trim > 0 || sc.clip == "on";
  limits.patience_factor = sc.patience_factor;
  limits.patience_floor =
      std::chrono::milliseconds(static_cast<int64_t>(sc.patience_floor_s * 1000.0));
  // A few rounds ahead is what neighbors in step send, plus what a strategy lets run
  // ahead by design; a node further behind skips ahead, and the buffer would only hold
  // model-sized chunks it throws away (up to 64 rounds of every neighbor after a
  // partition: experiments/soak.py saw 100 MB). Async gossip waits for its neighbors
  // within its staleness. A strategy that takes a `delay` (push-sum) waits only for its
  // in-neighbors, `delay` rounds late, so an in-neighbor's lead over this node compounds
  // along the chain of waits back to it: up to (delay + 1) rounds a hop, over up to
  // n - 1 hops. Its chunks are kept that far ahead, since one lost loses its mass (under
  // load a window of 4 + 2 delay lost some:
  // PushSumConsensus.DelayedMessagesThroughDaemonsLoseNoMass).
  const uint64_t delayed_lead =
      descriptor->takes("delay") ? (sc.delay + 1) * (config.nodes() - 1) : 0;
  limits.max_rounds_buffered = std::min<uint64_t>(
      limits.max_rounds_ahead, 4 + std::max<uint64_t>(2 * sc.staleness, delayed_lead));
  exchange_ = std::make_unique<sgd::NeighborExchange>(*router_, codec, pool_.get(), limits);
  exchange_->watched_over(overlay_.get());
  membership_ = exchange_.get();
  r.exchange = exchange_.get();
  r.overlay = overlay_.get();
  r.gossip.chunk_elems = sc.chunk_bytes / sizeof(float);
  r.gossip.compression = {codec, nullptr, pool_.get()};
  r.gossip.patience = std::chrono::milliseconds(static_cast<int64_t>(sc.patience_s * 1000.0));
  if (codec_.error_feedback)
    spdlog::warn(
        "+ef ignored: {} sends models (or CHOCO's self-correcting differences), not "
        "updates whose residual could be carried over",
        sc.name);
  auto strategy = descriptor->make(r, &detail);
  if (!strategy) return strategy.status();
  strategy_ = std::move(strategy).value();
  auto gap = peers::spectral_gap(topology_now);
  spdlog::info("{} on {}{}, exchanging {}", sc.name, topology_now.describe(), detail,
               codec->spec());
  if (gap)
    spdlog::info(
        "spectral gap {:.4f} ({}): the distance to consensus shrinks by about {:.4f} "
        "per round",
        gap->gap, gap->method, 1.0 - gap->gap);
  else
    spdlog::warn("spectral gap not computed: {}", gap.status().message());
  return Status::ok();
}

SyncWorker::~SyncWorker() {
  stop_ = true;
  cv_.notify_all();
  if (transport_) transport_->wake();
  if (thread_.joinable()) thread_.join();
  // Nothing may serve gossipctl once the parts it reads start going away.
  if (router_) router_->set_after_poll(nullptr);
  write_checkpoint_now();  // the state after the last completed round
  if (transport_) {
    for (const auto& p : transport_->peers()) (void)transport_->send(p.id, 0, proto::Bye{});
  }
  strategy_.reset();
  exchange_.reset();
  all_reduce_.reset();
  ring_.reset();
  initial_.reset();    // subscribed to the router
  tuner_.reset();      // idem
  inspector_.reset();  // idem
  admission_.reset();  // idem
  router_.reset();
  transport_.reset();  // lingers briefly so the bye goes out
  if (done_fd_ >= 0) ::close(done_fd_);
  if (inspect_fd_ >= 0) ::close(inspect_fd_);
}

void SyncWorker::submit(std::span<float> model, uint64_t round, uint64_t step) {
  {
    std::lock_guard lock(mu_);
    job_ = Job{model, round, step, false, std::nullopt};
    result_.reset();
  }
  cv_.notify_all();
  transport_->wake();
}

void SyncWorker::submit_bucket(std::span<float> model, uint64_t offset, uint64_t round,
                               uint64_t step) {
  {
    std::lock_guard lock(mu_);
    job_ = Job{model, round, step, false, offset};
    result_.reset();
  }
  cv_.notify_all();
  transport_->wake();
}

void SyncWorker::submit_start(std::span<float> model) {
  {
    std::lock_guard lock(mu_);
    job_ = Job{model, 0, 0, true, std::nullopt};
    result_.reset();
  }
  cv_.notify_all();
  transport_->wake();
}

void SyncWorker::submit_join(uint64_t min_round, std::optional<sgd::StrategyState> resume) {
  {
    std::lock_guard lock(mu_);
    join_ = JoinJob{min_round, std::move(resume)};
    joined_.reset();
  }
  cv_.notify_all();
  transport_->wake();
}

void SyncWorker::enable_checkpoints(std::string path, uint64_t every) {
  checkpoint_path_ = std::move(path);
  checkpoint_every_ = every;
}

void SyncWorker::set_model(size_t numel, uint64_t layout_fingerprint) {
  std::lock_guard lock(mu_);
  numel_ = numel;
  layout_ = layout_fingerprint;
}

std::optional<SyncWorker::RoundResult> SyncWorker::take_result() {
  uint64_t v;
  (void)!::read(done_fd_, &v, sizeof v);
  std::lock_guard lock(mu_);
  auto r = std::move(result_);
  result_.reset();
  return r;
}

std::optional<SyncWorker::JoinResult> SyncWorker::take_join() {
  uint64_t v;
  (void)!::read(done_fd_, &v, sizeof v);
  std::lock_guard lock(mu_);
  auto r = std::move(joined_);
  joined_.reset();
  return r;
}

void SyncWorker::signal_done() {
  uint64_t one = 1;
  (void)!::write(done_fd_, &one, sizeof one);
}

Result<std::optional<sgd::NodeState>> SyncWorker::fetch_state(size_t numel, uint64_t layout,
                                                              uint64_t min_round) {
  sgd::JoinOptions o = join_options_;
  o.min_round = min_round;
  o.deadline = std::chrono::steady_clock::now() + round_timeout_;
  o.cancel = &stop_;
  o.tick = [this] { membership_->tick(next_round_); };
  // What arrives meanwhile goes to its subscribers, as in a round.
  sgd::StateTransfer& transfer = *membership_->state();
  const size_t shared = strategy_->shared_state_numel(numel);
  const auto began = std::chrono::steady_clock::now();
  auto fetched = transfer.fetch(numel, shared, layout, o);
  if (!fetched || !*fetched) return fetched;
  transfers_.record(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  // Back in (into the ring, where the members now wait for this node); if they went
  // on while it fetched, the state it resumes from is the one they hold now.
  auto members_next = membership_->rejoin((*fetched)->round, o.deadline, &stop_);
  if (!members_next) {
    spdlog::warn("{}", members_next.status().message());
  } else if (*members_next) {
    o.min_round = (*fetched)->round;
    o.only = membership_->members();
    if (auto fresher = transfer.fetch(numel, shared, layout, o); fresher && *fresher)
      return fresher;
  }
  return fetched;
}

std::pair<size_t, uint64_t> SyncWorker::model_shape() {
  std::lock_guard lock(mu_);
  return {numel_, layout_};
}

void SyncWorker::run_join(uint64_t min_round, std::optional<sgd::StrategyState> resume) {
  JoinResult r;
  const auto [numel, layout] = model_shape();
  if (membership_ && membership_->admits_joiners() && join_options_.offer_wait.count() > 0) {
    auto fetched = fetch_state(numel, layout, min_round);
    if (!fetched) {
      r.status = fetched.status();
    } else if (*fetched) {
      membership_->joined(true);
      r.state = std::move(**fetched);
      next_round_ = r.state->round;
      strategy_->took_model(r.state->model, r.state->shared);
      spdlog::info("joined: took the model of peer {} before round {} (step {})", r.state->from,
                   r.state->round, r.state->step);
    } else {
      membership_->joined(false);
    }
  }
  if (r.status && joined_by_seeds_ && overlay_) {
    // Ready: a member schedules the round from which the graph has this node.
    auto round = admission_->ask_for_round(std::chrono::steady_clock::now() + round_timeout_,
                                           &stop_, [this] { membership_->tick(next_round_); });
    if (round) {
      // Its first round is that one: it waits there for the members rather than run
      // ahead of them alone, and starts at their step then, so that it finishes a step
      // budget with them rather than alone after them.
      if (r.state && *round > r.state->round) {
        r.state->step += (*round - r.state->round) * period_;
        spdlog::info(
            "this node takes part in the members' rounds from round {}, at their step then, {}",
            *round, r.state->step);
      } else {
        spdlog::info("this node takes part in the members' rounds from round {}", *round);
      }
      next_round_ = std::max(next_round_, *round);
    } else
      spdlog::warn("{}: this node runs its rounds alone", round.status().message());
    joined_by_seeds_ = false;
  }
  if (r.status && resume && !r.state) {
    r.status = strategy_->load_state(*resume);
    if (r.status) spdlog::info("restored the checkpoint's state: {}", describe_state(*resume));
  } else if (r.status && resume) {
    // The model is a peer's now, but what the checkpoint holds of this node's own
    // (local SGD's error-feedback residual) is still its own.
    auto kept = strategy_->keep_own_state(*resume);
    if (!kept)
      spdlog::warn("the checkpoint's state not kept after taking peer {}'s model: {}",
                   r.state->from, kept.status().message());
    else
      spdlog::info("kept the checkpoint's own state after taking peer {}'s model: {}",
                   r.state->from, describe_state(*kept));
  }
  {
    std::lock_guard lock(mu_);
    joined_ = std::move(r);
  }
  signal_done();
}

std::optional<SyncWorker::RoundResult> SyncWorker::come_back(std::span<float> model) {
  if (std::chrono::steady_clock::now() < next_come_back_ || join_options_.offer_wait.count() == 0)
    return std::nullopt;
  spdlog::warn("the elastic ring left this node out: fetching a member's model to ask back in");
  // Nobody to come back to (the others are down too, or left out themselves) means
  // training alone, and trying again later, less and less often.
  auto back_off = [&](const std::string& why) {
    come_back_backoff_ = std::min(std::max(2 * come_back_backoff_, 2 * join_options_.offer_wait),
                                  std::chrono::milliseconds(60000));
    next_come_back_ = std::chrono::steady_clock::now() + come_back_backoff_;
    spdlog::warn("{}: training alone, trying again in {:.1f} s", why,
                 come_back_backoff_.count() / 1000.0);
  };
  auto fetched = fetch_state(model.size(), layout_, 0);
  if (!fetched || !*fetched) {
    back_off(!fetched ? fetched.status().message() : "no member offered its model");
    return std::nullopt;
  }
  const sgd::NodeState& state = **fetched;
  std::copy(state.model.begin(), state.model.end(), model.begin());
  strategy_->took_model(model, state.shared);
  if (membership_->left_out()) {
    back_off(fmt::format(
        "took the model of peer {} before round {}, but the members did not take this node back",
        state.from, state.round));
  } else {
    come_back_backoff_ = std::chrono::milliseconds(0);
    spdlog::info("back in the ring: took the model of peer {} before round {} (step {})",
                 state.from, state.round, state.step);
  }
  // The round whose result this model is, and the members' step at it: a node left
  // out trains at its own pace (alone, faster; stopped, slower), and its trainers'
  // steps must line up with the members' again, or its rounds would not be theirs
  // and the run would end on different rounds.
  return RoundResult{Status::ok(), state.round - 1, state.step, std::nullopt};
}

void SyncWorker::after_round(std::span<const float> model, uint64_t ran, uint64_t step) {
  initial_->discard();
  // A gradient strategy's arena holds the step's mean gradient, not the model: no
  // sample, so status --cluster shows no distance rather than the gradients'.
  if (!model_is_gradient_) {
    samples_.resize(proto::inspect::kMaxSamples);
    sample_model(model, samples_);
  }
  // What a joiner gets: a copy per round, for the gossip family and an elastic
  // local-SGD ring only.
  if (membership_ && membership_->admits_joiners())
    membership_->state()->publish(model, strategy_->shared_state(), ran + 1, step, 1.0, layout_,
                                  chunk_elems_);
  if (checkpoint_path_.empty()) return;
  if (!last_) last_.emplace();
  last_->node = node_;
  last_->strategy = strategy_name_;
  last_->layout = layout_;
  last_->round = ran + 1;
  last_->step = step;
  last_->model.assign(model.begin(), model.end());
  last_->state = strategy_->save_state();
  last_->members = admission_->members();
  last_->forgotten.assign(admission_->forgotten().begin(), admission_->forgotten().end());
  last_written_ = false;
  if (checkpoint_every_ != 0 && (ran + 1) % checkpoint_every_ == 0) write_checkpoint_now();
}

void SyncWorker::write_checkpoint_now() {
  if (checkpoint_path_.empty() || !last_ || last_written_) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (Status st = write_checkpoint(checkpoint_path_, *last_); !st) {
    spdlog::error("checkpoint not written: {}", st.message());
    return;
  }
  last_written_ = true;
  spdlog::info(
      "checkpoint {}: round {}, step {}, {} parameters ({:.0f} ms); state: {}", checkpoint_path_,
      last_->round, last_->step, last_->model.size(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
      describe_state(last_->state));
}

Status SyncWorker::make_tuner(const DaemonConfig& config) {
  const auto& sc = config.strategy;
  TuneSettings settings;
  settings.wait = sc.tune_wait;
  settings.every = sc.tune_every;
  settings.consensus = sc.tune_consensus;
  // From the configured period on: a shorter one than asked for is not what auto is for.
  std::erase_if(settings.periods, [&](uint64_t p) { return p < sc.period; });
  if (settings.periods.empty() || settings.periods.front() != sc.period)
    settings.periods.insert(settings.periods.begin(), sc.period);
  TunedCodec* tuned = nullptr;
  if (codec_.codec->keeps_largest()) {
    auto t = TunedCodec::make(*codec_.codec, {0.1, 0.03, 0.01, 0.003});
    if (!t) return t.status();
    tuned = t->get();
    settings.ratios = tuned->ratios();
    codec_.codec = std::move(t).value();
  }
  tuner_ = std::make_unique<Tuner>(*router_, std::move(settings), sc.period, tuned);
  spdlog::info("tune auto: period from {} on{}, rounds under {:.0f}% of the trainers' time",
               sc.period,
               tuned ? fmt::format(", ratio of {} among {}", codec_.codec->spec(),
                                   fmt::join(tuned->ratios(), ", "))
                     : "",
               100 * sc.tune_wait);
  return Status::ok();
}

void SyncWorker::tune(RoundResult& result, uint64_t step,
                      std::chrono::steady_clock::time_point began, uint64_t sent_before) {
  const auto now = std::chrono::steady_clock::now();
  Tuner::RoundSample s;
  s.round = result.round;
  s.seconds = std::chrono::duration<double>(now - began).count();
  s.bytes = transport_->traffic().totals().payload_sent - sent_before;
  if (tune_last_end_ && step > tune_last_step_) {
    s.compute_s = std::chrono::duration<double>(began - *tune_last_end_).count();
    s.steps = step - tune_last_step_;
  }
  s.probe = Tuner::probes(result.round);
  tuner_->round_ran(s);
  result.period = tuner_->next_period(result.round, std::chrono::seconds(2),
                                      [&] { router_->poll(std::chrono::milliseconds(5)); });
  tune_last_end_ = std::chrono::steady_clock::now();
  tune_last_step_ = step;
}

std::vector<sgd::Strategy::Gauge> SyncWorker::strategy_gauges() const {
  auto g = strategy_->gauges();
  if (tuner_)
    for (auto& t : tuner_->gauges()) g.push_back(std::move(t));
  if (peer_ring_)
    for (auto& r : peer_ring_->gauges()) g.push_back(std::move(r));
  return g;
}

void SyncWorker::run_start(std::span<float> model) {
  RoundResult r;
  // Named copies, not structured bindings: clang before 16 cannot capture those.
  const auto shape = model_shape();
  const size_t numel = shape.first;
  const uint64_t layout = shape.second;
  // Between polls, what the idle loop does: peers that already run round 0 send its
  // chunks meanwhile, which the strategy validates against the model's size, and
  // the gossip family's heartbeats go on.
  const auto idle = [&] { strategy_->progress(next_round_, numel, std::chrono::milliseconds(0)); };
  idle();
  if (node_ == sgd::InitialModel::kSource) {
    initial_->publish(model, layout);
    spdlog::info("start-up: this node's model is the cluster's initial model");
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    r.status = initial_->fetch(model, layout, t0 + round_timeout_, &stop_, idle);
    if (r.status)
      spdlog::info(
          "start-up: took node 0's initial model ({:.0f} ms)",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (r.status) strategy_->started_from(model);
  {
    std::lock_guard lock(mu_);
    result_ = std::move(r);
  }
  signal_done();
}

void SyncWorker::run() {
  pthread_setname_np(pthread_self(), "gossipd-sync");
  while (true) {
    Job job;
    std::optional<JoinJob> join;
    size_t numel = 0;
    {
      std::unique_lock lock(mu_);
      if (!stop_ && !job_ && !join_) {
        // Idle: wait on the peers' channel, which a job's arrival wakes (wake()), so
        // that what peers send between rounds (a ping of gossipctl doctor) is answered
        // at once, not at the next turn of this loop. Before the node has a model only
        // the gossip family reads the rest (joins, heartbeats); the others answer
        // gossipctl and joiners and leave the rest queued for their first round.
        const bool everything = numel_ > 0 || exchange_;
        const size_t idle_numel = numel_;
        const uint64_t idle_layout = layout_;
        lock.unlock();
        bool waited = true;
        if (everything) {
          // The strategy learns the model's shape and the next round first (the
          // all-gather checks chunks against them), then what arrives reaches it.
          strategy_->set_layout_fingerprint(idle_layout);
          strategy_->progress(next_round_, idle_numel, std::chrono::milliseconds(0));
          router_->poll(std::chrono::milliseconds(20));
        } else {
          // A parameter server whose trainer starts late must not look dead to the
          // workers whose trainers did not (a pull at round 0 found one silent for
          // 5.6 s, and the run failed: CI run 38, under load).
          strategy_->keep_alive();
          waited = router_->poll_only({proto::Kind::kInspect, proto::Kind::kMember},
                                      std::chrono::milliseconds(20));
        }
        lock.lock();
        if (!waited)
          cv_.wait_for(lock, std::chrono::milliseconds(20),
                       [&] { return stop_ || job_.has_value() || join_.has_value(); });
      }
      if (stop_) return;
      numel = numel_;
      if (numel != budgeted_numel_ && zmq_) {
        // Four models' worth may wait for one peer (a round's chunks, and a few rounds
        // for a peer that is slow), 8 MiB at least: beyond that, a peer that is down
        // is sent nothing more until it drains (peers::ZmqTransport::send_queued).
        zmq_->set_queue_budget(std::max<uint64_t>(uint64_t{8} << 20, 4 * numel * sizeof(float)));
        budgeted_numel_ = numel;
      }
      strategy_->set_layout_fingerprint(layout_);
      if (job_) {
        job = *job_;
        job_.reset();
      }
      join = std::move(join_);
      join_.reset();
    }
    if (join) {
      joining_ = true;
      run_join(join->min_round, std::move(join->resume));
      joining_ = false;
      continue;
    }
    if (job.start) {
      run_start(job.model);
      continue;
    }
    if (job.model.empty()) {
      // The gossip family answers joins and sends heartbeats before it has a model too.
      if (numel > 0 || exchange_)
        strategy_->progress(next_round_, numel, std::chrono::milliseconds(0));
      continue;
    }
    const uint64_t round = strategy_->round_to_run(std::max(job.round, next_round_));
    if (round != job.round)
      spdlog::info("round {}: the neighbors have moved on, catching up to round {}", job.round,
                   round);
    next_round_ = round + 1;
    // Node 0 reads no start-up requests inside a round: those not settled by now get
    // the initial model's chunks (sgd/membership/initial_model.h).
    if (node_ == sgd::InitialModel::kSource)
      initial_->before_rounds(std::chrono::seconds(5), [&] {
        strategy_->progress(round, numel, std::chrono::milliseconds(0));
      });
    sgd::RoundOptions opts;
    const auto allowed = round_deadline_->next();
    opts.deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(allowed);
    opts.cancel = &stop_;
    opts.offset = job.bucket.value_or(0);
    opts.model_numel = numel;
    if (tuner_ && !job.bucket) opts.uncompressed = tuner_->before_round(round, job.model);
    const auto began = std::chrono::steady_clock::now();
    const uint64_t sent = transport_->traffic().totals().payload_sent;
    in_round_ = true;
    Status st = strategy_->synchronize(job.model, round, opts);
    in_round_ = false;
    const auto ended = std::chrono::steady_clock::now();
    last_round_end_ = ended;
    last_round_ms_ = std::chrono::duration<double, std::milli>(ended - began).count();
    last_step_ = job.step;
    if (st) {
      round_deadline_->completed(std::chrono::steady_clock::now() - began);
    } else if (round_deadline_->adapting()) {
      st = st.with_context(sgd::RoundDeadline::failure_context(allowed));
    }
    RoundResult result{std::move(st), round, std::nullopt, std::nullopt};
    if (const uint64_t ran = std::max(round, strategy_->round_to_run(round + 1) - 1);
        result.status && !job.bucket && !exchange_ && ran > job.round) {
      // The round's result is a later round's: an elastic ring took it from members
      // ahead, or merged with a ring ahead; a parameter server's pull found the shards
      // at a later clock (a worker that joined, or that the others went on without).
      // Its trainers go on from that round's step, so that they finish a step budget with the
      // members rather than alone. (The gossip family's catching up is a neighbor's lag, seen at
      // the next round.)
      result.round = ran;
      const uint64_t jump = ran - job.round;  // saturating: a round is a peer's word
      result.step =
          jump > (UINT64_MAX - job.step) / period_ ? UINT64_MAX : job.step + jump * period_;
      next_round_ = ran + 1;
      spdlog::info("round {}: the result is round {}'s; the trainers go on from step {}", job.round,
                   ran, *result.step);
    }
    if (tuner_ && result.status && !job.bucket) tune(result, job.step, began, sent);
    if (result.status && membership_ && membership_->left_out()) {
      if (auto back = come_back(job.model)) {
        result = std::move(*back);
        next_round_ = result.round + 1;
      }
    }
    if (result.status) {
      ++rounds_done_;
      if (result.step) last_step_ = *result.step;
    } else {
      count_failure(result.status.code() == Status::Code::kTimeout ? Failure::kRoundTimeout
                                                                   : Failure::kRoundError);
      note_error(fmt::format("round {}: {}", round, result.status.message()));
    }
    if (result.status && !job.bucket)
      after_round(job.model, result.round, result.step.value_or(job.step));
    else if (result.status)
      initial_->discard();
    {
      std::lock_guard lock(mu_);
      result_ = std::move(result);
    }
    signal_done();
  }
}

}  // namespace gossip::daemon

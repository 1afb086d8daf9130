#include "daemon/daemon.h"

#include <fmt/format.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/failures.h"
#include "base/finite.h"
#include "base/refusals.h"
#include "daemon/private_files.h"

namespace gossip::daemon {

namespace ipc = proto::ipc;

void block_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Daemon::Daemon(DaemonConfig config)
    : config_(std::move(config)),
      strategy_(sgd::find_strategy(config_.strategy.name)),
      sessions_(config_.max_trainers),
      time_(config_.max_trainers),
      tuned_period_(config_.strategy.tuned() ? config_.strategy.period : 0) {
  parse_nonfinite_policy(config_.strategy.nonfinite, &nonfinite_policy_);  // validated by config
}

Daemon::~Daemon() {
  metrics_.reset();  // before the counters it reads
  worker_.reset();   // a round may still reference the arena or node_model_
  if (signal_fd_ >= 0) ::close(signal_fd_);
}

Result<std::unique_ptr<Daemon>> Daemon::create(const DaemonConfig& config,
                                               const DaemonHooks& hooks) {
  if (!sgd::find_strategy(config.strategy.name))
    return Status::invalid(fmt::format("unknown strategy '{}' (valid: {})", config.strategy.name,
                                       sgd::strategy_names()));
  std::unique_ptr<Daemon> d(new Daemon(config));

  std::error_code ec;
  std::filesystem::create_directories(config.run_dir, ec);
  if (ec)
    return Status::io_error(
        fmt::format("cannot create run directory {}: {}", config.run_dir, ec.message()));
  // Whoever else can write it could take the socket's name (trainers would attach to
  // theirs) or plant a link where the daemon creates or removes it.
  GOSSIP_RETURN_IF_ERROR(check_private_dir(config.run_dir, "run directory"));
  d->ipc_path_ =
      (std::filesystem::path(config.run_dir) / fmt::format("gossipd-{}.sock", config.node_id))
          .string();
  if (std::filesystem::exists(d->ipc_path_)) {
    // A socket file left by a daemon that was killed; ZeroMQ cannot bind over it.
    ::unlink(d->ipc_path_.c_str());
    spdlog::warn("removed stale IPC socket {}", d->ipc_path_);
  }

  for (const auto& name : Arena::remove_stale(config.node_id))
    spdlog::warn("removed arena {} left by a gossipd that no longer runs", name);

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);  // re-read the admission list
  d->signal_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (d->signal_fd_ < 0) return Status::io_error(fmt::format("signalfd: {}", std::strerror(errno)));

  if (!config.checkpoint.empty()) {
    // Whoever else can write the checkpoint's directory could plant the file gossipd
    // resumes from, or a link where it writes.
    std::string dir = std::filesystem::path(config.checkpoint).parent_path().string();
    if (Status st = check_private_dir(dir.empty() ? "." : dir, "checkpoint directory"); !st)
      return st;
    auto ck = read_checkpoint(config.checkpoint);
    if (ck) {
      if (ck->node != config.node_id)
        return Status::invalid(fmt::format("checkpoint {} belongs to node {}, not to node {}",
                                           config.checkpoint, ck->node, config.node_id));
      if (ck->strategy != config.strategy.name) {
        spdlog::warn(
            "checkpoint {} was written by strategy {}: resuming its model without that "
            "strategy's state",
            config.checkpoint, ck->strategy);
        ck->state = {};
      }
      spdlog::info("checkpoint {}: resuming at round {}, step {} ({} parameters)",
                   config.checkpoint, ck->round, ck->step, ck->model.size());
      d->resume_ = std::move(ck).value();
    } else if (ck.status().code() == Status::Code::kNotFound) {
      spdlog::info("no checkpoint at {} yet: starting fresh", config.checkpoint);
    } else {
      return Status::invalid(ck.status().message() + " (move it away to start without it)");
    }
  }

  auto worker = SyncWorker::start(config, hooks, d->resume_ ? &*d->resume_ : nullptr);
  if (!worker) return worker.status();
  d->worker_ = std::move(worker).value();
  if (!config.checkpoint.empty())
    d->worker_->enable_checkpoints(config.checkpoint, config.checkpoint_every);

  // Before the IPC socket: once its file exists (what scripts and tests wait for),
  // every listener of the node is up, and a scrape then is never refused.
  if (config.metrics_port != 0) {
    const std::string host = peers::endpoint_host(config.listen);
    Daemon* self = d.get();
    auto server = MetricsServer::start(host, static_cast<uint16_t>(config.metrics_port),
                                       [self] { return render_metrics(self->metrics_snapshot()); });
    if (!server) return server.status();
    d->metrics_ = std::move(server).value();
    spdlog::info("metrics at http://{}:{}/metrics", host, d->metrics_->port());
  }
  try {
    d->ipc_ = zmq::socket_t(d->context_, zmq::socket_type::router);
    d->ipc_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(ipc::kMaxIpcMessageBytes));
    d->ipc_.set(zmq::sockopt::linger, 200);
    // Owner-only from the first instant: the umask covers the window before chmod.
    mode_t old = ::umask(0077);
    d->ipc_.bind("ipc://" + d->ipc_path_);
    ::umask(old);
    ::chmod(d->ipc_path_.c_str(), 0600);
    // Closed connections: how a trainer in a PID namespace this daemon cannot see is
    // noticed when it ends (the others have a pidfd).
    const std::string monitor = fmt::format("inproc://gossipd-ipc-monitor-{}", config.node_id);
    if (zmq_socket_monitor(d->ipc_.handle(), monitor.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
      throw zmq::error_t();
    d->ipc_monitor_ = zmq::socket_t(d->context_, zmq::socket_type::pair);
    d->ipc_monitor_.connect(monitor);
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("cannot bind ipc://{}: {}", d->ipc_path_, e.what()));
  }
  const std::string named = config.node_name.empty() ? "" : fmt::format(" ({})", config.node_name);
  spdlog::info("node {}{} of {} listening on {} (peers) and ipc://{} (trainers); strategy {} T={}",
               config.node_id, named, config.nodes(), config.listen, d->ipc_path_,
               config.strategy.name, config.strategy.period);
  if (!config.peers_from.empty())
    for (const auto& p : config.remote_peers())
      spdlog::info("peer {} ({}) at {}, from {}", p.id, p.name, p.endpoint, config.peers_from);
  return d;
}

int Daemon::run() {
  while (running_) {
    std::vector<zmq::pollitem_t> items = {
        {ipc_.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, signal_fd_, ZMQ_POLLIN, 0},
        {nullptr, worker_->done_fd(), ZMQ_POLLIN, 0},
        {ipc_monitor_.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, worker_->inspect_fd(), ZMQ_POLLIN, 0},
    };
    constexpr size_t kFirstTrainer = 5;
    auto sessions = sessions_.all();
    for (auto* s : sessions) items.push_back({nullptr, s->pidfd, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(1000));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("poll failed: {}", e.what());
      shutdown("internal error");
      return 1;
    }
    if ((items[1].revents & ZMQ_POLLIN) && handle_signal()) break;
    for (size_t i = kFirstTrainer; i < items.size(); ++i)
      if (items[i].revents & ZMQ_POLLIN) handle_trainer_exit(items[i].fd);
    if (items[4].revents & ZMQ_POLLIN) handle_inspected();
    if (items[3].revents & ZMQ_POLLIN) handle_ipc_disconnects();
    if (items[2].revents & ZMQ_POLLIN) handle_round_done();
    if (items[0].revents & ZMQ_POLLIN) handle_ipc();
    if (leave_route_) {
      const std::string reason =
          fmt::format("gossipd on node {} left the cluster (gossipctl leave)", config_.node_id);
      reply(*leave_route_, ipc::Shutdown{reason});
      shutdown(reason);
      break;
    }
    answer_forget();
    publish_gauges();
    release_free_memory();
  }
  return 0;
}

void Daemon::release_free_memory() {
  // Bursts hold model-sized buffers for a while: chunks buffered for the rounds
  // ahead of a node that is behind, messages queued to a peer cut off by a
  // partition. Freed, they stay in glibc's heaps (its mmap threshold rises with the
  // first large frees), and the resident set would keep the peak of every burst.
  // Given back to the system now and then, it tracks what is in use, so that a
  // growing resident set means a leak (experiments/soak.py checks it).
  constexpr auto kEvery = std::chrono::seconds(30);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_trim_ < kEvery) return;
  last_trim_ = now;
  ::malloc_trim(0);
}

bool Daemon::handle_signal() {
  signalfd_siginfo info{};
  if (::read(signal_fd_, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) return false;
  if (info.ssi_signo == SIGHUP) {
    reload_admission();
    return false;
  }
  const char* name = info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM";
  spdlog::info("{} received: shutting down", name);
  shutdown(fmt::format("gossipd on node {} received {}", config_.node_id, name));
  return true;
}

void Daemon::reload_admission() {
  if (config_.admit_keys.empty()) {
    spdlog::info("SIGHUP received: no --admit-keys to re-read");
    return;
  }
  auto n = worker_->reload_admit_keys(config_.admit_keys);
  if (!n) {
    spdlog::error("SIGHUP received: {}: the admission list stays as it was", n.status().message());
    return;
  }
  spdlog::info("SIGHUP received: re-read {}: {} key(s) may join from now on", config_.admit_keys,
               *n);
}

void Daemon::shutdown(const std::string& reason) {
  running_ = false;
  metrics_.reset();  // its thread reads worker_'s counters
  for (auto* s : sessions_.all()) reply(s->route, ipc::Shutdown{reason});
  if (worker_) {
    // The run's totals, in the log for scripts that check their own accounting.
    const ipc::Traffic t = worker_->traffic().totals();
    spdlog::info(
        "traffic: payload sent {} B, received {} B; wire sent {} B, received {} B; "
        "messages sent {}, received {}, dropped {}",
        t.payload_sent, t.payload_recv, t.wire_sent, t.wire_recv, t.msgs_sent, t.msgs_recv,
        t.dropped);
  }
  worker_.reset();  // cancels a running round before node_model_ goes away; says bye to peers
  ipc_monitor_.close();
  ipc_.close();
  ::unlink(ipc_path_.c_str());
  if (arena_) spdlog::info("unlinking arena {}", arena_->name());
  arena_.reset();
  spdlog::info("stopped after {} rounds", round_);
}

void Daemon::reply(const std::string& route, const ipc::Message& m) {
  // The answer a blocked trainer waits for (a bucket's answers end its wait with the
  // step's last one).
  if (std::holds_alternative<ipc::SyncOk>(m) || std::holds_alternative<ipc::Error>(m))
    if (TrainerSession* s = sessions_.find(route); s && s->buckets.empty())
      time_.wait_ends(s->slot, std::chrono::steady_clock::now());
  std::string body = ipc::encode(m);
  try {
    // ROUTER drops messages to a route that is gone; that is what we want for a
    // trainer that died.
    ipc_.send(zmq::buffer(route), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    ipc_.send(zmq::buffer(body), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("reply to trainer failed: {}", e.what());
  }
}

void Daemon::handle_ipc() {
  while (true) {
    std::vector<zmq::message_t> frames;
    size_t total = 0;
    try {
      zmq::message_t f;
      if (!ipc_.recv(f, zmq::recv_flags::dontwait)) return;
      bool more = f.more();
      frames.push_back(std::move(f));
      total = 1;
      while (more) {
        zmq::message_t g;
        if (!ipc_.recv(g, zmq::recv_flags::dontwait)) break;
        more = g.more();
        if (++total <= 2) frames.push_back(std::move(g));
      }
    } catch (const zmq::error_t& e) {
      spdlog::warn("IPC receive failed: {}", e.what());
      return;
    }
    std::string route = frames[0].to_string();
    auto* session = sessions_.find(route);
    std::string who = session ? fmt::format("trainer '{}' (pid {})", session->name, session->pid)
                              : std::string("an unattached trainer");
    if (total != 2) {
      ++ipc_dropped_;
      spdlog::warn("dropped IPC message from {}: {} frames, expected 1", who, total - 1);
      reply(route, ipc::Error{fmt::format("malformed message: {} frames, expected 1", total - 1)});
      continue;
    }
    auto msg = ipc::decode(frames[1].data(), frames[1].size());
    if (!msg) {
      ++ipc_dropped_;
      spdlog::warn("dropped IPC message from {}: {}", who, msg.status().message());
      reply(route, ipc::Error{"malformed message: " + msg.status().message()});
      continue;
    }
    if (auto* a = std::get_if<ipc::Attach>(&*msg)) {
      on_attach(route, *a, zmq_msg_get(frames[1].handle(), ZMQ_SRCFD));
    } else if (auto* s = std::get_if<ipc::Sync>(&*msg)) {
      on_sync(route, *s);
    } else if (auto* r = std::get_if<ipc::SyncRange>(&*msg)) {
      on_sync_range(route, *r);
    } else if (std::holds_alternative<ipc::Start>(*msg)) {
      on_start(route);
    } else if (std::holds_alternative<ipc::Detach>(*msg)) {
      on_detach(route);
    } else if (std::holds_alternative<ipc::StatsRequest>(*msg)) {
      on_stats(route);
    } else if (std::holds_alternative<ipc::Leave>(*msg)) {
      // After this batch of messages: shutdown() closes the socket they come on.
      spdlog::info("leaving the cluster (gossipctl leave)");
      leave_route_ = route;
    } else if (auto* q = std::get_if<ipc::InspectRequest>(&*msg)) {
      on_inspect(route, *q);
    } else if (auto* b = std::get_if<ipc::Ban>(&*msg)) {
      on_ban(route, *b);
    } else if (auto* f = std::get_if<ipc::Forget>(&*msg)) {
      on_forget(route, *f);
    } else {
      ++ipc_dropped_;
      spdlog::warn("dropped IPC message from {}: unexpected kind {}", who, ipc::message_name(*msg));
      reply(route, ipc::Error{fmt::format("unexpected message '{}'", ipc::message_name(*msg))});
    }
  }
}

void Daemon::on_ban(const std::string& route, const ipc::Ban& b) {
  // The IPC socket is this user's only (0600): whoever asks may run the daemon anyway.
  if (config_.secret_key.empty())
    return reply(route, ipc::Error{"a ban needs CURVE (--secret-key): without keys anyone could "
                                   "speak as any node, and a ban would stop no one"});
  const auto peers = worker_->peers();
  if (std::none_of(peers.begin(), peers.end(), [&](const auto& p) { return p.id == b.peer; }))
    return reply(route, ipc::Error{fmt::format("node {} is not a peer of node {}", b.peer,
                                               config_.node_id)});
  spdlog::warn("banning peer {} (gossipctl ban)", b.peer);
  worker_->ban(b.peer);
  reply(route, b);
}

void Daemon::on_forget(const std::string& route, const ipc::Forget& f) {
  if (forget_route_)
    return reply(route, ipc::Error{"this node is settling another gossipctl forget; try again in "
                                   "a few seconds"});
  spdlog::warn("proposing to the members that node {} is gone for good (gossipctl forget)", f.peer);
  worker_->forget(f.peer);
  forget_route_ = route;
  forget_ = f;
  // The members answer within the proposal's 2 s; this bounds a worker that is busy.
  forget_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
}

void Daemon::answer_forget() {
  if (!forget_route_) return;
  auto outcome = worker_->take_forgotten();
  if (!outcome && std::chrono::steady_clock::now() < forget_until_) return;
  if (!outcome) outcome = Status::timeout("the sync thread did not get to it within 10 s");
  if (outcome->is_ok())
    reply(*forget_route_, forget_);
  else
    reply(*forget_route_, ipc::Error{outcome->message()});
  forget_route_.reset();
}

void Daemon::on_attach(const std::string& route, const ipc::Attach& a, int connection_fd) {
  auto refuse = [&](const std::string& why) {
    spdlog::warn("refused trainer '{}' (pid {} by its word): {}", a.trainer, a.pid, why);
    worker_->note_error(fmt::format("refused trainer '{}': {}", a.trainer, why));
    reply(route, ipc::Error{why});
  };
  // Who the trainer is comes from the kernel, not from what it says: the pid it
  // reports is its own PID namespace's, which a container does not share.
  ucred cred{};
  socklen_t cred_size = sizeof(cred);
  if (connection_fd < 0) {
    // libzmq names a message's connection only when it could name its peer, which fails
    // where getnameinfo is wrapped (nss_wrapper) or refuses AF_UNIX. The socket is
    // owner-only, so the trainer is this user's: its word is all there is for its pid.
    if (!warned_no_credentials_)
      spdlog::warn(
          "libzmq gives no descriptor for IPC connections here, so trainers' "
          "credentials cannot be read (SO_PEERCRED); taking the pid each reports");
    warned_no_credentials_ = true;
    cred.pid = a.pid;
    cred.uid = ::geteuid();
  } else if (::getsockopt(connection_fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_size) != 0) {
    return refuse(fmt::format("cannot read the trainer's credentials (SO_PEERCRED): {}",
                              std::strerror(errno)));
  }
  if (cred.uid != ::geteuid() && cred.uid != 0)
    return refuse(
        fmt::format("the trainer runs as uid {}, this daemon as uid {}", cred.uid, ::geteuid()));
  if (cred.pid == 0)
    spdlog::info(
        "trainer '{}' runs in a PID namespace this daemon cannot see (its pid there: {}); "
        "watching its connection",
        a.trainer, a.pid);
  else if (cred.pid != a.pid)
    spdlog::info("trainer '{}' is pid {} here (pid {} in its own PID namespace)", a.trainer,
                 cred.pid, a.pid);
  if (a.device != "cpu")
    return refuse(fmt::format("device '{}' is not supported by this daemon (cpu only)", a.device));
  if (layout_) {
    if (auto diff = proto::first_difference(*layout_, a.layout))
      return refuse("model layout differs from the node's: " + *diff);
  }
  auto added = sessions_.add(route, a.trainer, a.local_rank, cred.pid, connection_fd);
  if (!added) return refuse(added.status().message());
  TrainerSession* s = *added;
  time_.attached(s->slot, std::chrono::steady_clock::now());

  if (!layout_) {
    if (resume_ && resume_->layout != a.layout.fingerprint()) {
      sessions_.remove(route);
      return refuse(
          fmt::format("the checkpoint {} holds another model (layout {:016x}, this trainer's "
                      "{:016x}); attach that model or move the checkpoint away",
                      config_.checkpoint, resume_->layout, a.layout.fingerprint()));
    }
    layout_ = a.layout;
    uint64_t numel = proto::padded_numel(*layout_);
    auto arena = Arena::create(Arena::name_for(config_.node_id), config_.max_trainers, numel,
                               layout_->dtype());
    if (!arena) {
      layout_.reset();
      sessions_.remove(route);
      return refuse(arena.status().message());
    }
    arena_ = std::move(arena).value();
    worker_->set_model(numel, layout_->fingerprint());
    spdlog::info("model: {} tensors, {} parameters ({}); arena {} ({} bytes)",
                 layout_->tensors.size(), layout_->total_numel(),
                 proto::dtype_name(layout_->dtype()), arena_->name(), arena_->size_bytes());
    // The trainer hears back once the peers have said whether they hold a fresher model.
    joining_ = true;
    pending_attach_.push_back(route);
    worker_->submit_join(resume_ ? resume_->round : 0,
                         resume_ ? std::optional(resume_->state) : std::nullopt);
    return;
  }
  if (joining_) {
    pending_attach_.push_back(route);
    return;
  }
  if (strategy_->gradients && round_started_) {
    sessions_.remove(route);
    return refuse(fmt::format(
        "strategy {}: this node's trainers have taken {} steps, and their parameters live in the "
        "trainers (the arena carries gradients), so a trainer that attaches now cannot start from "
        "them; attach every trainer before the first step",
        config_.strategy.name, step_));
  }
  // A trainer joining a node that already trains starts from the node's model:
  // a blocked trainer's replica is stable; otherwise the last round's average. A
  // gradient strategy's replicas hold gradients: the trainer starts (ipc::Start).
  bool initialized = false;
  TrainerSession* source = nullptr;
  for (auto* o : sessions_.all())
    if (o != s && (!source || o->waiting) && !strategy_->gradients) source = o;
  auto dst = arena_->slot(s->slot);
  if (source) {
    auto src = arena_->slot(source->slot);
    std::copy(src.begin(), src.end(), dst.begin());
    initialized = true;
  } else if (round_ > 0 && !round_running_ && !round_model_.empty()) {
    if (round_model_.data() != dst.data())
      std::copy(round_model_.begin(), round_model_.end(), dst.begin());
    initialized = true;
  } else if (!last_good_.empty()) {
    std::copy(last_good_.begin(), last_good_.end(), dst.begin());  // the node's last model
    initialized = true;
  }
  send_attach_ok(s, initialized);
}

void Daemon::send_attach_ok(TrainerSession* s, bool initialized) {
  if (initialized) arena_->push(s->slot);  // the node's model, into a 16-bit replica
  ipc::AttachOk ok;
  ok.node = config_.node_id;
  ok.nodes = config_.nodes();
  ok.slot = s->slot;
  ok.arena = arena_->name();
  ok.arena_bytes = arena_->size_bytes();
  ok.slot_offset = arena_->slot_offset(s->slot);
  ok.offsets = proto::tensor_offsets(*layout_);
  ok.strategy = config_.strategy.name;
  ok.gradients = strategy_->gradients;
  // With streamed syncs (--fragments F) a fragment every T / F steps.
  ok.period = tuned_period_ ? tuned_period_ : config_.strategy.period / config_.strategy.fragments;
  ok.fragments = config_.strategy.fragments;
  ok.overlap = config_.strategy.overlap_steps;
  ok.post_local = config_.strategy.post_local;
  ok.step = step_;
  ok.initialized = initialized;
  spdlog::info("trainer '{}' (pid {}, rank {}) attached in slot {}{}", s->name, s->pid,
               s->local_rank, s->slot,
               initialized ? fmt::format(", from the node's model at step {}", step_) : "");
  reply(s->route, ok);
}

void Daemon::finish_join() {
  auto result = worker_->take_join();
  if (!result) return;
  joining_ = false;
  const std::vector<float>* model = nullptr;
  if (!result->status) {
    spdlog::error("join: {}; the trainers start from their own model", result->status.message());
  }
  if (result->state) {
    model = &result->state->model;
    round_ = result->state->round;
    step_ = result->state->step;
  } else if (resume_) {
    model = &resume_->model;
    round_ = resume_->round;
    step_ = resume_->step;
  }
  if (model && model->size() != arena_->numel()) {
    spdlog::error("join: the model offered has {} elements, this node's {}: not taken",
                  model->size(), arena_->numel());
    model = nullptr;
    round_ = step_ = 0;
  }
  // Synchronous SGD's arena holds gradients: the trainers keep their own parameters.
  const bool hand_over = model != nullptr && !strategy_->gradients;
  if (hand_over) last_good_ = *model;
  for (const auto& route : pending_attach_) {
    TrainerSession* s = sessions_.find(route);
    if (!s) continue;  // exited while the node was joining
    if (hand_over) std::copy(model->begin(), model->end(), arena_->slot(s->slot).begin());
    send_attach_ok(s, hand_over);
  }
  pending_attach_.clear();
  resume_.reset();
  maybe_start_next();
}

void Daemon::on_sync(const std::string& route, const ipc::Sync& m) {
  TrainerSession* s = sessions_.find(route);
  if (!s) return reply(route, ipc::Error{"sync before attach"});
  if (s->waiting) return reply(route, ipc::Error{"sync while a sync is already pending"});
  s->waiting = true;
  s->sync_step = m.step;
  s->sync_whole = m.whole;
  if (m.losses > 0) watch_loss(m.loss, m.step);
  time_.wait_begins(s->slot, std::chrono::steady_clock::now());
  arena_->pull(s->slot);
  maybe_start_round();
}

void Daemon::on_start(const std::string& route) {
  TrainerSession* s = sessions_.find(route);
  if (!s) return reply(route, ipc::Error{"start before attach"});
  if (s->waiting) return reply(route, ipc::Error{"start while a sync is pending"});
  if (std::find(start_waiters_.begin(), start_waiters_.end(), route) != start_waiters_.end())
    return reply(route, ipc::Error{"start while a start is pending"});
  start_waiters_.push_back(route);
  time_.wait_begins(s->slot, std::chrono::steady_clock::now());
  arena_->pull(s->slot);
  if (start_done_) return finish_start();
  maybe_submit_start();
}

void Daemon::maybe_submit_start() {
  // The worker runs one job at a time: a trainer that starts while the node's round
  // runs (a late trainer of a gradient strategy) waits for its end.
  if (start_waiters_.empty() || starting_ || start_done_ || round_running_ || joining_) return;
  TrainerSession* s = sessions_.find(start_waiters_.front());
  if (!s) {
    start_waiters_.erase(start_waiters_.begin());
    return maybe_submit_start();
  }
  // Node 0's replica is the model (its first trainer's); any other node's is where the
  // worker writes node 0's.
  auto slot = arena_->slot(s->slot);
  start_model_.assign(slot.begin(), slot.end());
  starting_ = true;
  worker_->submit_start(start_model_);
}

void Daemon::finish_start() {
  Status status = Status::ok();
  if (starting_) {
    auto result = worker_->take_result();
    if (!result) return;
    starting_ = false;
    status = std::move(result->status);
    start_done_ = status.is_ok();
    if (start_done_ && !strategy_->gradients && last_good_.empty()) last_good_ = start_model_;
  }
  if (!status) spdlog::error("start-up: {}", status.message());
  const ipc::SyncOk ok = sync_ok(step_);
  for (const auto& route : start_waiters_) {
    TrainerSession* s = sessions_.find(route);
    if (!s) continue;  // exited meanwhile
    if (!status) {
      reply(route, ipc::Error{fmt::format("start-up: {}", status.message())});
      continue;
    }
    std::copy(start_model_.begin(), start_model_.end(), arena_->slot(s->slot).begin());
    arena_->push(s->slot);
    reply(route, ok);
  }
  start_waiters_.clear();
  maybe_start_next();
}

ipc::SyncOk Daemon::sync_ok(uint64_t step) const {
  ipc::SyncOk ok;
  ok.round = round_;
  ok.step = step;
  ok.traffic = worker_->traffic().totals();
  ok.period = tuned_period_;
  return ok;
}

void Daemon::on_detach(const std::string& route) {
  TrainerSession* s = sessions_.find(route);
  if (!s) return reply(route, ipc::Error{"detach before attach"});
  detach(s, "detached");
  reply(route, ipc::DetachOk{});
}

void Daemon::detach(TrainerSession* s, const std::string& why) {
  spdlog::info("trainer '{}' (pid {}) {}; {} trainer(s) left", s->name, s->pid, why,
               sessions_.size() - 1);
  std::string route = s->route;
  std::erase(participants_, route);
  time_.detached(s->slot, std::chrono::steady_clock::now());
  sessions_.remove(route);
  maybe_start_next();  // the others may have been waiting only for this one
}

void Daemon::handle_trainer_exit(int pidfd) {
  if (TrainerSession* s = sessions_.find_by_pidfd(pidfd)) detach(s, "exited without detaching");
}

void Daemon::handle_ipc_disconnects() {
  while (true) {
    // A monitor event: (uint16 event, uint32 value = the descriptor), then the endpoint.
    zmq::message_t event, endpoint;
    try {
      if (!ipc_monitor_.recv(event, zmq::recv_flags::dontwait)) return;
      if (event.more()) (void)ipc_monitor_.recv(endpoint, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      return;
    }
    if (event.size() < 6) continue;
    uint16_t kind = 0;
    uint32_t fd = 0;
    std::memcpy(&kind, event.data(), sizeof(kind));
    std::memcpy(&fd, static_cast<const char*>(event.data()) + 2, sizeof(fd));
    if (kind != ZMQ_EVENT_DISCONNECTED) continue;
    if (TrainerSession* s = sessions_.find_unwatched_by_connection(static_cast<int>(fd)))
      detach(s, "closed its connection without detaching");
  }
}

void Daemon::on_inspect(const std::string& route, const ipc::InspectRequest& q) {
  if (!worker_->inspect(q))
    return reply(route, ipc::Error{"this node is answering another gossipctl doctor or status "
                                   "--cluster; try again in a few seconds"});
  inspect_route_ = route;
}

void Daemon::handle_inspected() {
  auto answer = worker_->take_inspection();
  if (!answer) return;
  reply(inspect_route_, *answer);
  inspect_route_.clear();
}

void Daemon::on_stats(const std::string& route) {
  ipc::StatsReply r;
  r.node = config_.node_id;
  r.strategy = config_.strategy.name;
  r.round = round_;
  r.step = step_;
  r.trainers = static_cast<uint32_t>(sessions_.size());
  const auto& traffic = worker_->traffic();
  r.traffic = traffic.totals();
  r.traffic.dropped += ipc_dropped_;
  for (const auto& p : worker_->peers())
    r.peers.push_back({p.id, p.endpoint, traffic.peer_totals(p.id), traffic.silent_ms(p.id)});
  const auto t = time_.snapshot(std::chrono::steady_clock::now());
  const auto us = [](double s) { return static_cast<uint64_t>(s * 1e6); };
  r.timing = {us(t.trainer_wait_seconds),
              us(t.trainer_attached_seconds),
              t.rounds,
              us(t.round_seconds),
              us(t.last_round_seconds),
              t.last_round_payload_bytes,
              static_cast<uint64_t>(t.last_round_overlap * 1000 + 0.5)};
  reply(route, r);
}

void Daemon::guard_nonfinite() {
  const NonFiniteReport r = sanitize_update(round_model_, last_good_, nonfinite_policy_);
  if (r.count == 0) return;
  nonfinite_updates_.fetch_add(1, std::memory_order_relaxed);
  nonfinite_values_.fetch_add(r.count, std::memory_order_relaxed);
  const char* what = nonfinite_policy_ == NonFinitePolicy::kClip
                         ? "those elements take their last synchronized values"
                     : last_good_.empty() ? "the node contributes zeros this round"
                                          : "the node contributes its last synchronized model";
  count_failure(Failure::kNonFiniteUpdate);
  worker_->note_error(
      fmt::format("round {}: the node's update has {} NaN/Inf value(s)", round_, r.count));
  spdlog::error(
      "round {}: the node's update has {} NaN/Inf value(s), the first at {}: {} (--nonfinite {})",
      round_, r.count,
      layout_ ? describe_position(*layout_, r.first + (bucket_round_ ? bucket_.offset : 0))
              : fmt::format("element {}", r.first),
      what, config_.strategy.nonfinite);
}

void Daemon::watch_divergence() {
  if (config_.strategy.on_divergence == "off" || strategy_->gradients ||
      round_model_.size() != arena_->numel())
    return;
  // One pass over the model: next to a round of a small model nothing, of a billion
  // parameters a fraction of a second, so a large model is measured every 16th round.
  if (round_model_.size() > kDivergenceEveryRoundNumel && round_ % 16 != 0) return;
  auto reason = divergence_.observe(round_model_, round_ - 1);
  gauge_model_norm_.store(divergence_.norm(), std::memory_order_relaxed);
  if (reason) report_divergence();
}

void Daemon::watch_loss(double loss, uint64_t step) {
  gauge_trainer_loss_.store(loss, std::memory_order_relaxed);  // shown with the watch off too
  if (config_.strategy.on_divergence == "off") return;
  if (divergence_.observe_loss(loss, step)) report_divergence();
}

void Daemon::report_divergence() {
  // The servers' own optimizer is the likeliest cause where there is one.
  if (strategy_->fabric == sgd::Fabric::kServers && config_.strategy.ps_optimizer != "sgd")
    divergence_.add_cause(fmt::format(
        "; here --ps-optimizer {} steps along updates that carry the trainers' momentum "
        "already (--ps-optimizer sgd adds them as they are)",
        config_.strategy.ps_optimizer));
  count_failure(Failure::kDiverged);
  worker_->note_error(divergence_.reason());
  spdlog::error("{}{}", divergence_.reason(),
                config_.strategy.on_divergence == "stop"
                    ? " (--on-divergence stop: the trainers' syncs fail from now on)"
                    : "");
}

void Daemon::publish_gauges() {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  gauge_rounds_.store(round_, kRelaxed);
  gauge_step_.store(step_, kRelaxed);
  gauge_trainers_.store(static_cast<uint32_t>(sessions_.size()), kRelaxed);
  worker_->set_trainers(static_cast<uint32_t>(sessions_.size()));
  gauge_ipc_dropped_.store(ipc_dropped_, kRelaxed);
  const auto time = time_.snapshot(std::chrono::steady_clock::now());
  std::lock_guard lock(time_mu_);
  time_published_ = time;
}

MetricsSnapshot Daemon::metrics_snapshot() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  MetricsSnapshot s;
  s.node = config_.node_id;
  s.strategy = config_.strategy.name;
  s.codec = config_.strategy.codec;
  s.transport = config_.strategy.transport;
  s.topology = strategy_->fabric == sgd::Fabric::kAllReduce ? "complete"
               : strategy_->fabric == sgd::Fabric::kServers ? "servers"
                                                            : config_.topology_spec();
  s.rounds = gauge_rounds_.load(kRelaxed);
  s.step = gauge_step_.load(kRelaxed);
  s.trainers = gauge_trainers_.load(kRelaxed);
  s.ipc_dropped = gauge_ipc_dropped_.load(kRelaxed);
  s.nonfinite_updates = nonfinite_updates_.load(kRelaxed);
  s.nonfinite_values = nonfinite_values_.load(kRelaxed);
  s.model_norm = gauge_model_norm_.load(kRelaxed);
  s.trainer_loss = gauge_trainer_loss_.load(kRelaxed);
  const auto& traffic = worker_->traffic();
  const auto peer = [&](uint32_t id, std::string name, std::optional<bool> connected) {
    const uint64_t silent = traffic.silent_ms(id);
    s.peers.push_back(
        {std::move(name), traffic.peer_totals(id),
         silent == ipc::kNeverHeard ? std::nullopt : std::optional<double>(silent / 1000.0),
         connected});
  };
  for (const auto& p : worker_->peers()) {
    peer(p.id, std::to_string(p.id),
         p.banned ? std::nullopt : std::optional(traffic.link_up(p.id)));
    s.configured_peers += p.banned ? 0 : 1;
  }
  peer(peers::TrafficCounters::kUnknownPeer, "unknown", std::nullopt);
  for (size_t k = 0; k < static_cast<size_t>(Failure::kCount); ++k)
    s.failures.push_back(
        {failure_name(static_cast<Failure>(k)), failures(static_cast<Failure>(k))});
  for (uint8_t k = 1; k <= proto::kMaxKind; ++k)
    s.unhandled.push_back({proto::kind_name(static_cast<proto::Kind>(k)),
                           traffic.unhandled(static_cast<proto::Kind>(k))});
  s.allreduce_rounds = worker_->allreduce_rounds();
  for (size_t k = 0; k < static_cast<size_t>(Refusal::kCount); ++k)
    s.refused.push_back({refusal_name(static_cast<Refusal>(k)), refusals(static_cast<Refusal>(k))});
  for (auto& g : worker_->strategy_gauges())
    s.strategy_gauges.push_back({g.name, g.help, g.value, g.type, g.alias});
  s.transfers = worker_->transfers();
  std::lock_guard lock(time_mu_);
  s.time = time_published_;
  return s;
}

}  // namespace gossip::daemon

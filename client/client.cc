#include "gossip/client.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <zmq.hpp>

#include "client/shm_mapping.h"
#include "proto/ipc.h"

namespace gossip {

namespace ipc = proto::ipc;

namespace {

Traffic to_traffic(const ipc::Traffic& t) {
  return Traffic{t.payload_sent, t.payload_recv, t.wire_sent, t.wire_recv,
                 t.msgs_sent,    t.msgs_recv,    t.dropped};
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  zmq::context_t context{1};
  zmq::socket_t socket;
  client::ShmMapping slot;
  bool attached = false;
  uint64_t period = 1;
  uint64_t post_local = 0;
  uint64_t overlap = 0;  // attach_ok's: a sync `overlap` steps after each of period's
  // Tune auto (sync_ok's period): the daemon moves the period, from the step of the
  // sync that said so.
  uint64_t anchor = 0;
  uint64_t steps = 0;
  // report_loss()'s since the last sync, which carries their mean to the daemon.
  double loss_sum = 0;
  uint64_t losses = 0;
  Traffic last_traffic;
  uint64_t round = 0;
  // After a timeout a late reply may still arrive and would answer the next request:
  // the connection is unusable from then on.
  std::string broken;

  // One request, one reply; an Error reply becomes a Status, a Shutdown too.
  Result<ipc::Message> request(const ipc::Message& m) { return request(m, options.timeout); }
  Result<ipc::Message> request(const ipc::Message& m, std::chrono::milliseconds timeout) {
    if (buckets_out > 0)
      return Status::invalid(
          fmt::format("'{}' while {} bucket(s) of this step are unanswered: wait_buckets() first",
                      ipc::message_name(m), buckets_out));
    GOSSIP_RETURN_IF_ERROR(send(m));
    return receive(ipc::message_name(m), timeout);
  }
  Status send(const ipc::Message& m) {
    if (!broken.empty()) return Status::closed("connection to gossipd unusable: " + broken);
    std::string body = ipc::encode(m);
    try {
      if (!socket.send(zmq::buffer(body), zmq::send_flags::dontwait))
        return Status::io_error("cannot send to gossipd: queue full");
      return Status::ok();
    } catch (const zmq::error_t& e) {
      return Status::io_error(fmt::format("gossipd at {}: {}", options.endpoint, e.what()));
    }
  }
  // The next reply (to the request named `what`), waiting at most `timeout`. No reply
  // in time breaks the connection (a late one would answer the next request), unless
  // `may_be_absent`: then it is Status::not_found and the connection stays usable.
  Result<ipc::Message> receive(const char* what, std::chrono::milliseconds timeout,
                               bool may_be_absent = false) {
    if (!broken.empty()) return Status::closed("connection to gossipd unusable: " + broken);
    try {
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, timeout) == 0) {
        if (may_be_absent) return Status::not_found("no reply yet");
        broken = fmt::format("gossipd at {} did not answer '{}' within {} ms", options.endpoint,
                             what, timeout.count());
        return Status::timeout(broken);
      }
      zmq::message_t reply;
      if (!socket.recv(reply, zmq::recv_flags::dontwait))
        return Status::io_error("reply from gossipd vanished");
      auto decoded = ipc::decode(reply.data(), reply.size());
      if (!decoded)
        return Status::protocol("bad reply from gossipd: " + decoded.status().message());
      if (auto* e = std::get_if<ipc::Error>(&*decoded)) return Status::invalid(e->message);
      if (auto* s = std::get_if<ipc::Shutdown>(&*decoded)) {
        attached = false;
        return Status::closed("gossipd shut down: " + s->reason);
      }
      return decoded;
    } catch (const zmq::error_t& e) {
      return Status::io_error(fmt::format("gossipd at {}: {}", options.endpoint, e.what()));
    }
  }

  // Buckets of this step handed in (SyncRange) and not answered yet, and the first
  // failure among the answers taken.
  uint64_t buckets_out = 0;
  bool step_sent = false;  // the step's last bucket went out
  uint64_t answered = 0;   // this step's buckets answered so far
  Status bucket_failure;
  // One bucket's answer; false when none is there (may_be_absent).
  Result<bool> take_bucket_answer(std::chrono::milliseconds timeout, bool may_be_absent) {
    auto r = receive("sync_range", timeout, may_be_absent);
    if (!r && may_be_absent && r.status().code() == Status::Code::kNotFound) return false;
    --buckets_out;
    if (!r) {
      if (bucket_failure) bucket_failure = r.status();
      if (!broken.empty() || !attached) buckets_out = 0;  // nothing more will come
      return true;
    }
    auto* ok = std::get_if<ipc::SyncOk>(&*r);
    if (!ok) {
      if (bucket_failure)
        bucket_failure = Status::protocol(
            fmt::format("expected sync_ok for a bucket, got {}", ipc::message_name(*r)));
      return true;
    }
    last_traffic = to_traffic(ok->traffic);
    round = ok->round;
    return true;
  }

  bool syncs_at(uint64_t step) const {
    return (step >= anchor && (step - anchor) % period == 0) || step <= post_local ||
           (overlap > 0 && overlap < period && step % period == overlap);
  }

  // whole: the whole model whatever the schedule (see ipc::Sync).
  Result<StepResult> synchronize(bool whole = false) {
    const double loss = losses > 0 ? loss_sum / static_cast<double>(losses) : 0.0;
    auto r = request(ipc::Sync{steps, whole, loss, losses});
    loss_sum = 0;
    losses = 0;
    if (!r) return r.status();
    auto* ok = std::get_if<ipc::SyncOk>(&*r);
    if (!ok)
      return Status::protocol(fmt::format("expected sync_ok, got {}", ipc::message_name(*r)));
    last_traffic = to_traffic(ok->traffic);
    round = ok->round;
    // The node's step, which moves when an elastic ring takes the node back at the
    // members' step; the trainer's schedule follows it.
    steps = ok->step;
    if (ok->period != 0) period = ok->period, anchor = steps;
    return StepResult{steps, true, round, last_traffic};
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  if (!impl_ || !impl_->attached) return;
  // A courtesy with a short bound: a daemon that is gone must not hold up the
  // trainer's exit, and a live one notices the exit through its pidfd anyway.
  impl_->attached = false;
  (void)impl_->request(ipc::Detach{}, std::min<std::chrono::milliseconds>(
                                          impl_->options.timeout, std::chrono::milliseconds(1000)));
}

namespace {

// options.startup_timeout, or GOSSIP_STARTUP_TIMEOUT's seconds when it is 0.
Result<std::chrono::milliseconds> startup_timeout_of(const ClientOptions& options) {
  if (options.startup_timeout.count() > 0) return options.startup_timeout;
  const char* env = std::getenv("GOSSIP_STARTUP_TIMEOUT");
  if (!env || !*env) return std::chrono::milliseconds(0);
  char* end = nullptr;
  const double seconds = std::strtod(env, &end);
  if (end == env || *end != '\0' || !std::isfinite(seconds) || seconds < 0 || seconds > 86400)
    return Status::invalid(fmt::format(
        "GOSSIP_STARTUP_TIMEOUT='{}' is not a number of seconds between 0 and 86400", env));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

Result<std::unique_ptr<Client>> Client::connect(const ClientOptions& options) {
  constexpr std::string_view kIpc = "ipc://";
  if (options.endpoint.starts_with(kIpc)) {
    std::string path = options.endpoint.substr(kIpc.size());
    auto wait = startup_timeout_of(options);
    if (!wait) return wait.status();
    // A trainer may start before its daemon (a launcher, a pod's containers): look
    // again with back-off, 10 ms doubling to 500 ms, until the start-up timeout.
    const auto end = std::chrono::steady_clock::now() + *wait;
    auto pause = std::chrono::milliseconds(10);
    int tries = 1;
    while (!std::filesystem::exists(path)) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= end)
        return Status::not_found(fmt::format(
            "no gossipd socket at {}{} (is the daemon running with this run dir?)", path,
            wait->count() > 0 ? fmt::format(" after waiting {:.1f} s ({} looks)",
                                            static_cast<double>(wait->count()) / 1000.0, tries)
                              : std::string()));
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, end - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
      ++tries;
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  try {
    impl->socket = zmq::socket_t(impl->context, zmq::socket_type::dealer);
    impl->socket.set(zmq::sockopt::linger, 0);
    impl->socket.connect(options.endpoint);
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("cannot connect to {}: {}", options.endpoint, e.what()));
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

// The public enum is the wire's, value for value.
static_assert(static_cast<int>(DType::kF32) == static_cast<int>(proto::DType::kF32) &&
              static_cast<int>(DType::kBF16) == static_cast<int>(proto::DType::kBF16) &&
              static_cast<int>(DType::kF16) == static_cast<int>(proto::DType::kF16));

Result<Model> Client::attach(const std::vector<TensorDesc>& layout) {
  if (impl_->attached) return Status::invalid("already attached");
  ipc::Attach a;
  a.trainer = impl_->options.trainer;
  a.local_rank = impl_->options.local_rank;
  a.pid = static_cast<int32_t>(::getpid());
  for (const auto& t : layout)
    a.layout.tensors.push_back({t.name, static_cast<proto::DType>(t.dtype), t.numel});
  GOSSIP_RETURN_IF_ERROR(proto::validate_layout(a.layout));
  auto r = impl_->request(a);
  if (!r) return r.status();
  auto* ok = std::get_if<ipc::AttachOk>(&*r);
  if (!ok)
    return Status::protocol(fmt::format("expected attach_ok, got {}", ipc::message_name(*r)));
  if (ok->offsets.size() != layout.size())
    return Status::protocol(fmt::format("daemon sent {} tensor offsets for {} tensors",
                                        ok->offsets.size(), layout.size()));
  if (ok->period == 0) return Status::protocol("daemon sent period 0");
  uint64_t numel = proto::padded_numel(a.layout);
  auto offsets = proto::tensor_offsets(a.layout);
  if (offsets != ok->offsets)
    return Status::protocol("daemon's tensor offsets differ from the layout's");
  const size_t element = proto::dtype_size(a.layout.dtype());
  auto mapping = client::ShmMapping::map(ok->arena, ok->slot_offset, numel * element);
  if (!mapping) return mapping.status();

  impl_->slot = std::move(mapping).value();
  impl_->attached = true;
  impl_->period = ok->period;
  impl_->overlap = ok->overlap;
  impl_->post_local = ok->post_local;
  impl_->steps = ok->step;
  Model m;
  std::byte* base = impl_->slot.data();
  for (size_t i = 0; i < layout.size(); ++i) {
    m.bytes.emplace_back(base + offsets[i] * element, layout[i].numel * element);
    if (a.layout.dtype() == proto::DType::kF32)
      m.tensors.emplace_back(reinterpret_cast<float*>(base) + offsets[i], layout[i].numel);
  }
  m.initialized = ok->initialized;
  m.start_step = ok->step;
  m.node = ok->node;
  m.nodes = ok->nodes;
  m.strategy = ok->strategy;
  m.gradients = ok->gradients;
  m.fragments = ok->fragments;
  m.overlap = ok->overlap;
  return m;
}

Result<StepResult> Client::step() {
  if (!impl_->attached) return Status::invalid("step before attach");
  ++impl_->steps;
  if (!impl_->syncs_at(impl_->steps))
    return StepResult{impl_->steps, false, impl_->round, impl_->last_traffic};
  return impl_->synchronize();
}

Result<StepResult> Client::sync() {
  if (!impl_->attached) return Status::invalid("sync before attach");
  return impl_->synchronize(true);
}

Result<StepResult> Client::start() {
  if (!impl_->attached) return Status::invalid("start before attach");
  auto r = impl_->request(ipc::Start{});
  if (!r) return r.status();
  auto* ok = std::get_if<ipc::SyncOk>(&*r);
  if (!ok) return Status::protocol(fmt::format("expected sync_ok, got {}", ipc::message_name(*r)));
  impl_->last_traffic = to_traffic(ok->traffic);
  return StepResult{impl_->steps, false, impl_->round, impl_->last_traffic};
}

Status Client::send_bucket(uint64_t offset, uint64_t numel, bool last) {
  if (!impl_->attached) return Status::invalid("send_bucket before attach");
  if (impl_->step_sent)
    return Status::invalid("send_bucket after the step's last bucket: wait_buckets() first");
  GOSSIP_RETURN_IF_ERROR(impl_->send(ipc::SyncRange{impl_->steps + 1, offset, numel, last}));
  ++impl_->buckets_out;
  impl_->step_sent = last;
  return Status::ok();
}

Result<uint64_t> Client::buckets_answered() {
  uint64_t n = 0;
  while (impl_->buckets_out > 0) {
    auto got = impl_->take_bucket_answer(std::chrono::milliseconds(0), true);
    if (!got) return got.status();
    if (!*got) break;
    ++n;
  }
  impl_->answered += n;
  return impl_->answered;
}

Result<StepResult> Client::wait_buckets() {
  if (!impl_->step_sent) return Status::invalid("wait_buckets before the step's last bucket");
  while (impl_->buckets_out > 0) {
    auto got = impl_->take_bucket_answer(impl_->options.timeout, false);
    if (!got) return got.status();
  }
  impl_->step_sent = false;
  impl_->answered = 0;
  ++impl_->steps;
  Status failure = std::move(impl_->bucket_failure);
  impl_->bucket_failure = Status::ok();
  if (!failure) return failure;
  return StepResult{impl_->steps, true, impl_->round, impl_->last_traffic};
}

void Client::report_loss(double loss) {
  impl_->loss_sum += loss;
  ++impl_->losses;
}

bool Client::next_step_syncs() const { return impl_->syncs_at(impl_->steps + 1); }

uint64_t Client::steps() const { return impl_->steps; }

Result<Traffic> Client::traffic() {
  auto r = impl_->request(ipc::StatsRequest{});
  if (!r) return r.status();
  auto* s = std::get_if<ipc::StatsReply>(&*r);
  if (!s)
    return Status::protocol(fmt::format("expected stats_reply, got {}", ipc::message_name(*r)));
  return to_traffic(s->traffic);
}

Result<NodeStatus> Client::status() {
  auto r = impl_->request(ipc::StatsRequest{});
  if (!r) return r.status();
  auto* s = std::get_if<ipc::StatsReply>(&*r);
  if (!s)
    return Status::protocol(fmt::format("expected stats_reply, got {}", ipc::message_name(*r)));
  NodeStatus out{s->node, s->strategy, s->round, s->step, s->trainers, to_traffic(s->traffic), {}};
  const ipc::Timing& t = s->timing;
  out.trainer_wait_seconds = static_cast<double>(t.trainer_wait_us) / 1e6;
  out.trainer_attached_seconds = static_cast<double>(t.trainer_attached_us) / 1e6;
  out.rounds_timed = t.rounds;
  out.round_seconds = static_cast<double>(t.round_us) / 1e6;
  out.last_round_seconds = static_cast<double>(t.last_round_us) / 1e6;
  out.last_round_payload_bytes = t.last_round_payload;
  out.last_round_overlap = static_cast<double>(t.last_overlap_permille) / 1000;
  for (const auto& p : s->peers) {
    out.peers.push_back(
        {p.id, p.endpoint, to_traffic(p.traffic),
         p.silent_ms == ipc::kNeverHeard ? std::nullopt : std::optional<uint64_t>(p.silent_ms)});
  }
  return out;
}

Status Client::detach() {
  if (!impl_->attached) return Status::ok();
  impl_->attached = false;
  auto r = impl_->request(ipc::Detach{});
  impl_->slot = client::ShmMapping();
  if (!r) return r.status();
  return Status::ok();
}

}  // namespace gossip

#include "peers/zmq_transport.h"

// <linux/tcp.h>, not <netinet/tcp.h>: glibc's tcp_info stops before
// tcpi_delivery_rate (Linux 4.9).
#include <fmt/format.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

#include "base/refusals.h"
#include "proto/printable.h"

namespace gossip::peers {

namespace {

// Printable form of an untrusted routing id, for logs.
std::string printable(const zmq::message_t& m) {
  return proto::printable_text(std::string_view(m.data<char>(), m.size()), 32);
}

// A payload in a peer's queue until ZeroMQ lets go of it (from its I/O thread).
struct Queued {
  std::atomic<uint64_t>* pending;  // zero-copy: the caller waits on it to reuse the buffer
  std::atomic<uint64_t>* queued_bytes;
  std::atomic<uint64_t>* queued;
  uint64_t bytes;
  std::shared_ptr<const std::vector<std::byte>> keep;  // a shared send's buffer
};

void release_queued(void* /*data*/, void* hint) {
  auto* q = static_cast<Queued*>(hint);
  q->queued_bytes->fetch_sub(q->bytes, std::memory_order_acq_rel);
  if (q->pending) q->pending->fetch_sub(1, std::memory_order_acq_rel);
  std::atomic<uint64_t>* queued = q->queued;
  delete q;
  queued->fetch_sub(1, std::memory_order_acq_rel);  // last: the entry may go then
}

}  // namespace

namespace {
// What follows "node-<digits>" in a routing id without CURVE ("" or ".<run id>"), or
// nothing where it is not one.
std::optional<std::string_view> run_part(std::string_view rid, uint32_t& id) {
  constexpr std::string_view kPrefix = "node-";
  if (!rid.starts_with(kPrefix)) return std::nullopt;
  const auto digits = rid.substr(kPrefix.size());
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (ec != std::errc()) return std::nullopt;
  return std::string_view(ptr, static_cast<size_t>(digits.data() + digits.size() - ptr));
}
}  // namespace

std::string routing_id_for(uint32_t node, std::string_view run_id) {
  return run_id.empty() ? fmt::format("node-{}", node) : fmt::format("node-{}.{}", node, run_id);
}

ZmqTransport::ZmqTransport(uint32_t self, std::vector<Peer> peers)
    : self_(self),
      peers_(std::move(peers)),
      traffic_(ids_of(peers_)),
      context_(1),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  for (const Peer& p : peers_)
    if (p.banned) banned_.insert(p.id);
}

ZmqTransport::~ZmqTransport() {
  monitor_.close();
  inbound_.close();
  for (auto& o : outbound_) {
    o->events.close();
    o->socket.close();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  zap_.reset();
  // Terminating the context waits out the linger and frees unsent zero-copy
  // messages, whose release callback decrements Outbound::pending: it must happen
  // while outbound_ still exists.
  context_.close();
}

Result<std::unique_ptr<ZmqTransport>> ZmqTransport::create(uint32_t self, const std::string& listen,
                                                           const std::vector<Peer>& peers,
                                                           const TransportOptions& options) {
  std::vector<Peer> sorted = peers;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.id < b.id; });
  std::unique_ptr<ZmqTransport> t(new ZmqTransport(self, sorted));
  const bool curve = !options.secret_key.empty();
  std::string public_key;
  if (curve) {
    if (!curve_available())
      return Status::invalid("a secret key is set but this libzmq has no CURVE (libsodium)");
    auto pub = curve_public_of(options.secret_key);
    if (!pub) return pub.status();
    public_key = *pub;
    std::map<std::string, uint32_t> allowed;
    for (const auto& p : sorted) {
      if (p.public_key.empty())
        return Status::invalid(fmt::format("peer {} has no public key", p.id));
      GOSSIP_RETURN_IF_ERROR(
          check_curve_key(p.public_key, fmt::format("peer {}'s public key", p.id)));
      if (p.banned) {  // the authenticator refuses its handshakes
        spdlog::warn("peer {} is banned: its key is refused and nothing is sent to it", p.id);
        continue;
      }
      allowed[p.public_key] = p.id;
    }
    // Before the ROUTER binds: a handshake without a handler would be admitted.
    // A banned peer's key cannot come back in as a joiner's.
    auto zap = ZapHandler::start(t->context_, allowed, {});
    if (!zap) return zap.status();
    t->zap_ = std::move(zap).value();
    for (const Peer& p : sorted)
      if (p.banned) t->zap_->ban(p.public_key);
    GOSSIP_RETURN_IF_ERROR(t->set_admit_keys(options.admit_keys));
  }
  try {
    t->inbound_ = zmq::socket_t(t->context_, zmq::socket_type::router);
    if (curve) {
      t->inbound_.set(zmq::sockopt::curve_server, 1);
      t->inbound_.set(zmq::sockopt::curve_secretkey, options.secret_key);
      t->inbound_.set(zmq::sockopt::zap_domain, "gossipd");
    }
    // Headers and payload are bounded by the wire format; ZeroMQ drops the
    // connection of a peer that announces a bigger frame before buffering it.
    t->inbound_.set(zmq::sockopt::maxmsgsize,
                    static_cast<int64_t>(proto::kMaxPayloadBytes + proto::kMaxHeaderBytes));
    t->inbound_.set(zmq::sockopt::router_handover, 1);  // a restarted peer takes over its id
    t->inbound_.set(zmq::sockopt::rcvbuf, options.socket_buffer_bytes);
    t->inbound_.set(zmq::sockopt::linger, 0);
    // Before bind, so that no accepted connection goes unwatched.
    const std::string events = fmt::format("inproc://inbound-events-{}", fmt::ptr(t.get()));
    if (zmq_socket_monitor(t->inbound_.handle(), events.c_str(),
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED) != 0)
      throw zmq::error_t();
    t->monitor_ = zmq::socket_t(t->context_, zmq::socket_type::pair);
    t->monitor_.connect(events);
    // One message's worth: the largest header and payload, and the handshake.
    t->watchdog_ = std::make_unique<InboundWatchdog>(
        InboundWatchdog::wire_bytes(proto::kMaxPayloadBytes, curve) +
            InboundWatchdog::wire_bytes(proto::kMaxHeaderBytes, curve) + (64 << 10),
        curve);
    t->inbound_.bind(listen);
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("cannot listen on {}: {}", listen, e.what()));
  }
  t->options_ = options;
  t->public_key_ = public_key;
  for (const auto& p : sorted)
    if (!(p.banned && curve)) GOSSIP_RETURN_IF_ERROR(t->connect_outbound(p));
  return t;
}

Status ZmqTransport::connect_outbound(const Peer& p) {
  const bool curve = !options_.secret_key.empty();
  auto out = std::make_unique<Outbound>();
  out->peer = p;
  std::string theirs_rid;  // under CURVE: the routing id it presents to this node
  try {
    out->socket = zmq::socket_t(context_, zmq::socket_type::dealer);
    if (curve) {
      auto rid = curve_routing_id(self_, options_.secret_key, p.public_key);
      if (!rid) return rid.status().with_context(fmt::format("peer {}", p.id));
      out->socket.set(zmq::sockopt::routing_id, *rid);
      auto theirs = curve_routing_id(p.id, options_.secret_key, p.public_key);
      if (!theirs) return theirs.status().with_context(fmt::format("peer {}", p.id));
      theirs_rid = *theirs;
      out->socket.set(zmq::sockopt::curve_serverkey, p.public_key);
      out->socket.set(zmq::sockopt::curve_publickey, public_key_);
      out->socket.set(zmq::sockopt::curve_secretkey, options_.secret_key);
    } else {
      out->socket.set(zmq::sockopt::routing_id, routing_id_for(self_, options_.run_id));
    }
    out->socket.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options_.reconnect_min.count()));
    out->socket.set(zmq::sockopt::reconnect_ivl_max,
                    static_cast<int>(options_.reconnect_max.count()));
    out->socket.set(zmq::sockopt::tcp_maxrt, static_cast<int>(options_.link_silence.count()));
    out->socket.set(zmq::sockopt::connect_timeout,
                    static_cast<int>(options_.connect_timeout.count()));
    out->socket.set(zmq::sockopt::sndbuf, options_.socket_buffer_bytes);
    out->socket.set(zmq::sockopt::linger, static_cast<int>(options_.linger.count()));
    // What the link does (connected, refused our key...), for gossipctl doctor.
    // A serial, not the id alone: a removed peer's name is freed only later (libzmq's
    // reaper), and the same id may be added again meanwhile.
    const std::string ev =
        fmt::format("inproc://outbound-events-{}-{}-{}", fmt::ptr(this), p.id, ++monitors_);
    if (zmq_socket_monitor(
            out->socket.handle(), ev.c_str(),
            ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
      throw zmq::error_t();
    out->events = zmq::socket_t(context_, zmq::socket_type::pair);
    out->events.connect(ev);
    out->socket.connect(p.endpoint);
  } catch (const zmq::error_t& e) {
    return Status::io_error(
        fmt::format("cannot connect to peer {} at {}: {}", p.id, p.endpoint, e.what()));
  }
  if (!theirs_rid.empty()) routing_ids_[theirs_rid] = p.id;  // only once it is whole
  outbound_.push_back(std::move(out));
  return Status::ok();
}

Status ZmqTransport::add_peer(const Peer& peer) {
  if (peer.id == self_ ||
      std::any_of(peers_.begin(), peers_.end(), [&](const Peer& p) { return p.id == peer.id; }))
    return Status::invalid(fmt::format("node {} is already a member", peer.id));
  if (zap_) {
    GOSSIP_RETURN_IF_ERROR(
        check_curve_key(peer.public_key, fmt::format("node {}'s public key", peer.id)));
    // A key no one listed for joining: a member's add cannot bring in a stranger.
    if (!zap_->admits(peer.public_key))
      return Status::invalid(
          fmt::format("node {}'s public key {} is not on this node's --admit-keys list", peer.id,
                      peer.public_key));
    for (const auto& p : peers_)
      if (p.public_key == peer.public_key)
        return Status::invalid(fmt::format("node {}'s public key is node {}'s", peer.id, p.id));
  }
  if (!traffic_.add_peer(peer.id))
    return Status::invalid(
        fmt::format("this node took {} joined members already", TrafficCounters::kMaxJoined));
  if (zap_) GOSSIP_RETURN_IF_ERROR(zap_->allow(peer.public_key, peer.id));
  if (Status st = connect_outbound(peer); !st) {
    if (zap_) zap_->disallow(peer.public_key);
    return st;
  }
  peers_.insert(std::upper_bound(peers_.begin(), peers_.end(), peer,
                                 [](const Peer& a, const Peer& b) { return a.id < b.id; }),
                peer);
  return Status::ok();
}

void ZmqTransport::close_outbound(uint32_t peer) {
  // Its monitor closes with it: the link's last state must not outlive the link.
  traffic_.forget_link(peer);
  for (auto it = outbound_.begin(); it != outbound_.end(); ++it)
    if ((*it)->peer.id == peer) {
      (*it)->events.close();
      (*it)->socket.close();
      removed_.push_back(std::move(*it));
      outbound_.erase(it);
      break;
    }
}

void ZmqTransport::remove_peer(uint32_t peer) {
  const auto p =
      std::find_if(peers_.begin(), peers_.end(), [&](const Peer& q) { return q.id == peer; });
  if (p == peers_.end()) return;
  if (zap_ && !p->public_key.empty()) zap_->disallow(p->public_key);
  peers_.erase(p);
  for (auto it = routing_ids_.begin(); it != routing_ids_.end();)
    it = it->second == peer ? routing_ids_.erase(it) : std::next(it);
  close_outbound(peer);
  std::erase_if(removed_, [](const auto& o) { return o->queued.load() == 0; });
  last_refusal_.erase(peer);
}

Status ZmqTransport::reply_to_joiner(const std::string& route, uint64_t round,
                                     const proto::Body& body, std::string_view payload) {
  const std::string head = proto::encode_head(self_, round, body, payload.size(), epoch());
  try {
    // ROUTER sends to the connection the request came on; a joiner gone meanwhile is
    // dropped silently (not mandatory routing), as a message to a peer that is down.
    if (!inbound_.send(zmq::buffer(route), zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !inbound_.send(zmq::buffer(head), zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !inbound_.send(zmq::buffer(payload), zmq::send_flags::dontwait))
      return Status::io_error("the joiner's queue is full");
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("answer to a joiner failed: {}", e.what()));
  }
  return Status::ok();
}

Status ZmqTransport::no_link(uint32_t peer) const {
  // As to a peer that is down: the message is lost, and the strategies' timeouts for
  // a silent peer take it from there.
  for (const auto& p : peers_)
    if (p.id == peer && p.banned) return Status::ok();
  return Status::not_found(fmt::format("no peer {}", peer));
}

ZmqTransport::Outbound* ZmqTransport::outbound(uint32_t peer) {
  for (auto& o : outbound_)
    if (o->peer.id == peer) return o.get();
  return nullptr;
}

uint64_t ZmqTransport::pending_sends(uint32_t peer) const {
  for (const auto& o : outbound_)
    if (o->peer.id == peer) return o->pending.load(std::memory_order_acquire);
  return 0;
}

Status ZmqTransport::send_frames(Outbound& out, uint64_t round, const proto::Body& body,
                                 zmq::message_t* payload) {
  const uint64_t payload_bytes = payload ? payload->size() : 0;
  std::string head = proto::encode_head(self_, round, body, payload_bytes, epoch());
  uint64_t wire = proto::zmtp_frame_overhead(head.size()) + head.size();
  if (payload) wire += proto::zmtp_frame_overhead(payload_bytes) + payload_bytes;
  try {
    // A peer that is down accumulates a queue that drains once it is up; at the
    // high-water mark (a peer down for long) sending fails rather than blocking
    // the round. The payload frame follows its header atomically: ZeroMQ accepts
    // the rest of a multipart message once its first frame is in.
    auto flags =
        payload ? zmq::send_flags::sndmore | zmq::send_flags::dontwait : zmq::send_flags::dontwait;
    if (!out.socket.send(zmq::buffer(head), flags))
      return Status::io_error(fmt::format("send queue to peer {} is full", out.peer.id));
    if (payload && !out.socket.send(std::move(*payload), zmq::send_flags::dontwait))
      return Status::io_error(fmt::format("send queue to peer {} is full", out.peer.id));
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("send to peer {} failed: {}", out.peer.id, e.what()));
  }
  traffic_.count_sent(out.peer.id, payload_bytes, wire);
  return Status::ok();
}

Status ZmqTransport::send(uint32_t peer, uint64_t round, const proto::Body& body) {
  Outbound* out = outbound(peer);
  if (!out) return no_link(peer);
  return send_frames(*out, round, body, nullptr);
}

Status ZmqTransport::send_queued(Outbound& out, uint64_t round, const proto::Body& body,
                                 const std::byte* data, size_t size,
                                 std::shared_ptr<const std::vector<std::byte>> keep,
                                 bool zero_copy) {
  // A peer that is down or stalled drains nothing: without a bound its queue would hold
  // up to ZeroMQ's 1000 messages, a thousand models (a soak's neighbors of a killed node
  // grew to 450 MB in the 5 s it was down, and the node, restarted, got them all).
  const uint64_t queued = out.queued_bytes.load(std::memory_order_acquire);
  if (queued > 0 && queued + size > queue_budget_) {
    if (!std::exchange(out.over_budget, true))
      spdlog::warn(
          "peer {}: {:.1f} MiB wait in its send queue (at most {:.1f} MiB): nothing more is "
          "queued for it until it drains (down, cut off or stalled)",
          out.peer.id, static_cast<double>(queued) / (1 << 20),
          static_cast<double>(queue_budget_) / (1 << 20));
    return Status::io_error(fmt::format("send queue to peer {} is full ({:.1f} MiB)", out.peer.id,
                                        static_cast<double>(queued) / (1 << 20)));
  }
  out.over_budget = false;
  out.queued_bytes.fetch_add(size, std::memory_order_acq_rel);
  out.queued.fetch_add(1, std::memory_order_acq_rel);
  if (zero_copy) out.pending.fetch_add(1, std::memory_order_acq_rel);
  auto* hint = new Queued{zero_copy ? &out.pending : nullptr, &out.queued_bytes, &out.queued, size,
                          std::move(keep)};
  // ZeroMQ calls release_queued from its I/O thread once the bytes are in the kernel;
  // on a failed send, message_t's destructor does, so nothing stays counted.
  zmq::message_t msg(const_cast<std::byte*>(data), size, release_queued, hint);
  return send_frames(out, round, body, &msg);
}

Status ZmqTransport::send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                                    std::span<const std::byte> payload) {
  Outbound* out = outbound(peer);
  if (!out) return no_link(peer);
  return send_queued(*out, round, body, payload.data(), payload.size(), nullptr, true);
}

Status ZmqTransport::send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                                 std::shared_ptr<const std::vector<std::byte>> buffer) {
  Outbound* out = outbound(peer);
  if (!out) return no_link(peer);
  const std::byte* data = buffer->data();
  const size_t size = buffer->size();
  return send_queued(*out, round, body, data, size, std::move(buffer), false);
}

uint64_t ZmqTransport::queued_bytes(uint32_t peer) const {
  for (const auto& o : outbound_)
    if (o->peer.id == peer) return o->queued_bytes.load(std::memory_order_acquire);
  return 0;
}

void ZmqTransport::note_dropped(uint32_t peer, const std::string& why) {
  traffic_.count_dropped(peer);
  last_refusal_[peer] = why;
  spdlog::warn("dropped message from peer {}: {}", peer, why);
  report_offender(peer);
}

void ZmqTransport::report_offender(uint32_t peer) {
  const uint64_t n = traffic_.peer_totals(peer).dropped;
  // At 10, 100, 1000, ... refusals: loud enough to be seen, rare enough to be read.
  uint64_t mark = 10;
  while (mark < n && mark <= UINT64_MAX / 10) mark *= 10;
  if (n == mark)
    spdlog::error(
        "peer {} has had {} messages refused; if it is hostile, ban its key ([[peers]] banned = "
        "true, or --ban-peer {}; docs/security.md)",
        peer, n, peer);
}

bool ZmqTransport::of_this_run(std::string_view run) const {
  return options_.run_id.empty() ? run.empty()
                                 : run.size() == options_.run_id.size() + 1 && run[0] == '.' &&
                                       run.substr(1) == options_.run_id;
}

std::optional<uint32_t> ZmqTransport::peer_of(const zmq::message_t& routing_id) const {
  std::string_view rid(routing_id.data<char>(), routing_id.size());
  if (!routing_ids_.empty()) {
    const auto it = routing_ids_.find(std::string(rid));
    if (it == routing_ids_.end()) return std::nullopt;
    return it->second;
  }
  uint32_t id = 0;
  const auto run = run_part(rid, id);
  if (!run || !of_this_run(*run)) return std::nullopt;
  for (const auto& p : peers_)
    if (p.id == id) return id;
  return std::nullopt;
}

void ZmqTransport::absorb_connection_events() {
  zmq::message_t event, address;
  while (monitor_.recv(event, zmq::recv_flags::dontwait)) {
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    if (event.size() < 6) continue;
    uint16_t kind = 0;
    int32_t fd = -1;
    std::memcpy(&kind, event.data(), sizeof kind);
    std::memcpy(&fd, static_cast<const char*>(event.data()) + 2, sizeof fd);
    if (kind == ZMQ_EVENT_ACCEPTED)
      watchdog_->accepted(fd);
    else
      watchdog_->gone(fd);
  }
}

void ZmqTransport::watch_connections() {
  watch_outbound();
  absorb_connection_events();
  for (const auto& cut : watchdog_->check([this] { return nothing_waiting(); })) {
    count_refusal(Refusal::kEndlessMessage);
    spdlog::warn(
        "cut an incoming connection that held {} bytes of a message it never finished "
        "(the most one message takes is {})",
        cut.held, proto::kMaxPayloadBytes + proto::kMaxHeaderBytes);
  }
  last_check_ = std::chrono::steady_clock::now();
}

void ZmqTransport::watch_outbound() {
  using proto::inspect::Handshake;
  zmq::message_t event, address;
  for (auto& o : outbound_) {
    while (o->events.recv(event, zmq::recv_flags::dontwait)) {
      if (event.more()) (void)o->events.recv(address, zmq::recv_flags::dontwait);
      if (event.size() < 6) continue;
      uint16_t kind = 0;
      int32_t value = -1;
      std::memcpy(&kind, event.data(), sizeof kind);
      std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
      LinkState& l = o->link;
      switch (kind) {
        case ZMQ_EVENT_CONNECTED:
          ++l.connects;
          o->fd = value;
          o->retries = 0;
          traffic_.set_link_refused(o->peer.id, false);  // a connection, its handshake to come
          l.handshake = Handshake::kPending;
          break;
        case ZMQ_EVENT_CONNECT_RETRIED:
          // libzmq (4.3) says it when it schedules a try: once as the connection drops,
          // and again after each try that failed (a refused connect, or one that timed
          // out: libzmq does not say which). So a second one since the drop is a failed
          // connect: on a network that works, the peer's port is closed, its process gone
          // (TrafficCounters::link_gone). After a network reset the first try connects.
          if (++o->retries >= 2) traffic_.set_link_refused(o->peer.id);
          break;
        case ZMQ_EVENT_DISCONNECTED:
          ++l.disconnects;
          o->fd = -1;
          o->retries = 0;
          // A refused key or a failed handshake says more than that it closed.
          if (l.handshake == Handshake::kOk || l.handshake == Handshake::kPending)
            l.handshake = Handshake::kLost;
          break;
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
          l.handshake = Handshake::kOk;
          break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
          ++l.handshake_failures;
          l.handshake = Handshake::kRefused;
          break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
          ++l.handshake_failures;
          l.handshake = Handshake::kFailed;
          break;
        default:
          break;
      }
      traffic_.set_link_up(o->peer.id, l.handshake == Handshake::kOk);
    }
  }
}

LinkState ZmqTransport::link_state(uint32_t peer) {
  watch_outbound();
  LinkState l;
  if (Outbound* o = outbound(peer)) {
    l = o->link;
    tcp_info info{};
    socklen_t size = sizeof info;
    // libzmq's descriptor, read only; it may have closed since its last event, in
    // which case getsockopt fails or reads whatever took the number (rare; doctor's
    // figures are a diagnosis, not an account).
    if (o->fd >= 0 && ::getsockopt(o->fd, IPPROTO_TCP, TCP_INFO, &info, &size) == 0) {
      l.tcp_rtt_ms = info.tcpi_rtt / 1000.0;
      l.segments_sent = info.tcpi_segs_out;
      l.segments_retransmitted = info.tcpi_total_retrans;
      if (size >= offsetof(tcp_info, tcpi_delivery_rate) + sizeof info.tcpi_delivery_rate &&
          info.tcpi_delivery_rate > 0)
        l.delivery_bytes_per_s = static_cast<double>(info.tcpi_delivery_rate);
    }
  }
  if (auto it = last_refusal_.find(peer); it != last_refusal_.end()) l.last_refusal = it->second;
  return l;
}

Status ZmqTransport::set_admit_keys(const std::vector<std::string>& keys) {
  if (!zap_) return Status::invalid("the admission list is for CURVE (--secret-key)");
  return zap_->set_admitted(keys);
}

Status ZmqTransport::ban(uint32_t peer) {
  if (!zap_)
    return Status::invalid(
        "a ban needs CURVE (--secret-key): without keys anyone could speak as "
        "any node");
  const auto p =
      std::find_if(peers_.begin(), peers_.end(), [&](const Peer& q) { return q.id == peer; });
  if (p == peers_.end()) return Status::not_found(fmt::format("node {} is not a peer", peer));
  if (p->banned) return Status::ok();
  p->banned = true;
  banned_.insert(peer);
  zap_->ban(p->public_key);
  // Nothing more to it: its outbound socket goes (a zero-copy send in flight keeps the
  // entry alive in removed_, as for a member that left).
  close_outbound(peer);
  spdlog::warn(
      "peer {} is banned (gossipctl ban): its key is refused, nothing is sent to it and "
      "what it sends is dropped",
      peer);
  return Status::ok();
}

std::vector<std::string> ZmqTransport::refused_keys() const {
  return zap_ ? zap_->refused() : std::vector<std::string>{};
}

void ZmqTransport::wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

std::string ZmqTransport::user_id(zmq::message_t& frame) {
  try {
    if (const char* user = frame.gets("User-Id")) return user;
  } catch (const zmq::error_t&) {
  }
  return {};
}

std::string ZmqTransport::public_key_of(uint32_t peer) const {
  for (const auto& p : peers_)
    if (p.id == peer) return p.public_key;
  return "-";  // no key: matches no User-Id
}

std::optional<Incoming> ZmqTransport::join_request(std::vector<zmq::message_t>& frames,
                                                   size_t total_frames, uint64_t wire) {
  // Under CURVE only from a key the authenticator admitted for joining, or a member's
  // (one that joined and asks again); its key goes with the request. At most
  // kJoinsPerSecond, so that strangers cannot keep the round's thread busy with them.
  constexpr std::string_view kPrefix = "join-";
  constexpr int kJoinsPerSecond = 20;
  std::string_view rid(frames[0].data<char>(), frames[0].size());
  if (!rid.starts_with(kPrefix) || rid.size() > 64 || total_frames != 3) return std::nullopt;
  std::string key;
  if (zap_) {
    const std::string user = user_id(frames[1]);
    if (user.starts_with(ZapHandler::kJoinerPrefix)) {
      key = user.substr(ZapHandler::kJoinerPrefix.size());
    } else {
      for (const auto& p : peers_)
        if (std::to_string(p.id) == user) key = p.public_key;
    }
    if (key.empty()) return std::nullopt;
  }
  auto head = proto::decode_head(frames[1].data(), frames[1].size());
  if (!head || head->envelope.kind != proto::Kind::kMember ||
      head->envelope.from != proto::kNoNode ||
      std::get<proto::Member>(head->body).what != proto::Member::kJoinRequest ||
      !proto::validate_payload(head->envelope, 1, frames[2].size()))
    return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  if (now - joins_since_ >= std::chrono::seconds(1)) joins_since_ = now, joins_ = 0;
  if (++joins_ > kJoinsPerSecond) return std::nullopt;
  traffic_.count_recv(TrafficCounters::kUnknownPeer, frames[2].size(), wire);
  Incoming in{TrafficCounters::kUnknownPeer, head->envelope, std::move(head->body), {}, {}};
  in.payload = std::move(frames[2]);
  in.joiner_route = std::string(rid);
  in.joiner_key = std::move(key);
  return in;
}

bool ZmqTransport::nothing_waiting() {
  zmq::pollitem_t item{inbound_.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, std::chrono::milliseconds(0)) == 0;
}

bool ZmqTransport::take_message(Taken& out) {
  // The whole multipart message; at most kMaxFrames of it kept, so that a hostile
  // sender cannot make us hold an unbounded list of frames.
  constexpr size_t kMaxFrames = 4;
  out.frames.clear();
  out.total = 0;
  zmq::message_t frame;
  while (inbound_.recv(frame, zmq::recv_flags::dontwait)) {
    const bool more = frame.more();
    // Frame 0 is the routing id ROUTER adds; it never crossed the wire.
    if (out.total > 0) watchdog_->delivered(zmq_msg_get(frame.handle(), ZMQ_SRCFD), frame.size());
    if (++out.total <= kMaxFrames) out.frames.push_back(std::move(frame));
    if (!more) break;
  }
  return !out.frames.empty();
}

std::optional<Incoming> ZmqTransport::recv(std::chrono::milliseconds timeout) {
  // At 1 GB/s (loopback), 20 MB between checks on top of a message's worth.
  constexpr auto kCheckEvery = std::chrono::milliseconds(20);
  // The watchdog counts right only while no whole message waits (it would count as
  // held), so it checked only then; a daemon its neighbors keep busy may always have
  // one waiting, and in a CI run node 0 of a busy 3-node gossip cluster never checked
  // while one endless message grew it past 1.4 GB
  // (Attacks.AnEndlessMessageIsCutAtAMessagesWorth). Now, where a connection seems to
  // hold more than a message's worth while messages wait, the waiting messages are
  // taken first (counted as delivered) and the count made exact. Only then: taking
  // them all the time would lift libzmq's back-pressure on honest peers.
  constexpr size_t kMaxDrained = 65536;  // a bound on one drain; in libzmq's memory already
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check_ >= kCheckEvery) {
      absorb_connection_events();
      if (!nothing_waiting() && watchdog_->any_over_limit()) {
        Taken t;
        while (drained_.size() < kMaxDrained) {
          try {
            if (!take_message(t)) break;
          } catch (const zmq::error_t& e) {
            spdlog::warn("receive from peers failed: {}", e.what());
            break;
          }
          drained_.push_back(std::move(t));
        }
      }
      // What was drained is counted as delivered: only libzmq's queue matters. The
      // outgoing links' events are read every check: a busy node (messages always
      // waiting) read them only when idle, so a link that dropped, or came back, was
      // seen late by the neighbor exchange (NeighborExchange::kLinkDownSilence).
      if (nothing_waiting())
        watch_connections();
      else
        watch_outbound();
      last_check_ = now;  // tried: the next try in kCheckEvery
    }
    Taken taken;
    if (!drained_.empty()) {
      taken = std::move(drained_.front());
      drained_.pop_front();
    } else {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      const auto wait =
          std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(kCheckEvery));
      zmq::pollitem_t items[2] = {{inbound_.handle(), 0, ZMQ_POLLIN, 0},
                                  {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
      const int polled = wake_fd_ >= 0 ? 2 : 1;
      if (zmq::poll(items, polled, wait) == 0) {
        if (left <= std::chrono::milliseconds(0)) return std::nullopt;
        continue;
      }
      if (polled == 2 && (items[1].revents & ZMQ_POLLIN)) {
        uint64_t n = 0;
        (void)!::read(wake_fd_, &n, sizeof n);
        if (!(items[0].revents & ZMQ_POLLIN)) return std::nullopt;
      }
      try {
        if (!take_message(taken)) continue;
      } catch (const zmq::error_t& e) {
        spdlog::warn("receive from peers failed: {}", e.what());
        continue;
      }
    }
    std::vector<zmq::message_t>& frames = taken.frames;
    const size_t total_frames = taken.total;

    auto sender = peer_of(frames[0]);
    uint64_t wire = 0;
    for (size_t i = 1; i < frames.size(); ++i)
      wire += proto::zmtp_frame_overhead(frames[i].size()) + frames[i].size();
    uint32_t who = sender.value_or(TrafficCounters::kUnknownPeer);
    auto drop = [&](const std::string& why) {
      traffic_.count_dropped(who);
      if (sender) last_refusal_[*sender] = why;
      if (sender) report_offender(*sender);
      spdlog::warn("dropped message from {}: {}",
                   sender ? fmt::format("peer {}", *sender)
                          : fmt::format("unknown sender '{}'", printable(frames[0])),
                   why);
    };
    if (!sender) {
      if (auto joiner = join_request(frames, total_frames, wire)) return joiner;
      uint32_t id = 0;
      if (const auto run = run_part({frames[0].data<char>(), frames[0].size()}, id);
          !zap_ && run && !of_this_run(*run)) {
        // A node of another run (or of none where this one has one, or the reverse):
        // said once per routing id, counted always. Its heartbeats would fill the log.
        traffic_.count_dropped(who);
        if (other_runs_.size() < 64 && other_runs_.insert(printable(frames[0])).second)
          spdlog::warn(
              "dropped messages from '{}': not a node of this run ({}); a stale daemon of "
              "another job on a port this cluster reuses, or a node started with another "
              "--run-id",
              printable(frames[0]),
              options_.run_id.empty() ? "this node has no --run-id"
                                      : fmt::format("--run-id {}", options_.run_id));
        continue;
      }
      drop("sender is not in the peer list");
      continue;
    }
    if (banned_.count(*sender)) {
      // Banned while connected: the connection it has stays open until it drops it.
      traffic_.count_dropped(*sender);
      continue;
    }
    if (zap_ && frames.size() > 1) {
      // The authenticator named the key's owner; the routing id must be the same node.
      // (Metadata rides on the frames the peer sent, not on the routing id ROUTER adds.)
      // A node that joined may still speak on a connection it made before, when its
      // key was admitted only for joining ("join:<key>").
      const std::string user = user_id(frames[1]);
      if (user != std::to_string(*sender) &&
          user != std::string(ZapHandler::kJoinerPrefix) + public_key_of(*sender)) {
        drop(fmt::format("it authenticated as {}", user.empty() ? "?" : user));
        continue;
      }
    }
    if (total_frames < 2 || total_frames > 3) {
      drop(fmt::format("{} frames (expected header and at most one payload)", total_frames - 1));
      continue;
    }
    auto head = proto::decode_head(frames[1].data(), frames[1].size());
    if (!head) {
      drop(head.status().message());
      continue;
    }
    if (head->envelope.from != *sender) {
      drop(fmt::format("its envelope says it is from node {}", head->envelope.from));
      continue;
    }
    size_t payload_frames = frames.size() - 2;
    size_t payload_bytes = payload_frames ? frames[2].size() : 0;
    if (auto st = proto::validate_payload(head->envelope, payload_frames, payload_bytes); !st) {
      drop(st.message());
      continue;
    }
    traffic_.count_recv(*sender, payload_bytes, wire, starts(head->envelope.kind));
    Incoming in{*sender, head->envelope, std::move(head->body), {}, {}};
    if (payload_frames) in.payload = std::move(frames[2]);
    return in;
  }
}

}  // namespace gossip::peers

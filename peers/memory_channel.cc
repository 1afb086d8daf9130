#include "peers/memory_channel.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>

#include "base/split_mix64.h"

namespace gossip::peers {

const Link& LinkModel::between(uint32_t from, uint32_t to) const {
  auto it = links.find({from, to});
  return it == links.end() ? all : it->second;
}

bool LinkModel::instant() const {
  auto zero = [](const Link& l) {
    return l.latency == Duration::zero() && l.jitter == Duration::zero() && l.bytes_per_s <= 0;
  };
  return zero(all) && outages.empty() &&
         std::all_of(links.begin(), links.end(), [&](const auto& kv) { return zero(kv.second); });
}

MemoryHub::MemoryHub(Clock& clock, LinkModel links)
    : clock_(clock), links_(std::move(links)), instant_(links_.instant()), start_(clock_.now()) {
  // A bug, not an input: the real clock delivers at once and cannot delay.
  assert(instant_ || clock_.schedules());
}

std::shared_ptr<MemoryHub::Mailbox> MemoryHub::mailbox(uint32_t node) {
  std::lock_guard lock(mu_);
  auto& box = boxes_[node];
  if (!box) box = std::make_shared<Mailbox>(clock_);
  return box;
}

std::unique_ptr<MemoryChannel> MemoryHub::join(uint32_t self, const std::vector<uint32_t>& peers) {
  std::vector<Peer> ps;
  for (uint32_t p : peers) ps.push_back({p, fmt::format("mem://{}", p), ""});
  return join_peers(self, std::move(ps));
}

std::unique_ptr<MemoryChannel> MemoryHub::join_peers(uint32_t self, std::vector<Peer> peers) {
  std::unique_ptr<MemoryChannel> channel(
      new MemoryChannel(*this, self, std::move(peers), mailbox(self)));
  std::lock_guard lock(mu_);
  for (const Peer& p : channel->peers_) channel->traffic_.set_link_up(p.id, !cut_.count(p.id));
  channels_.insert(channel.get());
  return channel;
}

void MemoryHub::cut(uint32_t node, bool closes) {
  std::lock_guard lock(mu_);
  cut_.insert(node);
  if (closes) set_links_to(node, false);
}

void MemoryHub::set_links_to(uint32_t node, bool up) {
  for (MemoryChannel* c : channels_) {
    if (c->self_ == node) continue;
    c->traffic_.set_link_up(node, up);
    // A dead process's port refuses the transport's next connect, as ZmqTransport's
    // monitor then says: here at once.
    if (!up) c->traffic_.set_link_refused(node);
  }
}

void MemoryHub::restart(uint32_t node) {
  {
    std::lock_guard lock(mu_);
    cut_.erase(node);
    set_links_to(node, true);  // its new process listens again: the connections come back
  }
  const std::shared_ptr<Mailbox> box = mailbox(node);
  std::lock_guard lock(box->mu);
  box->frames.clear();
}

void MemoryHub::place(uint32_t node, uint32_t like) {
  std::lock_guard lock(mu_);
  placed_[node] = like;
}

bool MemoryHub::lost(uint32_t from, uint32_t to) {
  std::lock_guard lock(mu_);
  return cut_.count(to) || cut_.count(from);
}

TimePoint MemoryHub::arrival(uint32_t from, uint32_t to, uint64_t bytes) {
  const TimePoint now = clock_.now();
  if (instant_) return now;
  const Link& link = links_.between(from, to);
  std::lock_guard lock(mu_);
  TimePoint t = now;
  const auto where = [&](uint32_t node) {
    const auto it = placed_.find(node);
    return it == placed_.end() ? node : it->second;
  };
  const uint32_t from_side = where(from), to_side = where(to);
  if (link.bytes_per_s > 0) {
    // The sender's uplink carries one message after the other.
    TimePoint& free = uplink_free_[from];
    free = std::max(free, now) + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(
                                     static_cast<double>(bytes) / link.bytes_per_s));
    t = free;
  }
  t += link.latency;
  // Held until the partition heals, and then by any other partition between the two
  // that holds by then (each can hold it once: the time only moves past its end).
  TimePoint released = now;
  for (bool held = true; held;) {
    held = false;
    for (const Outage& o : links_.outages)
      if (released >= start_ + o.from && released < start_ + o.until &&
          o.splits(from_side, to_side)) {
        released = start_ + o.until;
        held = true;
      }
  }
  if (released > now) t = std::max(t, released + link.latency);
  if (link.jitter > Duration::zero()) {
    const uint64_t n = sent_[{from, to}]++;
    SplitMix64 draw = SplitMix64::keyed(links_.seed, (uint64_t{from} << 32) | to, n);
    t += Duration(
        static_cast<Duration::rep>(draw.next() % static_cast<uint64_t>(link.jitter.count())));
  }
  TimePoint& last = last_arrival_[{from, to}];
  t = std::max(t, last);  // in order, as over one connection
  last = t;
  return t;
}

bool MemoryHub::deliver(uint32_t to, Frame frame, uint64_t wire_bytes) {
  messages_.fetch_add(1, std::memory_order_relaxed);
  if (lost(frame.from, to)) return true;  // lost with the node
  const std::shared_ptr<Mailbox> box = mailbox(to);
  {
    std::lock_guard lock(box->mu);
    if (box->frames.size() + box->in_flight >= kMaxQueued) return false;
  }
  const TimePoint when = arrival(frame.from, to, wire_bytes);
  if (when <= clock_.now()) {
    {
      std::lock_guard lock(box->mu);
      box->frames.push_back(std::move(frame));
    }
    box->arrived.notify();
    return true;
  }
  {
    std::lock_guard lock(box->mu);
    ++box->in_flight;
  }
  auto in_flight = std::make_shared<Frame>(std::move(frame));
  clock_.at(when, [this, to, box, in_flight] {
    // A recipient that died meanwhile loses it; from a sender that died it still
    // arrives, as what a killed process had sent leaves its socket's buffer.
    bool gone = false;
    {
      std::lock_guard lock(mu_);
      gone = cut_.count(to) > 0;
    }
    {
      std::lock_guard lock(box->mu);
      --box->in_flight;
      if (!gone) box->frames.push_back(std::move(*in_flight));
    }
    if (!gone) box->arrived.notify();
  });
  return true;
}

MemoryChannel::MemoryChannel(MemoryHub& hub, uint32_t self, std::vector<Peer> peers,
                             std::shared_ptr<MemoryHub::Mailbox> box)
    : hub_(hub),
      self_(self),
      peers_(std::move(peers)),
      traffic_(ids_of(peers_), hub.clock()),
      box_(std::move(box)) {
  // In id order, as add_peer keeps them: knows() is asked on every message.
  std::sort(peers_.begin(), peers_.end(), [](const Peer& a, const Peer& b) { return a.id < b.id; });
}

MemoryChannel::~MemoryChannel() {
  std::lock_guard lock(hub_.mu_);
  hub_.channels_.erase(this);
}

bool MemoryChannel::knows(uint32_t peer) const {
  const auto it = std::lower_bound(peers_.begin(), peers_.end(), peer,
                                   [](const Peer& p, uint32_t id) { return p.id < id; });
  return it != peers_.end() && it->id == peer;
}

Status MemoryChannel::send_frame(uint32_t peer, uint64_t round, const proto::Body& body,
                                 std::span<const std::byte> payload,
                                 std::shared_ptr<const std::vector<std::byte>> shared) {
  if (!knows(peer)) return Status::not_found(fmt::format("no peer {}", peer));
  MemoryHub::Frame f;
  f.from = self_;
  f.head = proto::encode_head(self_, round, body, payload.size(), epoch());
  f.has_payload = !payload.empty();
  if (f.has_payload && shared) {
    // Held, not copied: one encoded model goes to every neighbor, and at 10,000 nodes
    // of the exponential graph the copies in flight (14 a node) passed 13.6 GB. The
    // sender keeps it unchanged (send_shared's contract); receivers only read it.
    auto* hold = new std::shared_ptr<const std::vector<std::byte>>(std::move(shared));
    f.payload = zmq::message_t(
        const_cast<std::byte*>((*hold)->data()), (*hold)->size(),
        [](void*, void* h) {
          delete static_cast<std::shared_ptr<const std::vector<std::byte>>*>(h);
        },
        hold);
  } else if (f.has_payload) {
    f.payload = zmq::message_t(payload.data(), payload.size());
  }
  // Counted as ZmqTransport counts it: the frames and their ZMTP framing.
  uint64_t wire = proto::zmtp_frame_overhead(f.head.size()) + f.head.size();
  if (f.has_payload) wire += proto::zmtp_frame_overhead(payload.size()) + payload.size();
  if (!hub_.deliver(peer, std::move(f), wire))
    return Status::io_error(fmt::format("send queue to peer {} is full", peer));
  traffic_.count_sent(peer, payload.size(), wire);
  return Status::ok();
}

Status MemoryChannel::add_peer(const Peer& peer) {
  if (peer.id == self_ || knows(peer.id))
    return Status::invalid(fmt::format("node {} is already a member", peer.id));
  if (!traffic_.add_peer(peer.id))
    return Status::invalid(
        fmt::format("this node took {} joined members already", TrafficCounters::kMaxJoined));
  peers_.insert(std::upper_bound(peers_.begin(), peers_.end(), peer,
                                 [](const Peer& a, const Peer& b) { return a.id < b.id; }),
                peer);
  std::lock_guard lock(hub_.mu_);
  traffic_.set_link_up(peer.id, !hub_.cut_.count(peer.id));
  return Status::ok();
}

Status MemoryChannel::reply_to_joiner(const std::string& route, uint64_t round,
                                      const proto::Body& body, std::string_view payload) {
  uint32_t to = 0;
  {
    std::lock_guard lock(hub_.mu_);
    const auto it = hub_.routes_.find(route);
    if (it == hub_.routes_.end()) return Status::not_found(fmt::format("no joiner at {}", route));
    to = it->second;
  }
  MemoryHub::Frame f;
  f.from = self_;
  f.head = proto::encode_head(self_, round, body, payload.size(), epoch());
  f.has_payload = true;
  f.payload = zmq::message_t(payload.data(), payload.size());
  f.route = route;  // which of the joiner's requests it answers
  const uint64_t wire = proto::zmtp_frame_overhead(f.head.size()) + f.head.size() +
                        proto::zmtp_frame_overhead(payload.size()) + payload.size();
  if (!hub_.deliver(to, std::move(f), wire)) return Status::io_error("the joiner's queue is full");
  return Status::ok();
}

std::optional<Incoming> MemoryChannel::join_request(MemoryHub::Frame& f) {
  auto head = proto::decode_head(f.head.data(), f.head.size());
  if (!head || head->envelope.kind != proto::Kind::kMember ||
      head->envelope.from != proto::kNoNode ||
      std::get<proto::Member>(head->body).what != proto::Member::kJoinRequest || !f.has_payload ||
      !proto::validate_payload(head->envelope, 1, f.payload.size())) {
    traffic_.count_dropped(TrafficCounters::kUnknownPeer);
    return std::nullopt;
  }
  const uint64_t wire = proto::zmtp_frame_overhead(f.head.size()) + f.head.size() +
                        proto::zmtp_frame_overhead(f.payload.size()) + f.payload.size();
  traffic_.count_recv(TrafficCounters::kUnknownPeer, f.payload.size(), wire);
  Incoming in{TrafficCounters::kUnknownPeer, head->envelope, std::move(head->body), {}, {}};
  in.payload = std::move(f.payload);
  in.joiner_route = std::move(f.route);
  return in;
}

Status MemoryChannel::send(uint32_t peer, uint64_t round, const proto::Body& body) {
  return send_frame(peer, round, body, {});
}

Status MemoryChannel::send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                                     std::span<const std::byte> payload) {
  return send_frame(peer, round, body, payload);
}

Status MemoryChannel::send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                                  std::shared_ptr<const std::vector<std::byte>> buffer) {
  const std::span<const std::byte> payload(*buffer);
  return send_frame(peer, round, body, payload, std::move(buffer));
}

void MemoryChannel::note_dropped(uint32_t peer, const std::string& why) {
  traffic_.count_dropped(peer);
  spdlog::warn("dropped message from peer {}: {}", peer, why);
}

std::optional<Incoming> MemoryChannel::recv(std::chrono::milliseconds timeout) {
  Clock& clock = hub_.clock();
  const TimePoint deadline = clock.now() + timeout;
  while (true) {
    MemoryHub::Frame f;
    const bool arrived = clock.wait_until(box_->arrived, deadline, [&] {
      std::lock_guard lock(box_->mu);
      return !box_->frames.empty();
    });
    if (!arrived) return std::nullopt;
    {
      std::lock_guard lock(box_->mu);
      f = std::move(box_->frames.front());
      box_->frames.pop_front();
    }
    if (!f.route.empty()) {
      if (auto in = join_request(f)) return in;
      continue;
    }
    // The checks of ZmqTransport::recv, less those of sockets and keys.
    if (!knows(f.from)) {
      traffic_.count_dropped(TrafficCounters::kUnknownPeer);
      spdlog::warn("dropped message from node {}: not in the peer list", f.from);
      continue;
    }
    auto head = proto::decode_head(f.head.data(), f.head.size());
    if (!head) {
      note_dropped(f.from, head.status().message());
      continue;
    }
    if (head->envelope.from != f.from) {
      note_dropped(f.from,
                   fmt::format("its envelope says it is from node {}", head->envelope.from));
      continue;
    }
    const size_t payload_bytes = f.has_payload ? f.payload.size() : 0;
    if (auto st = proto::validate_payload(head->envelope, f.has_payload ? 1 : 0, payload_bytes);
        !st) {
      note_dropped(f.from, st.message());
      continue;
    }
    uint64_t wire = proto::zmtp_frame_overhead(f.head.size()) + f.head.size();
    if (f.has_payload) wire += proto::zmtp_frame_overhead(payload_bytes) + payload_bytes;
    traffic_.count_recv(f.from, payload_bytes, wire, starts(head->envelope.kind));
    Incoming in{f.from, head->envelope, std::move(head->body), {}, {}};
    if (f.has_payload) in.payload = std::move(f.payload);
    return in;
  }
}

MemoryJoiner::MemoryJoiner(MemoryHub& hub, uint32_t address)
    : hub_(hub), address_(address), box_(hub.mailbox(address)) {}

std::string MemoryJoiner::ask(uint32_t to, std::string head, std::string payload) {
  MemoryHub::Frame f;
  f.from = address_;
  f.route = fmt::format("join-{}-{}", address_, asked_++);
  {
    std::lock_guard lock(hub_.mu_);
    hub_.routes_[f.route] = address_;
  }
  const uint64_t wire = proto::zmtp_frame_overhead(f.route.size()) + f.route.size() +
                        proto::zmtp_frame_overhead(head.size()) + head.size() +
                        proto::zmtp_frame_overhead(payload.size()) + payload.size();
  f.head = std::move(head);
  f.has_payload = true;
  f.payload = zmq::message_t(payload.data(), payload.size());
  std::string route = f.route;
  (void)hub_.deliver(to, std::move(f), wire);  // a full mailbox loses it, as a busy seed would
  return route;
}

std::optional<std::pair<std::string, std::string>> MemoryJoiner::reply(const std::string& route,
                                                                       TimePoint until) {
  while (hub_.clock().wait_until(box_->arrived, until, [&] {
    std::lock_guard lock(box_->mu);
    return !box_->frames.empty();
  })) {
    std::lock_guard lock(box_->mu);
    MemoryHub::Frame f = std::move(box_->frames.front());
    box_->frames.pop_front();
    if (f.route == route) return std::pair{std::move(f.head), f.payload.to_string()};
  }
  return std::nullopt;
}

}  // namespace gossip::peers

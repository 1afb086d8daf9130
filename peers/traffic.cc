#include "peers/traffic.h"

#include <algorithm>
#include <chrono>

namespace gossip::peers {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;

void add_to(proto::ipc::Traffic& t, const PeerCounters& c) {
  t.payload_sent += c.sent.payload.load(kRelaxed);
  t.wire_sent += c.sent.wire.load(kRelaxed);
  t.msgs_sent += c.sent.messages.load(kRelaxed);
  t.payload_recv += c.recv.payload.load(kRelaxed);
  t.wire_recv += c.recv.wire.load(kRelaxed);
  t.msgs_recv += c.recv.messages.load(kRelaxed);
  t.dropped += c.dropped.load(kRelaxed);
}
}  // namespace

TrafficCounters::TrafficCounters(const std::vector<uint32_t>& peer_ids, const Clock& clock)
    : clock_(&clock),
      capacity_(peer_ids.size() + kMaxJoined),
      counters_(std::make_unique<PeerCounters[]>(capacity_)) {
  by_id_.reserve(peer_ids.size());
  for (size_t i = 0; i < peer_ids.size(); ++i) {
    counters_[i].peer = peer_ids[i];
    by_id_.emplace_back(peer_ids[i], static_cast<uint32_t>(i));
  }
  std::sort(by_id_.begin(), by_id_.end());
  count_.store(peer_ids.size(), std::memory_order_release);
  unknown_.peer = kUnknownPeer;
}

int64_t TrafficCounters::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_->now().time_since_epoch())
      .count();
}

bool TrafficCounters::add_peer(uint32_t peer) {
  const size_t n = count_.load(std::memory_order_relaxed);
  if (find(peer) != &unknown_) return true;
  if (n == capacity_) return false;
  counters_[n].peer = peer;
  count_.store(n + 1, std::memory_order_release);
  return true;
}

PeerCounters* TrafficCounters::find(uint32_t peer) {
  return const_cast<PeerCounters*>(std::as_const(*this).find(peer));
}

const PeerCounters* TrafficCounters::find(uint32_t peer) const {
  const auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::pair{peer, uint32_t{0}});
  if (it != by_id_.end() && it->first == peer) return &counters_[it->second];
  // Members that joined since (add_peer): at most kMaxJoined.
  const size_t n = count_.load(std::memory_order_acquire);
  for (size_t i = by_id_.size(); i < n; ++i)
    if (counters_[i].peer == peer) return &counters_[i];
  return &unknown_;
}

void TrafficCounters::count_sent(uint32_t peer, uint64_t payload, uint64_t wire) {
  auto* c = find(peer);
  c->sent.payload.fetch_add(payload, kRelaxed);
  c->sent.wire.fetch_add(wire, kRelaxed);
  c->sent.messages.fetch_add(1, kRelaxed);
}

void TrafficCounters::count_recv(uint32_t peer, uint64_t payload, uint64_t wire, bool starts) {
  auto* c = find(peer);
  c->recv.payload.fetch_add(payload, kRelaxed);
  c->recv.wire.fetch_add(wire, kRelaxed);
  c->recv.messages.fetch_add(1, kRelaxed);
  const int64_t now = now_ns();
  const int64_t last = c->last_recv_ns.exchange(now, kRelaxed);
  // Written by one thread: loads and stores, no read-modify-write races.
  if (c->gap_epoch_ns.load(kRelaxed) < 0 || now - c->gap_epoch_ns.load(kRelaxed) > kGapEpochNs) {
    c->gap_last_max_ns.store(c->gap_max_ns.load(kRelaxed), kRelaxed);
    c->gaps_last.store(c->gaps.load(kRelaxed), kRelaxed);
    c->gap_max_ns.store(0, kRelaxed);
    c->gaps.store(0, kRelaxed);
    c->gap_epoch_ns.store(now, kRelaxed);
  }
  if (last < 0 || starts || c->skip_gap.exchange(false, kRelaxed)) return;
  c->gap_max_ns.store(std::max(c->gap_max_ns.load(kRelaxed), now - last), kRelaxed);
  c->gaps.fetch_add(1, kRelaxed);
}

uint64_t TrafficCounters::longest_gap_ms(uint32_t peer) const {
  const auto* c = find(peer);
  return static_cast<uint64_t>(
             std::max(c->gap_max_ns.load(kRelaxed), c->gap_last_max_ns.load(kRelaxed))) /
         1'000'000;
}

void TrafficCounters::forget_gaps(uint32_t peer) const {
  const auto* c = find(peer);
  c->gap_max_ns.store(0, kRelaxed);
  c->gap_last_max_ns.store(0, kRelaxed);
  c->gaps.store(0, kRelaxed);
  c->gaps_last.store(0, kRelaxed);
  c->skip_gap.store(true, kRelaxed);
}

uint64_t TrafficCounters::gaps(uint32_t peer) const {
  const auto* c = find(peer);
  return c->gaps.load(kRelaxed) + c->gaps_last.load(kRelaxed);
}

uint64_t TrafficCounters::silent_ms(uint32_t peer) const {
  const int64_t last = find(peer)->last_recv_ns.load(kRelaxed);
  if (last < 0) return proto::ipc::kNeverHeard;
  const int64_t now = now_ns();
  return static_cast<uint64_t>(std::max<int64_t>(0, now - last) / 1'000'000);
}

int64_t TrafficCounters::last_recv_ns(uint32_t peer) const {
  return find(peer)->last_recv_ns.load(kRelaxed);
}

void TrafficCounters::set_link_up(uint32_t peer, bool up) {
  PeerCounters* c = find(peer);
  if (c == &unknown_) return;  // not a peer of this table: nothing to say of its link
  c->link_up.store(up, kRelaxed);
  if (up) {
    c->link_was_up.store(true, kRelaxed);
    c->link_refused.store(false, kRelaxed);
  }
}

void TrafficCounters::set_link_refused(uint32_t peer, bool refused) {
  PeerCounters* c = find(peer);
  if (c == &unknown_) return;
  c->link_refused.store(refused, kRelaxed);
}

bool TrafficCounters::link_gone(uint32_t peer) const {
  const PeerCounters* c = find(peer);
  return !c->link_up.load(kRelaxed) && c->link_was_up.load(kRelaxed) &&
         c->link_refused.load(kRelaxed);
}

void TrafficCounters::forget_link(uint32_t peer) {
  PeerCounters* c = find(peer);
  if (c == &unknown_) return;
  c->link_up.store(false, kRelaxed);
  c->link_was_up.store(false, kRelaxed);
  c->link_refused.store(false, kRelaxed);
}

bool TrafficCounters::link_was_up(uint32_t peer) const {
  return find(peer)->link_was_up.load(kRelaxed);
}

bool TrafficCounters::link_up(uint32_t peer) const { return find(peer)->link_up.load(kRelaxed); }

void TrafficCounters::count_dropped(uint32_t peer) { find(peer)->dropped.fetch_add(1, kRelaxed); }

void TrafficCounters::count_unhandled(proto::Kind kind) {
  unhandled_[static_cast<size_t>(kind)].fetch_add(1, kRelaxed);
}

uint64_t TrafficCounters::unhandled(proto::Kind kind) const {
  return unhandled_[static_cast<size_t>(kind)].load(kRelaxed);
}

proto::ipc::Traffic TrafficCounters::peer_totals(uint32_t peer) const {
  proto::ipc::Traffic t;
  add_to(t, *find(peer));
  return t;
}

proto::ipc::Traffic TrafficCounters::totals() const {
  proto::ipc::Traffic t;
  const size_t n = count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) add_to(t, counters_[i]);
  add_to(t, unknown_);
  return t;
}

}  // namespace gossip::peers

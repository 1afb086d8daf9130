#pragma once
// Traffic accounting per peer and direction. Written by the thread that owns the
// transport, read by anyone (metrics, trainer replies): relaxed atomics suffice
// because each counter is independent and only ever grows.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "proto/ipc.h"
#include "proto/message.h"

namespace gossip::peers {

struct DirectionCounters {
  std::atomic<uint64_t> payload{0};  // bytes of tensors
  std::atomic<uint64_t> wire{0};     // bytes on the wire: headers, payload and ZMTP framing
  std::atomic<uint64_t> messages{0};
};

struct PeerCounters {
  uint32_t peer = 0;
  DirectionCounters sent, recv;
  std::atomic<uint64_t> dropped{0};  // invalid messages from this peer
  std::atomic<int64_t> last_recv_ns{
      -1};  // the channel clock's time of the last message; -1: none yet
  // The longest silence between two of its messages in the current and the last
  // gap epoch (peers/dead_after.h), and how many silences those epochs counted. A ring
  // transport's thread counts its left neighbor too: a race between the two loses at
  // most one gap, which is harmless to a maximum.
  // Mutable: what the table learnt of the peer, which a reader may tell it to forget
  // (forget_gaps), not what was counted.
  mutable std::atomic<int64_t> gap_epoch_ns{-1};
  mutable std::atomic<int64_t> gap_max_ns{0}, gap_last_max_ns{0};
  mutable std::atomic<uint64_t> gaps{0}, gaps_last{0};
  mutable std::atomic<bool> skip_gap{false};  // the next silence is not learnt
  std::atomic<bool> link_up{false};           // the outgoing link is connected, its handshake done
  std::atomic<bool> link_was_up{false};       // it has been, at least once
  std::atomic<bool> link_refused{false};      // since it dropped, a new connect failed
};

// A kind whose arrival says its sender (re)started.
inline bool starts(proto::Kind k) { return k == proto::Kind::kHello || k == proto::Kind::kJoin; }

class TrafficCounters {
 public:
  // Silences are measured on `clock`, the channel's (base/clock.h), which must
  // outlive the table.
  explicit TrafficCounters(const std::vector<uint32_t>& peer_ids,
                           const Clock& clock = Clock::real());

  void count_sent(uint32_t peer, uint64_t payload, uint64_t wire);
  // `starts`: the message says its sender (re)started (a hello, a join): the silence
  // before it was a restart's, not the link's, and is not learnt from.
  void count_recv(uint32_t peer, uint64_t payload, uint64_t wire, bool starts = false);
  void count_dropped(uint32_t peer);  // also used for unknown senders (peer = kUnknownPeer)
  // A valid message of a kind that nothing on this node subscribed to (peers/router.h).
  void count_unhandled(proto::Kind kind);
  uint64_t unhandled(proto::Kind kind) const;

  proto::ipc::Traffic peer_totals(uint32_t peer) const;
  // Milliseconds since the peer's last message was counted; kNeverHeard if none was.
  uint64_t silent_ms(uint32_t peer) const;
  // The channel clock's time of the peer's last message, in ns since its epoch; -1: none.
  int64_t last_recv_ns(uint32_t peer) const;
  // The longest silence between two messages of the peer over the last one to two
  // kGapEpoch, and how many silences that counts.
  uint64_t longest_gap_ms(uint32_t peer) const;
  uint64_t gaps(uint32_t peer) const;
  // The silences learnt of the peer, and the one under way, no longer count: it
  // starts sending to this node now (a gossip peer that becomes a neighbor, which
  // heartbeats only its neighbors), so its silences before say nothing of its link.
  void forget_gaps(uint32_t peer) const;
  static constexpr int64_t kGapEpochNs = 60'000'000'000;
  // Whether the channel's outgoing link to the peer is up (the transport says so).
  void set_link_up(uint32_t peer, bool up);
  bool link_up(uint32_t peer) const;
  bool link_was_up(uint32_t peer) const;
  // Since the link went down, a try to connect again failed (refused: nothing listens
  // at the peer's address; or timed out, unreachable). Until a new connection is made
  // (`refused` false) or the link is up.
  void set_link_refused(uint32_t peer, bool refused = true);
  // The peer's process is gone: its link was up, dropped, and a new connect was
  // refused (when a daemon's process dies the kernel closes its sockets and its port).
  // A live peer's link that drops (a network reset) connects again at the transport's
  // next try, and is not gone.
  bool link_gone(uint32_t peer) const;
  // The transport closed its link to the peer (removed, banned): no state of that link
  // is left, so that a link to it opened later has not been up until it is (a rule that
  // reads "was up, now down" as a dead process, sgd/overlay/neighbor_exchange.h, must
  // not read the closed link's).
  void forget_link(uint32_t peer);
  proto::ipc::Traffic totals() const;
  // A member that joined (daemon/admission.h). By the one thread that counts; the
  // others may read meanwhile: the slots never move, and a slot is published (its id
  // set) before the count that makes it visible. False when kMaxJoined are taken.
  bool add_peer(uint32_t peer);

  static constexpr uint32_t kUnknownPeer = UINT32_MAX;
  static constexpr size_t kMaxJoined = 256;

 private:
  PeerCounters* find(uint32_t peer);
  const PeerCounters* find(uint32_t peer) const;
  int64_t now_ns() const;
  const Clock* clock_;
  size_t capacity_;
  std::unique_ptr<PeerCounters[]> counters_;  // the first count_ are peers'
  // The peers given at construction, (id, slot) by id: find() is asked on every message,
  // and a scan of the slots costs a cache line per peer (a simulated node has thousands).
  std::vector<std::pair<uint32_t, uint32_t>> by_id_;
  std::atomic<size_t> count_{0};
  PeerCounters unknown_;                                                // unknown senders
  std::array<std::atomic<uint64_t>, proto::kMaxKind + 1> unhandled_{};  // by kind
};

}  // namespace gossip::peers

#pragma once
// The control channel between daemons as the router and the strategies see it:
// typed messages out (proto/message.h), validated messages in, traffic accounting.
// Two implementations: ZmqTransport (peers/zmq_transport.h), ZeroMQ over TCP between
// daemons, and MemoryChannel (peers/memory_channel.h), the nodes of one process
// joined by queues, for tests of the strategies that need no sockets.
//
// Owned and used by one thread; only the traffic counters are read from others.

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "base/clock.h"
#include "base/status.h"
#include "peers/peer.h"
#include "peers/traffic.h"
#include "proto/inspect.h"
#include "proto/message.h"

namespace gossip::peers {

// A message that passed the channel's checks: the sender is a configured peer, the
// head decoded (proto::decode_head) and the payload is the size the envelope says.
struct Incoming {
  uint32_t peer = 0;  // the sender, as authenticated by the channel
  proto::Envelope envelope;
  proto::Body body;
  zmq::message_t payload;  // empty when envelope.length == 0; a refcounted buffer
  // A join-request from a node not yet a member (peer is then kUnknownPeer): where
  // reply_to_joiner() answers it, and under CURVE the public key (Z85) it
  // authenticated with (an admitted one, or a member's that asks again).
  std::string joiner_route;
  std::string joiner_key = {};

  proto::Kind kind() const { return envelope.kind; }
  uint64_t round() const { return envelope.round; }
  // The body of kind T; only for a message of that kind.
  template <class T>
  const T& as() const {
    return std::get<T>(body);
  }
};

// What a channel knows of its link to one peer (gossipctl doctor): the connection
// it sends on, and what it refused of what the peer sent.
struct LinkState {
  proto::inspect::Handshake handshake = proto::inspect::Handshake::kNone;
  uint64_t connects = 0;
  uint64_t disconnects = 0;
  uint64_t handshake_failures = 0;
  // The kernel's numbers of the connection now (TCP_INFO), when there is one.
  std::optional<double> tcp_rtt_ms;
  uint64_t segments_sent = 0;
  uint64_t segments_retransmitted = 0;
  std::optional<double> delivery_bytes_per_s;  // the kernel's last delivery-rate sample
  std::string last_refusal;                    // why its last refused message was
};

class PeerChannel {
 public:
  virtual ~PeerChannel() = default;

  virtual uint32_t self() const = 0;
  virtual const std::vector<Peer>& peers() const = 0;
  virtual const TrafficCounters& traffic() const = 0;
  // The node's one traffic table: the ring transports count into it too.
  virtual TrafficCounters& traffic_counters() = 0;
  // The clock every deadline of this node's strategy, membership and collectives is
  // on (base/clock.h): the real one, or a simulation's virtual time.
  virtual Clock& clock() const { return Clock::real(); }

  // Each send queues one message of `body`'s kind for `round`; the channel fills in
  // the rest of the envelope (sender, version, payload length). A full queue to a
  // peer (one that is down) is an error, never a wait.
  // A message without payload (hello, bye, heartbeat...).
  virtual Status send(uint32_t peer, uint64_t round, const proto::Body& body) = 0;
  // With a payload, not copied: the caller keeps it alive and unchanged until
  // pending_sends(peer) drops to 0.
  virtual Status send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                                std::span<const std::byte> payload) = 0;
  virtual uint64_t pending_sends(uint32_t peer) const = 0;
  // With the whole of `buffer` as payload, held (not copied) until it is sent, so one
  // encoded payload can go to several peers and the caller need not wait for any.
  virtual Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                             std::shared_ptr<const std::vector<std::byte>> buffer) = 0;

  // For protocol violations only the strategy can see (stale round, bad sequence):
  // counted against the peer and logged.
  virtual void note_dropped(uint32_t peer, const std::string& why) = 0;

  // The member-list epoch every envelope from now on carries (daemon/admission.h).
  // Any thread.
  virtual void set_epoch(uint64_t epoch) { epoch_.store(epoch, std::memory_order_relaxed); }
  virtual uint64_t epoch() const { return epoch_.load(std::memory_order_relaxed); }

  // Membership (daemon/admission.h): a node that joined becomes a peer; a joiner's
  // request is answered over the connection it came on. Channels without joiners
  // refuse both.
  virtual Status add_peer(const Peer& peer) {
    return Status::invalid(fmt::format("this channel takes no new peer ({})", peer.id));
  }
  // Undoes add_peer of a member the strategy then refused (nothing was sent to it yet).
  virtual void remove_peer(uint32_t /*peer*/) {}
  virtual Status reply_to_joiner(const std::string& /*route*/, uint64_t /*round*/,
                                 const proto::Body& /*body*/, std::string_view /*payload*/) {
    return Status::invalid("this channel has no joiners");
  }

  // The link to `peer` as the channel sees it; an in-memory channel knows nothing.
  virtual LinkState link_state(uint32_t /*peer*/) { return {}; }
  // Handshakes the channel refused from unknown keys (see ZapHandler::refused).
  virtual std::vector<std::string> refused_keys() const { return {}; }
  // Makes a receive that waits return now (any thread): what a thread that waits on
  // the channel between jobs is woken with when a job comes.
  virtual void wake() {}

 private:
  // The router (peers/router.h) is the one reader; a decorator passes it on.
  friend class Router;
  friend class ChannelDecorator;
  // The next valid message, or nullopt at the timeout. Invalid messages are dropped,
  // counted against their sender and logged; they never reach the caller.
  virtual std::optional<Incoming> recv(std::chrono::milliseconds timeout) = 0;

 private:
  std::atomic<uint64_t> epoch_{0};
};

}  // namespace gossip::peers

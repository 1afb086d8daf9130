#pragma once
// The daemon-to-daemon channel over ZeroMQ tcp://. Each daemon binds one ROUTER
// (everything it receives) and connects one DEALER per peer (everything it sends
// to that peer). A DEALER queues messages for a peer that is not up yet and ZeroMQ
// reconnects with exponential backoff, so start-up order does not matter.
//
// Owned and used by one thread; only the traffic counters are read from others.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "base/status.h"
#include "peers/curve_auth.h"
#include "peers/peer.h"
#include "peers/traffic.h"
#include "proto/message.h"

namespace gossip::peers {

struct Incoming {
  uint32_t peer = 0;  // the sender, as authenticated by the transport
  proto::Envelope envelope;
  proto::Body body;
  zmq::message_t payload;  // empty when envelope.length == 0

  proto::Kind kind() const { return envelope.kind; }
  uint64_t round() const { return envelope.round; }
  // The body of kind T; only for a message of that kind.
  template <class T>
  const T& as() const {
    return std::get<T>(body);
  }
};

struct TransportOptions {
  std::chrono::milliseconds reconnect_min{100};
  std::chrono::milliseconds reconnect_max{2000};
  std::chrono::milliseconds linger{250};  // how long closing tries to flush a last message (bye)
  int socket_buffer_bytes = 4 << 20;
  // This daemon's CURVE secret key (Z85). Set: every peer needs its public key, the
  // channel is encrypted and only those keys are admitted (peers/curve_auth.h).
  std::string secret_key;
};

class ZmqTransport {
 public:
  // Binds `listen` and connects to every peer (none needs to be up yet).
  static Result<std::unique_ptr<ZmqTransport>> create(uint32_t self, const std::string& listen,
                                                      const std::vector<Peer>& peers,
                                                      const TransportOptions& options = {});
  ~ZmqTransport();

  uint32_t self() const { return self_; }
  const std::vector<Peer>& peers() const { return peers_; }
  const TrafficCounters& traffic() const { return traffic_; }
  // The node's one traffic table: the ring transports count into it too.
  TrafficCounters& traffic_counters() { return traffic_; }

  // Each send queues one message of `body`'s kind for `round` (proto/message.h); the
  // transport fills in the rest of the envelope (sender, version, payload length).
  // A message without payload (hello, bye, heartbeat...).
  Status send(uint32_t peer, uint64_t round, const proto::Body& body);
  // With a payload, not copied: the caller keeps it alive and unchanged until
  // pending_sends(peer) drops to 0.
  Status send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                        std::span<const std::byte> payload);
  uint64_t pending_sends(uint32_t peer) const;
  // Queues header + the whole of `buffer`, without copying it: ZeroMQ holds a
  // reference until the bytes are written, so one encoded payload can go to several
  // peers and the caller need not wait for any of them.
  Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                     std::shared_ptr<const std::vector<std::byte>> buffer);

  // For protocol violations only the strategy can see (stale round, bad sequence).
  void note_dropped(uint32_t peer, const std::string& why);

 private:
  // The router (peers/router.h) is the one reader of the socket.
  friend class Router;
  // The next valid message, or nullopt at the timeout. Invalid messages are dropped,
  // counted against their sender and logged; they never reach the caller.
  std::optional<Incoming> recv(std::chrono::milliseconds timeout);

  struct Outbound {
    Peer peer;
    zmq::socket_t socket;
    std::atomic<uint64_t> pending{0};
  };
  ZmqTransport(uint32_t self, std::vector<Peer> peers);
  Outbound* outbound(uint32_t peer);
  Status send_frames(Outbound& out, uint64_t round, const proto::Body& body,
                     zmq::message_t* payload);
  std::optional<uint32_t> peer_of(const zmq::message_t& routing_id) const;

  uint32_t self_;
  std::vector<Peer> peers_;
  TrafficCounters traffic_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // with CURVE; stopped before context_ closes
  zmq::socket_t inbound_;
  std::vector<std::unique_ptr<Outbound>> outbound_;
};

// The routing id a daemon presents to its peers' ROUTER sockets.
std::string routing_id_for(uint32_t node);

}  // namespace gossip::peers

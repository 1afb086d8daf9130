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
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "base/status.h"
#include "peers/channel.h"
#include "peers/curve_auth.h"
#include "peers/inbound_watchdog.h"
#include "peers/peer.h"
#include "peers/traffic.h"
#include "proto/message.h"

namespace gossip::peers {

struct TransportOptions {
  std::chrono::milliseconds reconnect_min{100};
  std::chrono::milliseconds reconnect_max{1000};
  // A link whose sent bytes go unacknowledged for `link_silence` (TCP_USER_TIMEOUT) is
  // closed and connected afresh, each try bounded by `connect_timeout`. Without them a
  // link cut by a failed switch waited on TCP's retransmission back-off: after a 10 s
  // cut the links came back one by one over the next 0 to 7 s, and two elastic rings
  // merged over the half they reached, then again (Experiments.PartitionHeals). Only
  // unacknowledged data counts: a slow link that makes progress, however full its
  // buffers, is never cut, and an idle one needs nothing (its next send goes through).
  // ZMTP heartbeats did the same at a ping a second on every link (O(n) a node), and cut
  // slow links whose buffers took longer than the timeout to drain.
  std::chrono::milliseconds link_silence{5000};
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds linger{250};  // how long closing tries to flush a last message (bye)
  int socket_buffer_bytes = 4 << 20;
  // This daemon's CURVE secret key (Z85). Set: every peer needs its public key, the
  // channel is encrypted and only those keys are admitted (peers/curve_auth.h).
  std::string secret_key;
  // With CURVE: the public keys (Z85) of nodes that may join by seeds (--admit-keys).
  std::vector<std::string> admit_keys;
  // Without CURVE: the run's name (--run-id), in every routing id. A node of another
  // run that reaches this one (a stale daemon on a reused port, still trying its old
  // peers) presents another routing id, so it neither takes the id of the member it
  // shares a number with (ROUTER keeps one connection per routing id) nor speaks for it.
  std::string run_id;
};

class ZmqTransport final : public PeerChannel {
 public:
  // Binds `listen` and connects to every peer (none needs to be up yet).
  static Result<std::unique_ptr<ZmqTransport>> create(uint32_t self, const std::string& listen,
                                                      const std::vector<Peer>& peers,
                                                      const TransportOptions& options = {});
  ~ZmqTransport() override;

  uint32_t self() const override { return self_; }
  const std::vector<Peer>& peers() const override { return peers_; }
  const TrafficCounters& traffic() const override { return traffic_; }
  TrafficCounters& traffic_counters() override { return traffic_; }
  Status send(uint32_t peer, uint64_t round, const proto::Body& body) override;
  Status send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                        std::span<const std::byte> payload) override;
  uint64_t pending_sends(uint32_t peer) const override;
  // At most this many payload bytes wait in one peer's queue (a peer that is down or
  // stalled is sent nothing more until it drains); the daemon sets four models' worth.
  void set_queue_budget(uint64_t bytes) { queue_budget_ = bytes; }
  uint64_t queued_bytes(uint32_t peer) const;
  Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                     std::shared_ptr<const std::vector<std::byte>> buffer) override;
  void note_dropped(uint32_t peer, const std::string& why) override;
  LinkState link_state(uint32_t peer) override;
  std::vector<std::string> refused_keys() const override;
  void wake() override;
  Status add_peer(const Peer& peer) override;
  void remove_peer(uint32_t peer) override;
  Status reply_to_joiner(const std::string& route, uint64_t round, const proto::Body& body,
                         std::string_view payload) override;
  // With CURVE: the keys of nodes that may join by seeds from now on (gossipd re-reads
  // --admit-keys on SIGHUP); a banned peer's key stays out. Any thread.
  Status set_admit_keys(const std::vector<std::string>& keys);
  // With CURVE, on a running node (gossipctl ban; the receiving thread only): the peer's
  // key is refused from now on, nothing more is sent to it and what it sends on a
  // connection it already has is dropped; to the strategies it is a peer that never
  // answers, as one banned at start.
  Status ban(uint32_t peer);

 private:
  std::optional<Incoming> recv(std::chrono::milliseconds timeout) override;

  struct Outbound {
    Peer peer;
    zmq::socket_t socket;
    std::atomic<uint64_t> pending{0};  // zero-copy payloads ZeroMQ still reads
    // Payloads (zero-copy and shared) queued for the peer and not yet in the kernel, and
    // how many messages hold a pointer here (the entry lives in removed_ until none).
    std::atomic<uint64_t> queued_bytes{0};
    std::atomic<uint64_t> queued{0};
    bool over_budget = false;  // said once per stretch of refused sends
    // socket's connection events (its monitor), and what they told so far.
    zmq::socket_t events;
    int fd = -1;  // the connection's descriptor (libzmq's) while connected
    // ZMQ_EVENT_CONNECT_RETRIED events since the connection last dropped (or was made).
    uint32_t retries = 0;
    LinkState link;
  };
  // Takes the outbound sockets' connection events into their LinkState.
  void watch_outbound();
  ZmqTransport(uint32_t self, std::vector<Peer> peers);
  Status connect_outbound(const Peer& peer);
  // Closes the peer's outbound socket; the entry waits in removed_ while a queued
  // payload may still count down its `queued`.
  void close_outbound(uint32_t peer);
  // Queues a payload frame after its header, counted against the peer's budget.
  Status send_queued(Outbound& out, uint64_t round, const proto::Body& body, const std::byte* data,
                     size_t size, std::shared_ptr<const std::vector<std::byte>> keep,
                     bool zero_copy);
  // A join-request from a routing id "join-<nonce>" (daemon/admission.h), or nullopt.
  // The User-Id the authenticator gave the connection a frame came on; "" if none.
  static std::string user_id(zmq::message_t& frame);
  std::string public_key_of(uint32_t peer) const;
  std::optional<Incoming> join_request(std::vector<zmq::message_t>& frames, size_t total_frames,
                                       uint64_t wire);
  Outbound* outbound(uint32_t peer);
  // Why there is no outbound(peer): none for a banned peer (the send is dropped, as if
  // it were down), or an unknown one.
  Status no_link(uint32_t peer) const;
  Status send_frames(Outbound& out, uint64_t round, const proto::Body& body,
                     zmq::message_t* payload);
  std::optional<uint32_t> peer_of(const zmq::message_t& routing_id) const;
  // Whether what follows "node-<id>" in a routing id names this node's run.
  bool of_this_run(std::string_view run) const;
  // Logs a peer whose refused messages reach 10, 100, 1000, ...
  void report_offender(uint32_t peer);
  // Connections accepted and lost (the inbound socket's monitor), into watchdog_.
  void absorb_connection_events();
  // Those, then the watchdog's check.
  void watch_connections();
  // No whole message waits on the inbound socket (poll, without waiting).
  bool nothing_waiting();
  // With CURVE: the routing id each peer presents here -> its id (curve_routing_id).
  std::map<std::string, uint32_t> routing_ids_;
  // Banned peers' ids (under CURVE: at start, or gossipctl ban), checked per message.
  std::set<uint32_t> banned_;
  // Routing ids of nodes of other runs heard (bounded): each is logged once.
  std::set<std::string> other_runs_;

  uint32_t self_;
  TransportOptions options_;
  uint64_t queue_budget_ = uint64_t{64} << 20;  // until the model is known
  std::string public_key_;                      // with CURVE
  std::vector<Peer> peers_;
  std::chrono::steady_clock::time_point joins_since_{};
  int joins_ = 0;
  TrafficCounters traffic_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // with CURVE; stopped before context_ closes
  zmq::socket_t inbound_;
  zmq::socket_t monitor_;  // inbound_'s connection events, for watchdog_
  std::unique_ptr<InboundWatchdog> watchdog_;
  std::chrono::steady_clock::time_point last_check_{};
  // A multipart message as taken from inbound_: its first frames, and how many it had.
  struct Taken {
    std::vector<zmq::message_t> frames;
    size_t total = 0;
  };
  bool take_message(Taken& out);  // false: nothing waiting
  // Messages taken early so that the watchdog could check (recv), in arrival order.
  std::deque<Taken> drained_;
  std::vector<std::unique_ptr<Outbound>> outbound_;
  // Of removed peers: kept, their sockets closed, while a zero-copy message's release
  // may still count down their `pending`.
  std::vector<std::unique_ptr<Outbound>> removed_;
  uint64_t monitors_ = 0;  // outbound monitors made: each its own inproc name
  std::map<uint32_t, std::string> last_refusal_;  // peer -> why its last message was refused
  int wake_fd_ = -1;                              // an eventfd; recv returns when it is set
};

// The routing id a daemon of run `run_id` presents to its peers' ROUTER sockets
// without CURVE: "node-<id>", then ".<run id>" where there is one.
std::string routing_id_for(uint32_t node, std::string_view run_id);

}  // namespace gossip::peers

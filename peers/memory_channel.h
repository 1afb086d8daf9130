#pragma once
// The in-process test world's control channel: nodes of one process joined by
// queues (peers/channel.h). Every message is encoded and decoded as ZmqTransport does
// it (proto/message.h) and counted in the node's traffic table, so a strategy sees
// what it would see over TCP. What differs: no socket, no port, no start-up order,
// and nothing is lost unless the test cuts a node off (a node that died).
//
// Time is the hub's clock (base/clock.h). On the real clock a message arrives as it
// is sent. On a simulation's clock (sim/sim_clock.h) the hub's link model decides
// when: each node's uplink sends one message after the other at its bandwidth, then
// the link's latency and jitter; messages between two nodes arrive in the order they
// were sent, as over one TCP connection.
//
// Each channel is used by its node's thread (or task); the hub may be shared by all.
//
// Links are up as ZmqTransport's monitor would say (TrafficCounters::link_up): to every
// peer from the start, down to a node that was cut with its connections closed (a
// process that died: the kernel closes its sockets, and its peers' connections drop at
// once), up again when it restarts.

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "peers/channel.h"

namespace gossip::peers {

class MemoryChannel;

// One direction of a link between two nodes.
struct Link {
  Duration latency{0};
  Duration jitter{0};      // each message waits a further uniform [0, jitter)
  double bytes_per_s = 0;  // the sender's uplink; 0: no limit
};

// A partition: from `from` to `until` (after the hub's start) nothing crosses between
// `side` and the other nodes. As with a switch that drops packets while the TCP
// connections stay up, what was sent across meanwhile is not lost: it arrives, in
// order, once the partition heals (plus the link's latency).
struct Outage {
  Duration from{0}, until{0};
  std::set<uint32_t> side;
  bool splits(uint32_t a, uint32_t b) const { return side.count(a) != side.count(b); }
};

struct LinkModel {
  Link all;                                             // every link but those below
  std::map<std::pair<uint32_t, uint32_t>, Link> links;  // (from, to)
  std::vector<Outage> outages;
  uint64_t seed = 1;  // the jitter's draws
  const Link& between(uint32_t from, uint32_t to) const;
  bool instant() const;  // nothing delays any message
};

class MemoryHub {
 public:
  // What a mailbox holds before a send fails as ZeroMQ's would at its high-water mark.
  static constexpr size_t kMaxQueued = 1 << 16;

  // A link model that delays needs a clock that schedules (Clock::schedules).
  explicit MemoryHub(Clock& clock = Clock::real(), LinkModel links = {});
  MemoryHub(const MemoryHub&) = delete;
  MemoryHub& operator=(const MemoryHub&) = delete;

  // Node `self`'s channel to `peers` (ids; each joins too, before or after). The hub
  // must outlive it.
  std::unique_ptr<MemoryChannel> join(uint32_t self, const std::vector<uint32_t>& peers);
  // The same with the peers' endpoints (what a member list shows: daemon/admission.h).
  std::unique_ptr<MemoryChannel> join_peers(uint32_t self, std::vector<Peer> peers);
  // From now on what `node` sends and what is sent to it vanishes, as with a node that
  // died (what it sent before still arrives). `closes`: its connections drop, and every
  // channel's link to it goes down, as when its process dies; false: they stay up on its
  // peers' side and nothing tells them, as when its machine goes away (power, a cable).
  void cut(uint32_t node, bool closes = true);
  // A new process at a node that was cut: its messages flow again (those sent
  // meanwhile stay lost), into an empty mailbox (what the old process had not read died
  // with it). Its new channel comes from join().
  void restart(uint32_t node);
  // Partitions take `node` for `like`: it is on like's side of each (a node that joins
  // is where the member it asked is).
  void place(uint32_t node, uint32_t like);
  Clock& clock() const { return clock_; }
  // Messages sent through the hub so far (joiners' included), by every node.
  uint64_t messages() const { return messages_.load(std::memory_order_relaxed); }

 private:
  friend class MemoryChannel;
  friend class MemoryJoiner;
  friend class MemoryRingHub;  // its messages share the link model (peers/memory_ring.h)
  struct Frame {
    uint32_t from = 0;
    std::string head;
    zmq::message_t payload;
    bool has_payload = false;
    std::string route;  // a joiner's request: the route its answer goes back by
  };
  struct Mailbox {
    explicit Mailbox(Clock& clock) : arrived(clock) {}
    std::mutex mu;
    Signal arrived;
    std::deque<Frame> frames;
    size_t in_flight = 0;  // sent, not yet arrived: counts against kMaxQueued
  };
  std::shared_ptr<Mailbox> mailbox(uint32_t node);
  // False when the recipient's mailbox is full.
  bool deliver(uint32_t to, Frame frame, uint64_t wire_bytes);
  bool lost(uint32_t from, uint32_t to);
  // Every open channel's link to `node`, but its own (under mu_).
  void set_links_to(uint32_t node, bool up);
  // When a message of `bytes` sent now from `from` arrives at `to`.
  TimePoint arrival(uint32_t from, uint32_t to, uint64_t bytes);

  Clock& clock_;
  const LinkModel links_;
  const bool instant_;     // links_.instant(), asked once: the model never changes
  const TimePoint start_;  // what outages count from
  std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<Mailbox>> boxes_;
  std::set<uint32_t> cut_;
  std::map<uint32_t, TimePoint> uplink_free_;                        // by sender
  std::map<std::pair<uint32_t, uint32_t>, TimePoint> last_arrival_;  // per link, FIFO
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> sent_;           // per link, jitter's draws
  std::map<std::string, uint32_t> routes_;  // a joiner's route -> its address
  std::map<uint32_t, uint32_t> placed_;     // place()
  std::set<MemoryChannel*> channels_;       // open: told of cuts and restarts
  std::atomic<uint64_t> messages_{0};
};

// A node that is no member yet (daemon/join_client.h), at hub address `address` (an id
// no member has: what the link model and partitions know it by). It asks members as a
// joiner's DEALER socket does, each request under a route of its own, and a member's
// channel answers by that route (MemoryChannel::reply_to_joiner).
class MemoryJoiner {
 public:
  MemoryJoiner(MemoryHub& hub, uint32_t address);
  // Sends member `to` a join-request (its encoded head and payload) under a fresh
  // route, which it returns.
  std::string ask(uint32_t to, std::string head, std::string payload);
  // The next reply by `route` (head, payload) before `until`; replies to earlier
  // requests are dropped, as a closed socket's would be.
  std::optional<std::pair<std::string, std::string>> reply(const std::string& route,
                                                           TimePoint until);

 private:
  MemoryHub& hub_;
  uint32_t address_;
  uint64_t asked_ = 0;
  std::shared_ptr<MemoryHub::Mailbox> box_;
};

class MemoryChannel final : public PeerChannel {
 public:
  ~MemoryChannel() override;
  uint32_t self() const override { return self_; }
  const std::vector<Peer>& peers() const override { return peers_; }
  const TrafficCounters& traffic() const override { return traffic_; }
  TrafficCounters& traffic_counters() override { return traffic_; }
  Clock& clock() const override { return hub_.clock(); }
  Status send(uint32_t peer, uint64_t round, const proto::Body& body) override;
  // Copies the payload at once: nothing is pending afterwards.
  Status send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                        std::span<const std::byte> payload) override;
  uint64_t pending_sends(uint32_t) const override { return 0; }
  Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                     std::shared_ptr<const std::vector<std::byte>> buffer) override;
  void note_dropped(uint32_t peer, const std::string& why) override;
  // A member that joined by seeds (as ZmqTransport::add_peer): on the owner's thread.
  Status add_peer(const Peer& peer) override;
  Status reply_to_joiner(const std::string& route, uint64_t round, const proto::Body& body,
                         std::string_view payload) override;

 private:
  friend class MemoryHub;
  MemoryChannel(MemoryHub& hub, uint32_t self, std::vector<Peer> peers,
                std::shared_ptr<MemoryHub::Mailbox> box);
  // `shared`, when set, holds `payload`: the frame keeps it rather than a copy.
  Status send_frame(uint32_t peer, uint64_t round, const proto::Body& body,
                    std::span<const std::byte> payload,
                    std::shared_ptr<const std::vector<std::byte>> shared = nullptr);
  std::optional<Incoming> recv(std::chrono::milliseconds timeout) override;
  // A joiner's request, checked as ZmqTransport::join_request checks it, less its keys
  // and its rate limit (20 a second: a simulation's joiners come on a schedule).
  std::optional<Incoming> join_request(MemoryHub::Frame& f);
  bool knows(uint32_t peer) const;

  MemoryHub& hub_;
  uint32_t self_;
  std::vector<Peer> peers_;
  TrafficCounters traffic_;
  std::shared_ptr<MemoryHub::Mailbox> box_;
};

}  // namespace gossip::peers

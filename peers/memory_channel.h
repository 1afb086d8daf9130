#pragma once
// The in-process test world's control channel: nodes of one process joined by
// queues (peers/channel.h). Every message is encoded and decoded as ZmqTransport does
// it (proto/message.h) and counted in the node's traffic table, so a strategy sees
// what it would see over TCP. What differs: no socket, no port, no start-up order,
// and nothing is lost unless the test cuts a node off (a node that died).
//
// Each channel is used by its node's thread; the hub may be shared by all of them.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "peers/channel.h"

namespace gossip::peers {

class MemoryChannel;

class MemoryHub {
 public:
  // What a mailbox holds before a send fails as ZeroMQ's would at its high-water mark.
  static constexpr size_t kMaxQueued = 1 << 16;

  MemoryHub() = default;
  MemoryHub(const MemoryHub&) = delete;
  MemoryHub& operator=(const MemoryHub&) = delete;

  // Node `self`'s channel to `peers` (ids; each joins too, before or after). The hub
  // must outlive it.
  std::unique_ptr<MemoryChannel> join(uint32_t self, const std::vector<uint32_t>& peers);
  // From now on what `node` sends and what is sent to it vanishes, as with a node that
  // died.
  void cut(uint32_t node);

 private:
  friend class MemoryChannel;
  struct Frame {
    uint32_t from = 0;
    std::string head;
    zmq::message_t payload;
    bool has_payload = false;
  };
  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Frame> frames;
  };
  std::shared_ptr<Mailbox> mailbox(uint32_t node);
  // False when the recipient's mailbox is full.
  bool deliver(uint32_t to, Frame frame);

  std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<Mailbox>> boxes_;
  std::set<uint32_t> cut_;
};

class MemoryChannel final : public PeerChannel {
 public:
  uint32_t self() const override { return self_; }
  const std::vector<Peer>& peers() const override { return peers_; }
  const TrafficCounters& traffic() const override { return traffic_; }
  TrafficCounters& traffic_counters() override { return traffic_; }
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

 private:
  friend class MemoryHub;
  MemoryChannel(MemoryHub& hub, uint32_t self, std::vector<Peer> peers,
                std::shared_ptr<MemoryHub::Mailbox> box);
  Status send_frame(uint32_t peer, uint64_t round, const proto::Body& body,
                    std::span<const std::byte> payload);
  std::optional<Incoming> recv(std::chrono::milliseconds timeout) override;
  bool knows(uint32_t peer) const;

  MemoryHub& hub_;
  uint32_t self_;
  std::vector<Peer> peers_;
  TrafficCounters traffic_;
  std::shared_ptr<MemoryHub::Mailbox> box_;
};

}  // namespace gossip::peers

#pragma once
// The ring transport of the in-process world (peers/ring_channel.h over the hub of
// peers/memory_channel.h): what the elastic ring (sgd/membership/peer_ring.h) runs over
// in the simulation, so that its ring, tree, butterfly and master all-reduces, its
// address exchange and its re-forming are gossipd's own.
//
// A connection is a queue from one node to another. The sender's connect offers it,
// with the token it presents; the receiver's connect takes the offer from the node and
// with the token it expects, as a TCP listener takes the hello of its left neighbor
// (an offer with another token waits for a better one). A message is copied whole when
// it is posted and arrives when the hub's link model says: the sender's uplink, which
// its control messages share, then the link's latency, in order. Its bytes are counted
// as the TCP channel counts them (its 24-byte frame header included).
//
// A channel that is destroyed closes its connections, as a socket closes: the peer's
// wait fails once what was sent before has arrived. cut() does it for a node that died
// (its process gone, its sockets reset): every connection from or to it closes at once.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <tuple>
#include <vector>

#include "peers/memory_channel.h"
#include "peers/ring_channel.h"
#include "peers/traffic.h"

namespace gossip::peers {

class MemoryRingHub {
 public:
  // The TCP channel's frame header: what each message costs on the wire beyond its bytes.
  static constexpr uint64_t kFrameBytes = 24;

  explicit MemoryRingHub(MemoryHub& hub) : hub_(hub) {}
  MemoryRingHub(const MemoryRingHub&) = delete;
  MemoryRingHub& operator=(const MemoryRingHub&) = delete;

  // Node `self`'s transport; `traffic` (may be null) counts its bytes per peer, as
  // RingTransportOptions::traffic does. This hub must outlive it and its channels.
  std::unique_ptr<RingTransport> transport(uint32_t self, TrafficCounters* traffic);
  // Closes every connection from or to `node` (call it with MemoryHub::cut).
  void cut(uint32_t node);

  struct Connection;

 private:
  friend class MemoryRingTransport;
  friend class MemoryRingChannel;
  enum class Kind : uint8_t { kRing, kMesh };
  using Key = std::tuple<uint32_t, uint32_t, Kind>;  // (from, to, kind)
  struct Offer {
    uint64_t token = 0;
    std::shared_ptr<Connection> connection;
  };

  // The sender's half: offers a new connection to `to` (replacing an earlier offer
  // nobody took) and returns it.
  std::shared_ptr<Connection> offer(uint32_t from, uint32_t to, Kind kind, uint64_t token);
  // The receiver's half: waits, by the wait's deadline, for `from`'s offer to `to`
  // carrying `token`, and takes it.
  Result<std::shared_ptr<Connection>> take(uint32_t from, uint32_t to, Kind kind, uint64_t token,
                                           const WaitOptions& wait);
  // Sends `data` over `c` (from `from` to `to`): it arrives when the link model says.
  void transmit(const std::shared_ptr<Connection>& c, uint32_t from, uint32_t to, uint64_t tag,
                std::span<const std::byte> data);
  // The sender's channel is gone: the connection closes behind what it sent.
  void close(const std::shared_ptr<Connection>& c, uint32_t from, uint32_t to);
  Signal& offered(uint32_t to);  // under mu_
  bool is_cut(uint32_t node);

  MemoryHub& hub_;
  std::mutex mu_;
  std::map<Key, Offer> offers_;
  std::map<uint32_t, std::unique_ptr<Signal>> offered_;  // by receiver
  std::vector<std::weak_ptr<Connection>> open_;          // for cut()
};

}  // namespace gossip::peers

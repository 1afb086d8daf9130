#pragma once
// The daemon's ring all-reduce: the node and its peers in a ring (ascending ids),
// over a ring transport (TCP, RDMA). The transports' ports travel over the ZeroMQ
// control channel: each node tells its left neighbor where to connect (a
// ring-address message, repeated whenever that neighbor says hello again, e.g.
// after a restart). A failed operation drops the ring's connections; the next one
// connects again.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "peers/ring_channel.h"
#include "peers/zmq_transport.h"
#include "sgd/all_reduce.h"
#include "sgd/ring_all_reduce.h"
#include "sgd/ring_schedule.h"

namespace gossip::sgd {

struct PeerRingOptions {
  uint64_t chunk_bytes = 1 << 20;  // pipeline chunk
  uint32_t depth = 4;              // receives posted ahead
};

class PeerRing final : public AllReduce {
 public:
  // `control` and `transport` must outlive this object.
  PeerRing(peers::ZmqTransport& control, peers::RingTransport& transport,
           const PeerRingOptions& options);
  ~PeerRing() override;

  Status all_reduce_mean(std::span<float> data, uint64_t round,
                         const CollectiveOptions& options) override;
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  void set_layout_fingerprint(uint64_t fingerprint) override;

  const RingOrder& order() const { return order_; }

 private:
  void announce();  // tells the left neighbor our ring port
  void absorb(const peers::Incoming& in);
  Status connect(const CollectiveOptions& options);

  peers::ZmqTransport& control_;
  peers::RingTransport& transport_;
  PeerRingOptions options_;
  RingOrder order_;
  std::string right_host_;
  std::optional<uint16_t> right_port_;  // from the right neighbor's ring-address
  uint64_t right_layout_ = 0;           // the layout it announced with it
  // A random token we hand our left neighbor in our ring-address and require in its
  // ring hello, and the one our right neighbor handed us. The ring's links are plain
  // TCP or verbs; with CURVE on the control channel, only an authenticated neighbor
  // learns the token, so nobody else can take its place in the ring.
  uint64_t token_ = 0;
  uint64_t right_token_ = 0;
  uint64_t layout_ = 0;
  std::unique_ptr<peers::RingChannel> channel_;
  RingAllReduce ring_;
};

}  // namespace gossip::sgd

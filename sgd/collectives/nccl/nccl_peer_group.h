#pragma once
// The daemon's NCCL all-reduce: one communicator over the node and its peers, one
// GPU each. The lowest id makes the ncclUniqueId and sends it to every peer over
// the ZeroMQ control channel (an nccl-id message, numbered by generation, with the
// layout fingerprint); the communicator is created at the first operation, when
// every node is there, and made again with a new id after a failure (NCCL aborts a
// communicator that timed out or lost a peer).

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "peers/router.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/collectives/nccl/nccl_all_reduce.h"
#include "sgd/collectives/ring_schedule.h"

namespace gossip::sgd {

class NcclPeerGroup final : public AllReduce {
 public:
  // `control` must outlive this object. Subscribes to hello, bye and nccl-id on it.
  NcclPeerGroup(peers::Router& control, int device, size_t staging_bytes);

  Status all_reduce_mean(std::span<float> data, uint64_t round,
                         const CollectiveOptions& options) override;
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  void set_layout_fingerprint(uint64_t fingerprint) override;

 private:
  void absorb(const peers::Incoming& in);         // the router's handler
  Status join(const CollectiveOptions& options);  // makes comm_ for the next generation

  peers::Router& router_;
  peers::PeerChannel& control_;
  int device_;
  size_t staging_bytes_;
  RingOrder order_;  // rank = position of our id; rank 0 makes the ids
  uint64_t layout_ = 0;
  uint64_t generation_ = 0;  // of the communicator in use (or the next one)
  struct Offer {
    uint64_t generation = 0;
    uint64_t layout = 0;
    std::array<char, 128> id{};
  };
  std::optional<Offer> offer_;  // the newest id from rank 0
  std::unique_ptr<NcclAllReduce> comm_;
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd

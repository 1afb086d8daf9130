#pragma once
// The averaging engine behind local SGD (and later synchronous SGD). This release
// has an all-gather over the ZeroMQ transport; the ring over TCP, RDMA and NCCL
// fills the same interface.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>

#include "base/split_mix64.h"
#include "base/status.h"

namespace gossip::compression {
class Codec;
class ErrorFeedback;
class ThreadPool;
}  // namespace gossip::compression

namespace gossip::sgd {

// How this node's contribution travels. With a codec, the contribution is what the
// receivers decode from its payloads (compressed chunk by chunk, through the error
// feedback residual when one is given), and every node, this one included, sums
// exactly those decoded values.
struct Compression {
  const compression::Codec* codec = nullptr;  // nullptr: raw fp32
  compression::ErrorFeedback* error_feedback = nullptr;
  compression::ThreadPool* pool = nullptr;  // splits encoding of large chunks; nullptr: caller only
};

// The randomness of one payload's codec (qsgd's rounding, randk's indices): a
// function of what both sender and receiver know (the round, the sender, the
// payload's place in the round), so the receiver derives the sender's seed.
inline uint64_t chunk_seed(uint64_t round, uint32_t node, uint64_t seq) {
  return mix64(round * kWeyl ^ (uint64_t{node} << 40) ^ seq);
}

struct CollectiveOptions {
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* cancel = nullptr;  // set by the owner to abandon the operation
  Compression compression;
  // The data is each node's change since the last round (local SGD's outer step) or
  // its gradients, not its model: an elastic ring does not bound a result's norm by the
  // node's own then (a mean of changes may be larger than a small one;
  // sgd/membership/peer_ring.h).
  bool deltas = false;
};

class AllReduce {
 public:
  virtual ~AllReduce() = default;
  // In place: data <- (1/n) sum over all n nodes of data. Every node calls it with
  // data of the same length and the same `round`. On failure data is unchanged and
  // the Status names the peer(s) that did not deliver.
  virtual Status all_reduce_mean(std::span<float> data, uint64_t round,
                                 const CollectiveOptions& options) = 0;
  // Between operations: receives, validates and buffers what peers already sent for
  // `next_round` (of `numel` elements), waiting at most `wait`. Keeps traffic
  // accounting and error detection live while no round runs.
  virtual void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) = 0;
  // The round to run when the owner proposes `proposed`: later after this node took
  // a later round's result from the others (an elastic ring it came back into).
  virtual uint64_t round_to_run(uint64_t proposed) const { return proposed; }
  // Once after the nodes merged with another group that trained apart (an elastic
  // ring after a partition healed, sgd/membership/peer_ring.h): the members' synchronization
  // points differ, so the owner's next round averages the models themselves. A merge
  // decided inside all_reduce_mean fails that call (data unchanged) and reports it
  // here: the owner runs its round again, as that first round.
  virtual bool take_merge() { return false; }
  // Sets the layout fingerprint carried in every message; peers with another one are refused.
  virtual void set_layout_fingerprint(uint64_t fingerprint) = 0;
};

}  // namespace gossip::sgd

#pragma once
// A synchronization strategy: what a node does with its model at a sync point.
// Local SGD averages through an all-reduce; the gossip family mixes with the
// neighbors of the round's overlay. The daemon's sync worker owns one and calls it
// from its thread only.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>

#include "proto/status.h"

namespace gossip::sgd {

struct RoundOptions {
  std::chrono::steady_clock::time_point deadline;  // the round fails after it
  const std::atomic<bool>* cancel = nullptr;        // set by the owner to abandon the round
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // In place: model <- this node's model after round `round`. Every node calls it
  // with the same rounds in order, on models of the same layout.
  virtual Status synchronize(std::span<float> model, uint64_t round,
                             const RoundOptions& options) = 0;
  // Between rounds: receives and buffers what peers already sent for `next_round`
  // (of `numel` elements), waiting at most `wait`.
  virtual void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) = 0;
  // The layout fingerprint carried in every message; peers with another are refused.
  virtual void set_layout_fingerprint(uint64_t fingerprint) = 0;
};

}  // namespace gossip::sgd

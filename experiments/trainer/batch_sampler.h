#pragma once
// Minibatches drawn from a shard without replacement: each epoch is a fresh seeded
// permutation of the shard; a batch that crosses the end of an epoch continues in the
// next one, so a shard smaller than a batch still gives full batches.

#include <cstdint>
#include <span>
#include <vector>

#include "experiments/trainer/rng.h"

namespace gossip::trainer {

class BatchSampler {
 public:
  // shard must be non-empty.
  BatchSampler(std::vector<uint32_t> shard, uint64_t seed);

  // The next `batch` sample indices; valid until the next call.
  std::span<const uint32_t> next(size_t batch);

  size_t shard_size() const { return order_.size(); }
  uint64_t epochs_started() const { return epochs_; }

 private:
  std::vector<uint32_t> order_;
  std::vector<uint32_t> batch_;
  size_t position_ = 0;
  uint64_t epochs_ = 0;
  Rng rng_;
};

}  // namespace gossip::trainer

#include "experiments/trainer/batch_sampler.h"

#include <cassert>

namespace gossip::trainer {

BatchSampler::BatchSampler(std::vector<uint32_t> shard, uint64_t seed)
    : order_(std::move(shard)), rng_(seed) {
  assert(!order_.empty());
  position_ = order_.size();  // the first call starts an epoch
}

std::span<const uint32_t> BatchSampler::next(size_t batch) {
  batch_.resize(batch);
  for (size_t i = 0; i < batch; ++i) {
    if (position_ == order_.size()) {
      rng_.shuffle(std::span<uint32_t>(order_));
      position_ = 0;
      ++epochs_;
    }
    batch_[i] = order_[position_++];
  }
  return batch_;
}

}  // namespace gossip::trainer

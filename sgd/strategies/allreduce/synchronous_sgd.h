#pragma once
// Synchronous data-parallel SGD, the baseline every other strategy is measured
// against: the trainers hand in their gradients at every step, the nodes average
// them with the all-reduce, and each trainer applies its own optimizer to the mean,
// so all replicas take the same step. With a codec the gradients travel compressed,
// through an error-feedback residual when the codec is biased (EF-SGD, Karimireddy
// et al. 2019).

#include <map>
#include <memory>

#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

class SynchronousSgd final : public Strategy {
 public:
  // codec may be null (raw fp32); it and all_reduce must outlive this object.
  SynchronousSgd(AllReduce& all_reduce, const compression::Codec* codec, bool error_feedback,
                 compression::ThreadPool* pool);

  // In place: gradients <- the mean of every node's gradients of this step (or of
  // the bucket at options.offset).
  Status synchronize(std::span<float> gradients, uint64_t round,
                     const RoundOptions& options) override;
  uint64_t round_to_run(uint64_t proposed) const override {
    return all_reduce_.round_to_run(proposed);
  }
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override {
    all_reduce_.progress(next_round, numel, wait);
  }
  void set_layout_fingerprint(uint64_t fingerprint) override {
    all_reduce_.set_layout_fingerprint(fingerprint);
  }

 private:
  AllReduce& all_reduce_;
  const compression::Codec* codec_;
  bool error_feedback_;
  compression::ThreadPool* pool_;
  // By the offset of the bucket each one compresses (the whole model: 0).
  std::map<uint64_t, std::unique_ptr<compression::ErrorFeedback>> residuals_;
};

}  // namespace gossip::sgd

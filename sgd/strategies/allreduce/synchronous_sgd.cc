#include "sgd/strategies/allreduce/synchronous_sgd.h"

#include "sgd/registry.h"

namespace gossip::sgd {

SynchronousSgd::SynchronousSgd(AllReduce& all_reduce, const compression::Codec* codec,
                               bool error_feedback, compression::ThreadPool* pool)
    : all_reduce_(all_reduce), codec_(codec), error_feedback_(error_feedback), pool_(pool) {}

Status SynchronousSgd::synchronize(std::span<float> gradients, uint64_t round,
                                   const RoundOptions& round_options) {
  CollectiveOptions options;
  options.deadline = round_options.deadline;
  options.cancel = round_options.cancel;
  if (codec_ && codec_->id() != proto::CodecId::kNone) {
    compression::ErrorFeedback* residual = nullptr;
    if (error_feedback_) {
      auto& r = residuals_[round_options.offset];
      if (!r || r->residual().size() != gradients.size())
        r = std::make_unique<compression::ErrorFeedback>(*codec_, gradients.size());
      residual = r.get();
    }
    options.compression = {codec_, residual, pool_};
  }
  options.deltas = true;  // gradients: no norm of a model to bound a result by
  return all_reduce_.all_reduce_mean(gradients, round, options);
}

StrategyDescriptor synchronous_sgd_strategy() {
  StrategyDescriptor d;
  d.name = "allreduce";
  d.summary = "synchronous SGD: the trainers' gradients averaged at every step";
  d.fabric = Fabric::kAllReduce;
  d.gradients = true;
  d.options = {"clip"};
  d.make = [](const StrategyResources& r,
              std::string* detail) -> Result<std::unique_ptr<Strategy>> {
    *detail = ": gradients averaged every step";
    return std::unique_ptr<Strategy>(
        std::make_unique<SynchronousSgd>(*r.all_reduce, r.codec, r.error_feedback, r.pool));
  };
  return d;
}

}  // namespace gossip::sgd

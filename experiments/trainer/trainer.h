#pragma once
// One trainer's local work: minibatches from its shard, forward/backward, SGD update
// in place on the parameters it views (its own buffer or the daemon's arena). What
// happens between steps (synchronization) is the caller's business.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "experiments/trainer/batch_sampler.h"
#include "experiments/trainer/dataset.h"
#include "experiments/trainer/evaluation.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/sgd.h"

namespace gossip::trainer {

struct TrainerOptions {
  ModelKind model = ModelKind::kMlp;
  size_t batch = 64;
  SgdOptions sgd;
  uint64_t seed = 0;
  // With the seed, these pick the sampling order, so that nodes (and trainers of one
  // node) draw different batches while starting from the same model.
  uint32_t node = 0;
  uint32_t local_rank = 0;
};

class Trainer {
 public:
  // `train` must outlive the trainer; `shard` are non-empty indices into it; the
  // parameters must match model_layout(options.model). Does not initialize the parameters.
  static Result<Trainer> create(const Dataset& train, std::vector<uint32_t> shard,
                                std::vector<std::span<float>> parameters,
                                const TrainerOptions& options);

  // One local SGD step on the next minibatch at learning rate lr; returns the
  // minibatch's mean training loss.
  float step(float lr);
  float step() { return step(sgd_.options().lr); }
  // The same step in two halves, for synchronous SGD: the minibatch's gradients
  // (left in model().gradients(); returns the loss), then the optimizer's update
  // from `gradients` (the mean over all trainers) at learning rate lr.
  float compute_gradients();
  void apply(const std::vector<std::span<float>>& gradients, float lr);

  Evaluation evaluate(const Dataset& test) { return gossip::trainer::evaluate(*model_, test); }

  Model& model() { return *model_; }
  const BatchSampler& sampler() const { return sampler_; }

 private:
  Trainer(const Dataset& train, BatchSampler sampler, std::unique_ptr<Model> model,
          const TrainerOptions& options);

  const Dataset* train_;
  BatchSampler sampler_;
  std::unique_ptr<Model> model_;
  MomentumSgd sgd_;
  size_t batch_;
  std::vector<float> inputs_;
  std::vector<uint8_t> labels_;
};

}  // namespace gossip::trainer

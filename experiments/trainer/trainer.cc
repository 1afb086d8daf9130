#include "experiments/trainer/trainer.h"

#include <fmt/format.h>

namespace gossip::trainer {
namespace {

constexpr uint64_t kSampleStream = 0x53414d504c45ULL;  // "SAMPLE"

std::vector<size_t> tensor_sizes(ModelKind kind) {
  std::vector<size_t> sizes;
  for (const auto& shape : model_layout(kind)) sizes.push_back(shape.numel());
  return sizes;
}

}  // namespace

Result<Trainer> Trainer::create(const Dataset& train, std::vector<uint32_t> shard,
                                std::vector<std::span<float>> parameters,
                                const TrainerOptions& options) {
  if (shard.empty()) return Status::invalid("the trainer's shard of the training set is empty");
  for (uint32_t i : shard) {
    if (i >= train.size()) {
      return Status::invalid(
          fmt::format("shard index {} is outside the training set ({} samples)", i, train.size()));
    }
  }
  if (options.batch == 0) return Status::invalid("the batch size must be at least 1");
  auto model = make_model(options.model, std::move(parameters));
  if (!model) return model.status();
  const uint64_t seed =
      mix_seed(mix_seed(mix_seed(options.seed, kSampleStream), options.node), options.local_rank);
  return Trainer(train, BatchSampler(std::move(shard), seed), std::move(*model), options);
}

Trainer::Trainer(const Dataset& train, BatchSampler sampler, std::unique_ptr<Model> model,
                 const TrainerOptions& options)
    : train_(&train),
      sampler_(std::move(sampler)),
      model_(std::move(model)),
      sgd_(tensor_sizes(options.model), options.sgd),
      batch_(options.batch),
      inputs_(options.batch * kImagePixels),
      labels_(options.batch) {}

float Trainer::step(float lr) {
  const float loss = compute_gradients();
  sgd_.step(model_->parameters(), model_->gradients(), lr);
  return loss;
}

float Trainer::compute_gradients() {
  const auto indices = sampler_.next(batch_);
  train_->gather(indices, inputs_, labels_);
  return model_->forward_backward(inputs_, labels_);
}

void Trainer::apply(const std::vector<std::span<float>>& gradients, float lr) {
  sgd_.step(model_->parameters(), gradients, lr);
}

}  // namespace gossip::trainer

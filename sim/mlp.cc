#include "sim/mlp.h"

#include <fmt/format.h>

#include "experiments/trainer/model.h"
#include "experiments/trainer/partition.h"

namespace gossip::sim {

using trainer::ModelKind;

Result<std::unique_ptr<MlpCluster>> MlpCluster::load(const MlpOptions& o, uint32_t trainers) {
  if (o.batch == 0 || o.local_steps == 0)
    return Status::invalid("--batch and --local-steps: at least 1");
  // A batch is copied into a buffer of its own per trainer: bounded before it is allocated.
  if (o.batch > kMaxBatch || o.local_steps > kMaxLocalSteps)
    return Status::invalid(fmt::format("--batch {} and --local-steps {}: at most {} and {}",
                                       o.batch, o.local_steps, kMaxBatch, kMaxLocalSteps));
  if (!(o.lr > 0 && o.lr < 10))
    return Status::invalid(fmt::format("--lr {}: above 0 and below 10", o.lr));
  auto partition = trainer::parse_partition(o.partition);
  if (!partition) return partition.status().with_context("--data-partition");
  auto c = std::make_unique<MlpCluster>();
  c->o_ = o;
  const auto hint = fmt::format(
      "--model mlp reads Fashion-MNIST from {} (Debian's dataset-fashion-mnist; --data-dir)",
      o.data_dir);
  auto train = trainer::load_fashion_mnist(o.data_dir, trainer::Split::kTrain);
  if (!train) return train.status().with_context(hint);
  auto test = trainer::load_fashion_mnist(o.data_dir, trainer::Split::kTest);
  if (!test) return test.status().with_context(hint);
  c->train_ = std::move(train).value();
  c->test_ = std::move(test).value();
  auto shards =
      trainer::make_shards(c->train_.labels, trainer::kNumClasses, *partition, trainers, o.seed);
  if (!shards) return shards.status().with_context("--data-partition");
  c->shards_ = std::move(shards).value();
  c->trainers_.resize(trainers);
  return c;
}

size_t MlpCluster::numel() { return trainer::model_parameters(ModelKind::kMlp); }

void MlpCluster::init(std::span<float> x) const {
  const auto layout = trainer::model_layout(ModelKind::kMlp);
  trainer::he_init(layout, trainer::tensor_views(layout, x.data()), o_.seed);
}

Status MlpCluster::attach(uint32_t index, std::span<float> x) {
  // A bug in the caller, not an input: each trainer once, within the shards cut.
  if (index >= trainers_.size() || trainers_[index])
    return Status::invalid(
        fmt::format("MLP trainer {} of {}: attached twice or not cut", index, trainers_.size()));
  trainer::TrainerOptions to;
  to.batch = o_.batch;
  to.sgd.lr = o_.lr;
  to.seed = o_.seed;
  to.node = index;
  auto t = trainer::Trainer::create(
      train_, shards_[index],
      trainer::tensor_views(trainer::model_layout(ModelKind::kMlp), x.data()), to);
  if (!t) return t.status();
  trainers_[index].emplace(std::move(t).value());
  return Status::ok();
}

double MlpCluster::step(uint32_t index) {
  double loss = 0;
  for (uint32_t s = 0; s < o_.local_steps; ++s) loss += trainers_.at(index).value().step();
  return loss / o_.local_steps;
}

trainer::Evaluation MlpCluster::evaluate(std::span<float> x) const {
  auto model = trainer::make_model(
      ModelKind::kMlp, trainer::tensor_views(trainer::model_layout(ModelKind::kMlp), x.data()));
  // The views match the layout by construction.
  return trainer::evaluate(**model, test_);
}

}  // namespace gossip::sim

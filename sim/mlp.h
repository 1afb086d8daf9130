#pragma once
// --model mlp: every simulated node (with SMA, each of its learners) trains the
// reference trainer's MLP on its own replica (experiments/trainer/trainer.h:
// 784-256-128-10, momentum SGD on minibatches of its own shard of Fashion-MNIST), one
// Trainer each as gossip-train runs one per GPU, with gossip-train's defaults. So a simulated
// cluster's accuracy can be set beside a real one's (docs/simulation.md). Computing costs no
// virtual time:
// --step-time-ms says what a step takes.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "experiments/trainer/dataset.h"
#include "experiments/trainer/evaluation.h"
#include "experiments/trainer/trainer.h"

namespace gossip::sim {

struct MlpOptions {
  std::string data_dir = trainer::kDefaultDataDir;
  std::string partition = "iid";  // or dirichlet:ALPHA (experiments/trainer/partition.h)
  size_t batch = 64;
  uint32_t local_steps = 1;  // a trainer's steps between two synchronizations
  float lr = 0.05f;          // momentum 0.9 and weight decay 5e-4, as gossip-train's
  uint64_t seed = 0;
};

class MlpCluster {
 public:
  static constexpr size_t kMaxBatch = 60'000;  // the training set
  static constexpr uint32_t kMaxLocalSteps = 100'000;

  // Loads Fashion-MNIST's training and test sets and cuts the first into a shard for
  // each of `trainers` (a node's one, or each of SMA's learners).
  static Result<std::unique_ptr<MlpCluster>> load(const MlpOptions& options, uint32_t trainers);
  static size_t numel();

  // The point every replica starts from: He init from the seed, as every gossip-train's.
  void init(std::span<float> x) const;
  // Trainer `index`'s, over its replica `x`, which must stay where it is.
  Status attach(uint32_t index, std::span<float> x);
  // The trainer's local steps of one round; their mean training loss.
  double step(uint32_t index);
  // The test set's accuracy and mean loss for the model `x`.
  trainer::Evaluation evaluate(std::span<float> x) const;

 private:
  MlpOptions o_;
  trainer::Dataset train_, test_;
  std::vector<std::vector<uint32_t>> shards_;
  std::vector<std::optional<trainer::Trainer>> trainers_;
};

}  // namespace gossip::sim

#pragma once
// Test-set evaluation of the model, in batches to bound the activation memory.

#include <cstddef>

#include "experiments/trainer/dataset.h"
#include "experiments/trainer/model.h"

namespace gossip::trainer {

struct Evaluation {
  double accuracy = 0;  // fraction in [0, 1]
  double loss = 0;      // mean cross-entropy
  size_t samples = 0;
};

Evaluation evaluate(Model& model, const Dataset& data, size_t batch = 1000);

}  // namespace gossip::trainer

#include "experiments/trainer/evaluation.h"

#include <algorithm>
#include <vector>

namespace gossip::trainer {

Evaluation evaluate(Model& model, const Dataset& data, size_t batch) {
  batch = std::max<size_t>(batch, 1);
  std::vector<float> inputs(batch * kImagePixels);
  std::vector<uint8_t> labels(batch);
  double loss_sum = 0;
  size_t correct = 0;
  for (size_t begin = 0; begin < data.size(); begin += batch) {
    const size_t n = std::min(batch, data.size() - begin);
    std::span<float> x(inputs.data(), n * kImagePixels);
    std::span<uint8_t> y(labels.data(), n);
    data.gather_range(begin, x, y);
    const auto score = model.score(x, y);
    loss_sum += score.loss_sum;
    correct += score.correct;
  }
  Evaluation result;
  result.samples = data.size();
  if (data.size() > 0) {
    result.accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
    result.loss = loss_sum / static_cast<double>(data.size());
  }
  return result;
}

}  // namespace gossip::trainer

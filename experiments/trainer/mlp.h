#pragma once
// The reference model: an MLP 784-256-128-10 with ReLU and softmax cross-entropy,
// forward and backward on the CPU with Eigen. Its layout (model.h):
//   fc1.weight [256, 784], fc1.bias [256], fc2.weight [128, 256], fc2.bias [128],
//   fc3.weight [10, 128],  fc3.bias [10]
// Weights are [out, in], row-major (PyTorch's nn.Linear convention). Gradients and
// activations are owned here.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "experiments/trainer/dataset.h"
#include "experiments/trainer/model.h"

namespace gossip::trainer {

class Mlp final : public Model {
 public:
  static constexpr size_t kInputs = kImagePixels;
  static constexpr size_t kHidden1 = 256;
  static constexpr size_t kHidden2 = 128;
  static constexpr size_t kOutputs = kNumClasses;
  static constexpr size_t kNumTensors = 6;

  static std::span<const TensorShape, kNumTensors> layout();
  static size_t num_parameters();

  // Views `parameters`; fails unless they match layout() in count and sizes.
  static Result<Mlp> create(std::vector<std::span<float>> parameters);

  void init(uint64_t seed) override;
  float forward_backward(std::span<const float> inputs, std::span<const uint8_t> labels) override;
  Score score(std::span<const float> inputs, std::span<const uint8_t> labels) override;

  const std::vector<std::span<float>>& parameters() const override { return parameters_; }
  std::vector<std::span<float>> gradients() override;

 private:
  explicit Mlp(std::vector<std::span<float>> parameters);
  // Fills h1_, h2_ (post-ReLU) and logits_ for `batch` rows.
  void forward(const float* inputs, size_t batch);

  std::vector<std::span<float>> parameters_;
  AlignedFloats gradients_;  // all tensors back to back, in layout order
  AlignedFloats h1_, h2_, logits_, d1_, d2_;
};

}  // namespace gossip::trainer

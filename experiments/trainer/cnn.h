#pragma once
// The large reference model: a CNN on Fashion-MNIST, 3.2 M parameters, whose
// all-reduce moves 13 MB a step, so that the network, not only the cores, sets the
// pace (issue 23's "workload where the network matters"):
//   conv1 5x5, 1 -> 16, pad 2, ReLU, max-pool 2   28x28 -> 14x14x16
//   conv2 5x5, 16 -> 32, pad 2, ReLU, max-pool 2  14x14 -> 7x7x32
//   fc1 1568 -> 2048, ReLU;  fc2 2048 -> 10, softmax cross-entropy
// Activations are NHWC; a convolution is im2col and one GEMM (Eigen) per batch, its
// weight [out channels, 5 x 5 x in channels] with the kernel position outer and the
// input channel inner. The flattened 7x7x32 input of fc1 is in that NHWC order.

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "experiments/trainer/dataset.h"
#include "experiments/trainer/model.h"

namespace gossip::trainer {

class Cnn final : public Model {
 public:
  static constexpr size_t kSide = 28;  // the image is kSide x kSide, one channel
  static constexpr size_t kKernel = 5;
  static constexpr size_t kChannels1 = 16;
  static constexpr size_t kChannels2 = 32;
  static constexpr size_t kFlat = (kSide / 4) * (kSide / 4) * kChannels2;  // 1568
  static constexpr size_t kHidden = 2048;
  static constexpr size_t kOutputs = kNumClasses;
  static constexpr size_t kNumTensors = 8;

  static std::span<const TensorShape, kNumTensors> layout();
  static size_t num_parameters();
  static Result<Cnn> create(std::vector<std::span<float>> parameters);

  void init(uint64_t seed) override;
  float forward_backward(std::span<const float> inputs, std::span<const uint8_t> labels) override;
  // In slices of at most kScoreBatch images, so that an evaluation of 1000 does not
  // hold a gigabyte of im2col rows.
  Score score(std::span<const float> inputs, std::span<const uint8_t> labels) override;
  const std::vector<std::span<float>>& parameters() const override { return parameters_; }
  std::vector<std::span<float>> gradients() override;

 private:
  static constexpr size_t kScoreBatch = 128;
  explicit Cnn(std::vector<std::span<float>> parameters);
  // Fills every activation below for `batch` images.
  void forward(const float* inputs, size_t batch);

  std::vector<std::span<float>> parameters_;
  AlignedFloats gradients_;  // all tensors back to back, in layout order
  // Forward: im2col rows, post-ReLU convolutions, pooled maps and where each pooled
  // value came from, the hidden layer and the logits.
  AlignedFloats cols1_, conv1_, pool1_, cols2_, conv2_, pool2_, hidden_, logits_;
  std::vector<uint32_t> argmax1_, argmax2_;
  // Backward scratch.
  AlignedFloats d_hidden_, d_pool2_, d_conv2_, d_cols2_, d_pool1_, d_conv1_;
};

}  // namespace gossip::trainer

#pragma once
// The reference trainer's models, behind one interface: the MLP (mlp.h, 235 k
// parameters, cheap per step) and the CNN (cnn.h, 3.2 M parameters, a workload whose
// model is large enough for the network to matter). A model does not own its
// parameters: it views spans, which may live in the daemon's shared-memory arena, in
// the layout every trainer of every node declares. Gradients and activations are the
// model's own.

#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::trainer {

// A model's own buffers (activations, their gradients, the parameters' gradients) on
// 64-byte boundaries. Eigen peels the elements before a buffer's first vector-aligned
// one and computes them on the scalar path, whose sums associate otherwise; with AVX's
// 32-byte vectors (GOSSIP_TRAINER_FOR_THIS_CPU) a buffer from plain new lands on 16 or
// 32 by chance, and two runs of one seed in one process differed in their last bits
// (MlpTraining.IsReproducibleFromTheSeedAndSamplesPerNode).
template <class T>
struct CacheAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheAligned() = default;
  template <class U>
  CacheAligned(const CacheAligned<U>&) {}  // NOLINT(google-explicit-constructor): rebinding
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const CacheAligned<U>&) const {
    return true;
  }
};
using AlignedFloats = std::vector<float, CacheAligned<float>>;

struct TensorShape {
  std::string_view name;
  size_t rows = 0;  // output features (channels) for a weight; the length for a bias
  size_t cols =
      1;  // input features (a convolution: kernel positions x input channels); 1 for a bias
  size_t numel() const { return rows * cols; }
};

enum class ModelKind : uint8_t { kMlp, kCnn };
std::optional<ModelKind> parse_model_kind(std::string_view name);  // "mlp" or "cnn"
std::string_view model_kind_name(ModelKind kind);

class Model {
 public:
  virtual ~Model() = default;

  // He (Kaiming) normal init, std = sqrt(2 / fan_in), biases zero. Depends only on the
  // seed, so every node that initializes starts from the same model.
  virtual void init(uint64_t seed) = 0;

  // Mean softmax cross-entropy over the batch (inputs: labels.size() images of
  // kImagePixels floats); leaves its gradient with respect to every parameter in
  // gradients().
  virtual float forward_backward(std::span<const float> inputs,
                                 std::span<const uint8_t> labels) = 0;

  struct Score {
    double loss_sum = 0;  // summed (not mean) cross-entropy
    size_t correct = 0;   // argmax == label
  };
  // Forward only.
  virtual Score score(std::span<const float> inputs, std::span<const uint8_t> labels) = 0;

  virtual const std::vector<std::span<float>>& parameters() const = 0;
  virtual std::vector<std::span<float>> gradients() = 0;
};

// The layout of a kind of model, and its parameter count.
std::span<const TensorShape> model_layout(ModelKind kind);
size_t model_parameters(ModelKind kind);

// A layout's element count, and one span per tensor over `data`, back to back in
// layout order (data holds layout_numel(layout) floats).
size_t layout_numel(std::span<const TensorShape> layout);
std::vector<std::span<float>> tensor_views(std::span<const TensorShape> layout, float* data);

// Views `parameters`; fails unless they match model_layout(kind) in count and sizes.
Result<std::unique_ptr<Model>> make_model(ModelKind kind, std::vector<std::span<float>> parameters);

// What both models end with: softmax cross-entropy over `batch` rows of `classes`
// logits. softmax_backward replaces the logits by d(mean loss)/d(logits) and returns
// the mean loss; score_logits counts the argmax hits and sums the losses.
float softmax_backward(std::span<float> logits, std::span<const uint8_t> labels, size_t classes);
Model::Score score_logits(std::span<const float> logits, std::span<const uint8_t> labels,
                          size_t classes);

// Checks `parameters` against `layout`; the error names the model and the tensor.
Status check_layout(std::string_view model, std::span<const TensorShape> layout,
                    const std::vector<std::span<float>>& parameters);

// He normal init of the weights (fan_in = cols), zero biases, from one seed.
void he_init(std::span<const TensorShape> layout, const std::vector<std::span<float>>& parameters,
             uint64_t seed);

}  // namespace gossip::trainer

#include "experiments/trainer/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "experiments/trainer/cnn.h"
#include "experiments/trainer/mlp.h"
#include "experiments/trainer/rng.h"

namespace gossip::trainer {
namespace {

constexpr uint64_t kInitStream = 0x494e4954ULL;  // "INIT"

}  // namespace

std::optional<ModelKind> parse_model_kind(std::string_view name) {
  if (name == "mlp") return ModelKind::kMlp;
  if (name == "cnn") return ModelKind::kCnn;
  return std::nullopt;
}

std::string_view model_kind_name(ModelKind kind) { return kind == ModelKind::kCnn ? "cnn" : "mlp"; }

std::span<const TensorShape> model_layout(ModelKind kind) {
  if (kind == ModelKind::kCnn) return Cnn::layout();
  return Mlp::layout();
}

size_t model_parameters(ModelKind kind) { return layout_numel(model_layout(kind)); }

size_t layout_numel(std::span<const TensorShape> layout) {
  size_t n = 0;
  for (const auto& shape : layout) n += shape.numel();
  return n;
}

std::vector<std::span<float>> tensor_views(std::span<const TensorShape> layout, float* data) {
  std::vector<std::span<float>> views;
  for (const auto& shape : layout) {
    views.emplace_back(data, shape.numel());
    data += shape.numel();
  }
  return views;
}

Result<std::unique_ptr<Model>> make_model(ModelKind kind,
                                          std::vector<std::span<float>> parameters) {
  if (kind == ModelKind::kCnn) {
    auto cnn = Cnn::create(std::move(parameters));
    if (!cnn) return cnn.status();
    return std::unique_ptr<Model>(std::make_unique<Cnn>(std::move(*cnn)));
  }
  auto mlp = Mlp::create(std::move(parameters));
  if (!mlp) return mlp.status();
  return std::unique_ptr<Model>(std::make_unique<Mlp>(std::move(*mlp)));
}

float softmax_backward(std::span<float> logits, std::span<const uint8_t> labels, size_t classes) {
  // Row by row with the max subtracted; exp in double, as the loss is summed in double.
  const size_t batch = labels.size();
  double loss_sum = 0;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  std::vector<double> e(classes);
  for (size_t r = 0; r < batch; ++r) {
    float* z = &logits[r * classes];
    const float max = *std::max_element(z, z + classes);
    double sum = 0;
    for (size_t k = 0; k < classes; ++k) sum += (e[k] = std::exp(static_cast<double>(z[k] - max)));
    loss_sum += std::log(sum) - static_cast<double>(z[labels[r]] - max);
    for (size_t k = 0; k < classes; ++k) z[k] = static_cast<float>(e[k] / sum) * inv_batch;
    z[labels[r]] -= inv_batch;
  }
  return static_cast<float>(loss_sum / static_cast<double>(batch));
}

Model::Score score_logits(std::span<const float> logits, std::span<const uint8_t> labels,
                          size_t classes) {
  Model::Score score;
  for (size_t r = 0; r < labels.size(); ++r) {
    const float* z = &logits[r * classes];
    const size_t best = static_cast<size_t>(std::max_element(z, z + classes) - z);
    double sum = 0;
    for (size_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(z[k] - z[best]));
    score.loss_sum += std::log(sum) - static_cast<double>(z[labels[r]] - z[best]);
    score.correct += best == labels[r] ? 1 : 0;
  }
  return score;
}

Status check_layout(std::string_view model, std::span<const TensorShape> layout,
                    const std::vector<std::span<float>>& parameters) {
  if (parameters.size() != layout.size())
    return Status::mismatch(
        fmt::format("the {} has {} tensors, got {}", model, layout.size(), parameters.size()));
  for (size_t i = 0; i < layout.size(); ++i)
    if (parameters[i].size() != layout[i].numel())
      return Status::mismatch(fmt::format("tensor {} '{}' has {} elements, expected {}", i,
                                          layout[i].name, parameters[i].size(), layout[i].numel()));
  return Status::ok();
}

void he_init(std::span<const TensorShape> layout, const std::vector<std::span<float>>& parameters,
             uint64_t seed) {
  Rng rng(mix_seed(seed, kInitStream));
  for (size_t i = 0; i < layout.size(); ++i) {
    auto& t = parameters[i];
    if (layout[i].cols == 1) {
      std::fill(t.begin(), t.end(), 0.0f);
      continue;
    }
    const double std_dev = std::sqrt(2.0 / static_cast<double>(layout[i].cols));
    for (float& x : t) x = static_cast<float>(rng.normal() * std_dev);
  }
}

}  // namespace gossip::trainer

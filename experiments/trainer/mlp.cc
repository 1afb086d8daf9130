#include "experiments/trainer/mlp.h"

#include <fmt/format.h>

#include <array>
#include <cassert>
#include <cmath>

#include "experiments/trainer/eigen_views.h"

namespace gossip::trainer {
namespace {

using namespace eigen_views;

constexpr std::array<TensorShape, Mlp::kNumTensors> kMlpLayout = {{
    {"fc1.weight", Mlp::kHidden1, Mlp::kInputs},
    {"fc1.bias", Mlp::kHidden1, 1},
    {"fc2.weight", Mlp::kHidden2, Mlp::kHidden1},
    {"fc2.bias", Mlp::kHidden2, 1},
    {"fc3.weight", Mlp::kOutputs, Mlp::kHidden2},
    {"fc3.bias", Mlp::kOutputs, 1},
}};

}  // namespace

std::span<const TensorShape, Mlp::kNumTensors> Mlp::layout() { return kMlpLayout; }

size_t Mlp::num_parameters() { return layout_numel(kMlpLayout); }

Result<Mlp> Mlp::create(std::vector<std::span<float>> parameters) {
  GOSSIP_RETURN_IF_ERROR(check_layout("MLP", kMlpLayout, parameters));
  return Mlp(std::move(parameters));
}

Mlp::Mlp(std::vector<std::span<float>> parameters)
    : parameters_(std::move(parameters)), gradients_(num_parameters(), 0.0f) {}

void Mlp::init(uint64_t seed) { he_init(kMlpLayout, parameters_, seed); }

std::vector<std::span<float>> Mlp::gradients() {
  return tensor_views(kMlpLayout, gradients_.data());
}

void Mlp::forward(const float* inputs, size_t batch) {
  const auto b = static_cast<Eigen::Index>(batch);
  h1_.resize(batch * kHidden1);
  h2_.resize(batch * kHidden2);
  logits_.resize(batch * kOutputs);
  ConstMapR x(inputs, b, kInputs);
  MapR h1(h1_.data(), b, kHidden1);
  MapR h2(h2_.data(), b, kHidden2);
  MapR logits(logits_.data(), b, kOutputs);

  h1.noalias() = x * weight(parameters_[0], kMlpLayout[0]).transpose();
  h1.rowwise() += bias(parameters_[1]);
  h1 = h1.cwiseMax(0.0f);
  h2.noalias() = h1 * weight(parameters_[2], kMlpLayout[2]).transpose();
  h2.rowwise() += bias(parameters_[3]);
  h2 = h2.cwiseMax(0.0f);
  logits.noalias() = h2 * weight(parameters_[4], kMlpLayout[4]).transpose();
  logits.rowwise() += bias(parameters_[5]);
}

float Mlp::forward_backward(std::span<const float> inputs, std::span<const uint8_t> labels) {
  const size_t batch = labels.size();
  assert(batch > 0 && inputs.size() == batch * kInputs);
  forward(inputs.data(), batch);
  const auto b = static_cast<Eigen::Index>(batch);

  // logits_ becomes dL/dlogits.
  const float loss = softmax_backward(logits_, labels, kOutputs);

  auto grads = gradients();
  ConstMapR x(inputs.data(), b, kInputs);
  MapR h1(h1_.data(), b, kHidden1);
  MapR h2(h2_.data(), b, kHidden2);
  MapR g3(logits_.data(), b, kOutputs);
  d1_.resize(batch * kHidden1);
  d2_.resize(batch * kHidden2);
  MapR g1(d1_.data(), b, kHidden1);
  MapR g2(d2_.data(), b, kHidden2);

  MapR(grads[4].data(), kOutputs, kHidden2).noalias() = g3.transpose() * h2;
  RowMap(grads[5].data(), kOutputs) = g3.colwise().sum();
  g2.noalias() = g3 * weight(parameters_[4], kMlpLayout[4]);
  // ReLU: the gradient passes where the activation was positive.
  g2 = (h2.array() > 0.0f).select(g2, 0.0f);
  MapR(grads[2].data(), kHidden2, kHidden1).noalias() = g2.transpose() * h1;
  RowMap(grads[3].data(), kHidden2) = g2.colwise().sum();
  g1.noalias() = g2 * weight(parameters_[2], kMlpLayout[2]);
  g1 = (h1.array() > 0.0f).select(g1, 0.0f);
  MapR(grads[0].data(), kHidden1, kInputs).noalias() = g1.transpose() * x;
  RowMap(grads[1].data(), kHidden1) = g1.colwise().sum();

  return loss;
}

Mlp::Score Mlp::score(std::span<const float> inputs, std::span<const uint8_t> labels) {
  const size_t batch = labels.size();
  assert(inputs.size() == batch * kInputs);
  if (batch == 0) return {};
  forward(inputs.data(), batch);
  return score_logits(logits_, labels, kOutputs);
}

}  // namespace gossip::trainer

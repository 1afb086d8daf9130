#include "experiments/trainer/sgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace gossip::trainer {

Result<LrSchedule> parse_lr_schedule(std::string_view text) {
  if (text == "constant") return LrSchedule::kConstant;
  if (text == "cosine") return LrSchedule::kCosine;
  return Status::invalid(
      fmt::format("--lr-schedule '{}': unknown schedule; valid values: constant, cosine", text));
}

const char* lr_schedule_name(LrSchedule schedule) {
  return schedule == LrSchedule::kCosine ? "cosine" : "constant";
}

float scheduled_lr(float base, LrSchedule schedule, uint64_t step, uint64_t total) {
  if (schedule == LrSchedule::kConstant || total == 0) return base;
  const double progress = std::min(1.0, static_cast<double>(step) / static_cast<double>(total));
  return static_cast<float>(base * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

MomentumSgd::MomentumSgd(const std::vector<size_t>& sizes, SgdOptions options) : options_(options) {
  for (size_t n : sizes) velocity_.emplace_back(n, 0.0f);
}

void MomentumSgd::step(const std::vector<std::span<float>>& parameters,
                       const std::vector<std::span<float>>& gradients, float lr) {
  assert(parameters.size() == velocity_.size() && gradients.size() == velocity_.size());
  const float momentum = options_.momentum;
  const float decay = options_.weight_decay;
  for (size_t t = 0; t < velocity_.size(); ++t) {
    float* x = parameters[t].data();
    const float* g = gradients[t].data();
    float* v = velocity_[t].data();
    const size_t n = velocity_[t].size();
    assert(parameters[t].size() == n && gradients[t].size() == n);
    for (size_t i = 0; i < n; ++i) {
      v[i] = momentum * v[i] + (g[i] + decay * x[i]);
      x[i] -= lr * v[i];
    }
  }
}

}  // namespace gossip::trainer

#include "daemon/divergence.h"

#include <fmt/format.h>

#include <cmath>

namespace gossip::daemon {

std::optional<std::string> DivergenceWatch::observe(std::span<const float> model, uint64_t round) {
  double sum = 0;
  for (const float v : model) sum += static_cast<double>(v) * v;
  norm_ = std::sqrt(sum);
  if (first_ == 0) {
    first_ = norm_;  // a zero model (not started yet) waits for a later round
    return std::nullopt;
  }
  if (diverged() || !(norm_ > kDivergenceFactor * first_)) return std::nullopt;
  reason_ = fmt::format(
      "round {}: the model diverged: its norm is {:.4g}, {:.1f} times its {:.4g} after the "
      "first round; its steps are too large for it (the learning rate, or momentum applied "
      "twice: by the trainers and again on their updates)",
      round, norm_, norm_ / first_, first_);
  return reason_;
}

}  // namespace gossip::daemon

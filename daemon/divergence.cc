#include "daemon/divergence.h"

#include <fmt/format.h>

#include <cmath>

#include "base/finite.h"

namespace gossip::daemon {
namespace {

constexpr const char* kLikelyCause =
    "its steps are too large for it (the learning rate, or momentum applied twice: by the "
    "trainers and again on their updates)";

}  // namespace

std::optional<std::string> DivergenceWatch::observe(std::span<const float> model, uint64_t round) {
  norm_ = l2_norm(model);
  if (first_ == 0) {
    first_ = norm_;  // a zero model (not started yet) waits for a later round
    return std::nullopt;
  }
  if (diverged() || !(norm_ > kDivergenceFactor * first_)) return std::nullopt;
  reason_ = fmt::format(
      "round {}: the model diverged: its norm is {:.4g}, {:.1f} times its {:.4g} after the "
      "first round; {}",
      round, norm_, norm_ / first_, first_, kLikelyCause);
  return reason_;
}

std::optional<std::string> DivergenceWatch::observe_loss(double loss, uint64_t step) {
  loss_ = loss;
  if (diverged()) return std::nullopt;
  if (!std::isfinite(loss)) {
    reason_ = fmt::format("step {}: the run diverged: the trainers' training loss is {}; {}", step,
                          loss, kLikelyCause);
    return reason_;
  }
  if (first_loss_ == 0) {
    if (loss > 0) first_loss_ = loss;
    return std::nullopt;
  }
  high_ = loss > kDivergenceFactor * first_loss_ ? high_ + 1 : 0;
  if (high_ < kLossHighReports) return std::nullopt;
  reason_ = fmt::format(
      "step {}: the run diverged: the trainers' training loss is {:.4g}, {:.3g} times its "
      "first {:.4g}, {} reports in a row; {}",
      step, loss, loss / first_loss_, first_loss_, kLossHighReports, kLikelyCause);
  return reason_;
}

}  // namespace gossip::daemon

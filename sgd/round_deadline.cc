#include "sgd/round_deadline.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace gossip::sgd {

RoundDeadline::Duration RoundDeadline::next() const {
  if (!adapting()) return ceiling_;
  Duration basis;
  if (quantile_ >= 1.0) {
    basis = *std::max_element(window_.begin(), window_.end());
  } else {
    std::vector<Duration> sorted(window_.begin(), window_.end());
    const size_t at =
        std::min(sorted.size() - 1, static_cast<size_t>(std::max(0.0, quantile_) * sorted.size()));
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(at), sorted.end());
    basis = sorted[at];
  }
  return std::clamp(Duration(basis.count() * factor_), std::min(floor_, ceiling_), ceiling_);
}

std::string RoundDeadline::failure_context(Duration allowed) {
  return fmt::format(
      "the round's deadline was {:.2f} s, --round-timeout-factor times the longest of the last "
      "rounds (at least --round-timeout-floor, at most --round-timeout)",
      allowed.count());
}

void RoundDeadline::completed(Duration d) {
  window_.push_back(d);
  if (window_.size() > kWindow) window_.pop_front();
}

}  // namespace gossip::sgd

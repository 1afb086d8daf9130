#include "sgd/round_deadline.h"

#include <fmt/format.h>

#include <algorithm>

namespace gossip::sgd {

RoundDeadline::Duration RoundDeadline::next() const {
  if (!adapting()) return ceiling_;
  const Duration longest = *std::max_element(window_.begin(), window_.end());
  return std::clamp(Duration(longest.count() * factor_), std::min(floor_, ceiling_), ceiling_);
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

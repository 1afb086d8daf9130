#include "daemon/round_deadline.h"

#include <algorithm>

namespace gossip::daemon {

RoundDeadline::Duration RoundDeadline::next() const {
  if (!adapting()) return ceiling_;
  const Duration longest = *std::max_element(window_.begin(), window_.end());
  return std::clamp(Duration(longest.count() * factor_), std::min(floor_, ceiling_), ceiling_);
}

void RoundDeadline::completed(Duration d) {
  window_.push_back(d);
  if (window_.size() > kWindow) window_.pop_front();
}

}  // namespace gossip::daemon

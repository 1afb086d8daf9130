#pragma once
// Norm clipping of a neighbor's model around the node's own (CenteredClip,
// Karimireddy et al. 2021): a contribution further than a radius from the node's
// model is pulled back onto the sphere of that radius, so one hostile neighbor moves
// a node by at most the radius per round however far it claims to be. The radius
// follows the honest spread: 4 times the median distance of the last 32
// contributions (clipped ones counted at the radius), and twice the node's own norm
// until 4 have come (replicas that start apart are about sqrt(2) norms apart).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <deque>
#include <span>
#include <vector>

namespace gossip::sgd {

class CenteredClip {
 public:
  // Moves `other` to within radius() of `self`; returns the factor applied to its
  // difference (1: untouched). Both must be finite.
  double clip(std::span<const float> self, std::span<float> other) {
    double d2 = 0, s2 = 0;
    for (size_t i = 0; i < self.size(); ++i) {
      const double d = static_cast<double>(other[i]) - self[i];
      d2 += d * d;
      s2 += static_cast<double>(self[i]) * self[i];
    }
    const double distance = std::sqrt(d2);
    const double r = radius(std::sqrt(s2));
    const double factor = distance > r ? r / distance : 1.0;
    if (factor < 1.0)
      for (size_t i = 0; i < self.size(); ++i)
        other[i] = static_cast<float>(self[i] + (static_cast<double>(other[i]) - self[i]) * factor);
    recent_.push_back(std::min(distance, r));
    if (recent_.size() > kWindow) recent_.pop_front();
    return factor;
  }

  double radius(double self_norm) const {
    if (recent_.size() < kWarmup) return std::max(2.0 * self_norm, 1e-6);
    std::vector<double> v(recent_.begin(), recent_.end());
    std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
    return std::max(kFactor * v[v.size() / 2], 1e-6);
  }

 private:
  static constexpr size_t kWindow = 32, kWarmup = 4;
  static constexpr double kFactor = 4.0;
  std::deque<double> recent_;
};

}  // namespace gossip::sgd

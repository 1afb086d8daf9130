// CenteredClip (sgd/strategies/push_sum/centered_clip.h): a neighbor's model far from the node's is
// pulled back to the radius; near ones pass untouched; the radius follows the spread.

#include "sgd/strategies/push_sum/centered_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace gossip::sgd {
namespace {

double distance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(d);
}

TEST(CenteredClip, AScaledModelIsPulledBackToTheRadiusAndNearOnesPass) {
  CenteredClip clip;
  const std::vector<float> self(100, 1.0f);  // norm 10
  // Honest neighbors 0.5 apart (distance 5): untouched, and they set the radius.
  for (int i = 0; i < 8; ++i) {
    std::vector<float> honest(100, 1.5f);
    EXPECT_EQ(clip.clip(self, honest), 1.0);
    EXPECT_EQ(honest, std::vector<float>(100, 1.5f));
  }
  EXPECT_DOUBLE_EQ(clip.radius(10), 20.0);  // 4 x the median distance 5
  // A model scaled by 1e4 ends on the sphere of radius 20 around self, in its direction.
  std::vector<float> scaled(100, 1e4f);
  const double f = clip.clip(self, scaled);
  EXPECT_LT(f, 0.01);
  EXPECT_NEAR(distance(self, scaled), 20.0, 1e-3);
  for (float v : scaled) EXPECT_GT(v, 1.0f);
}

TEST(CenteredClip, BeforeFourContributionsTheRadiusIsTwiceTheNodesNorm) {
  CenteredClip clip;
  const std::vector<float> self(4, 3.0f);  // norm 6
  EXPECT_DOUBLE_EQ(clip.radius(6), 12.0);
  std::vector<float> far(4, 1000.0f);
  clip.clip(self, far);
  EXPECT_NEAR(distance(self, far), 12.0, 1e-3);
}

}  // namespace
}  // namespace gossip::sgd

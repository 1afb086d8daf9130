#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "daemon/nonfinite.h"

namespace gossip::daemon {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(NonFiniteUnit, FiniteUpdatesAreLeftAlone) {
  std::vector<float> x = {1, -2, 3e38f, -3e38f, 0, -0.0f, std::numeric_limits<float>::denorm_min()};
  const auto copy = x;
  EXPECT_EQ(sanitize_update(x, {}, NonFinitePolicy::kRefuse).count, 0u);
  EXPECT_EQ(x, copy);
}

TEST(NonFiniteUnit, EveryKindOfNonFiniteIsFoundAtEveryPosition) {
  for (float bad : {kNaN, -kNaN, kInf, -kInf}) {
    for (size_t pos : {0u, 1u, 7u, 8u, 31u, 32u, 63u}) {  // inside and at the ends of vector lanes
      std::vector<float> x(64, 1.0f), good(64, 9.0f);
      x[pos] = bad;
      const auto r = sanitize_update(x, good, NonFinitePolicy::kClip);
      EXPECT_EQ(r.count, 1u) << bad << " at " << pos;
      EXPECT_EQ(r.first, pos);
      for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], i == pos ? 9.0f : 1.0f);
    }
  }
}

TEST(NonFiniteUnit, RefuseReplacesTheWholeUpdate) {
  std::vector<float> x = {1, kNaN, 3, kInf}, good = {5, 6, 7, 8};
  const auto r = sanitize_update(x, good, NonFinitePolicy::kRefuse);
  EXPECT_EQ(r.count, 2u);
  EXPECT_EQ(r.first, 1u);
  EXPECT_EQ(x, good);
  std::vector<float> y = {1, kNaN};
  sanitize_update(y, {}, NonFinitePolicy::kRefuse);  // no synchronized model yet: zeros
  EXPECT_EQ(y, (std::vector<float>{0, 0}));
}

TEST(NonFiniteUnit, PositionsNameTheTensorOrThePadding) {
  proto::Layout l;
  l.tensors = {{"a", proto::DType::kF32, 10}, {"b", proto::DType::kF32, 3}};
  const auto off = proto::tensor_offsets(l);
  EXPECT_EQ(describe_position(l, 0), "tensor 'a' element 0");
  EXPECT_EQ(describe_position(l, 9), "tensor 'a' element 9");
  EXPECT_EQ(describe_position(l, 10), "padding after tensor 'a'");
  EXPECT_EQ(describe_position(l, off[1] + 2), "tensor 'b' element 2");
}

TEST(NonFiniteUnit, PolicyNames) {
  NonFinitePolicy p = NonFinitePolicy::kRefuse;
  EXPECT_TRUE(parse_nonfinite_policy("clip", &p));
  EXPECT_EQ(p, NonFinitePolicy::kClip);
  EXPECT_TRUE(parse_nonfinite_policy("refuse", &p));
  EXPECT_EQ(p, NonFinitePolicy::kRefuse);
  EXPECT_FALSE(parse_nonfinite_policy("ignore", &p));
}

}  // namespace
}  // namespace gossip::daemon

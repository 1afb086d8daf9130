// The divergence watch (daemon/divergence.h): the model's norm against its first, the
// trainers' loss against its first, and a NaN loss at once.

#include "daemon/divergence.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace gossip::daemon {
namespace {

using ::testing::HasSubstr;

TEST(DivergenceWatch, ANormTenTimesItsFirstIsDivergenceOnce) {
  DivergenceWatch w;
  std::vector<float> model(100, 1.0f);  // norm 10
  EXPECT_FALSE(w.observe(model, 1));
  std::fill(model.begin(), model.end(), 9.0f);
  EXPECT_FALSE(w.observe(model, 2)) << "9 times is not 10";
  std::fill(model.begin(), model.end(), 11.0f);
  auto reason = w.observe(model, 3);
  ASSERT_TRUE(reason);
  EXPECT_THAT(*reason, HasSubstr("round 3: the model diverged: its norm is 110"));
  EXPECT_TRUE(w.diverged());
  EXPECT_FALSE(w.observe(model, 4)) << "said once";
}

TEST(DivergenceWatch, ANonFiniteLossIsDivergenceAtOnce) {
  for (double bad : {std::nan(""), HUGE_VAL}) {
    DivergenceWatch w;
    EXPECT_FALSE(w.observe_loss(2.3, 1));
    auto reason = w.observe_loss(bad, 2);
    ASSERT_TRUE(reason) << bad;
    EXPECT_THAT(*reason, HasSubstr("step 2: the run diverged: the trainers' training loss is "));
    EXPECT_THAT(*reason, HasSubstr(std::isnan(bad) ? "nan" : "inf"));
  }
  DivergenceWatch first;
  EXPECT_TRUE(first.observe_loss(std::nan(""), 1)) << "even as the first report";
}

TEST(DivergenceWatch, ALossTenTimesItsFirstIsDivergenceOnlyInARow) {
  DivergenceWatch w;
  EXPECT_FALSE(w.observe_loss(2.0, 1));
  EXPECT_FALSE(w.observe_loss(0.1, 2));
  // One bad batch, then two, are not divergence; the count starts again after each.
  EXPECT_FALSE(w.observe_loss(25.0, 3));
  EXPECT_FALSE(w.observe_loss(0.2, 4));
  EXPECT_FALSE(w.observe_loss(25.0, 5));
  EXPECT_FALSE(w.observe_loss(26.0, 6));
  EXPECT_FALSE(w.observe_loss(19.0, 7)) << "9.5 times is not 10";
  for (int i = 0; i + 1 < kLossHighReports; ++i) EXPECT_FALSE(w.observe_loss(30.0, 8 + i));
  auto reason = w.observe_loss(40.0, 20);
  ASSERT_TRUE(reason);
  EXPECT_THAT(*reason, HasSubstr("step 20: the run diverged: the trainers' training loss is 40, "
                                 "20 times its first 2"));
  EXPECT_DOUBLE_EQ(w.loss(), 40.0);
  EXPECT_FALSE(w.observe_loss(std::nan(""), 21)) << "said once";
}

TEST(DivergenceWatch, AZeroFirstLossWaitsForAPositiveOne) {
  DivergenceWatch w;
  EXPECT_FALSE(w.observe_loss(0.0, 1));
  EXPECT_FALSE(w.observe_loss(1.0, 2));
  for (int i = 0; i < kLossHighReports; ++i) EXPECT_FALSE(w.observe_loss(5.0, 3 + i));
}

}  // namespace
}  // namespace gossip::daemon

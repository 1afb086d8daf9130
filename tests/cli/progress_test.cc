#include "cli/progress.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gossip::cli {
namespace {

TrainerCsvRow row(int64_t step, double acc, uint64_t wire_sent) {
  TrainerCsvRow r;
  r.step = step;
  r.test_accuracy = acc;
  r.wire_sent = wire_sent;
  return r;
}

TEST(Progress, MinStepMeanAccuracySumOfBytes) {
  const std::vector<std::optional<TrainerCsvRow>> rows = {
      row(240, 0.8, 1000), row(260, 0.824, 2000), row(250, std::nan(""), 500)};
  const ProgressSnapshot s = summarize_progress(rows);
  EXPECT_EQ(s.min_step, 240);
  EXPECT_DOUBLE_EQ(s.mean_accuracy, 0.812);
  EXPECT_EQ(s.wire_sent, 3500u);
  EXPECT_EQ(format_progress(s, 600, 18.23), "step 240/600  acc 0.812  sent 3.50 kB  18.2 s");
}

TEST(Progress, NodesWithoutRowsCountAsStepZero) {
  const std::vector<std::optional<TrainerCsvRow>> rows = {row(100, 0.5, 10), std::nullopt};
  const ProgressSnapshot s = summarize_progress(rows);
  EXPECT_EQ(s.min_step, 0);
  EXPECT_DOUBLE_EQ(s.mean_accuracy, 0.5);
  const ProgressSnapshot none = summarize_progress(std::vector<std::optional<TrainerCsvRow>>(3));
  EXPECT_EQ(format_progress(none, 600, 0.04), "step 0/600  acc -  sent 0 B  0.0 s");
}

TEST(Progress, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1000), "1.00 kB");
  EXPECT_EQ(format_bytes(12'345), "12.3 kB");
  EXPECT_EQ(format_bytes(12'300'000), "12.3 MB");
  EXPECT_EQ(format_bytes(999'999), "1.00 MB");
  EXPECT_EQ(format_bytes(1'230'000'000), "1.23 GB");
}

}  // namespace
}  // namespace gossip::cli

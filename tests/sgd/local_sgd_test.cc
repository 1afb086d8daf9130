#include "sgd/strategies/local_sgd/local_sgd.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "compression/codec_spec.h"

namespace gossip::sgd {
namespace {

// An all-reduce over simulated nodes: replaces data with a mean the test sets.
class FixedMean final : public AllReduce {
 public:
  std::vector<float> mean;
  Status failure;
  Status all_reduce_mean(std::span<float> data, uint64_t, const CollectiveOptions&) override {
    if (!failure.is_ok()) return failure;
    std::copy(mean.begin(), mean.end(), data.begin());
    return Status::ok();
  }
  void progress(uint64_t, size_t, std::chrono::milliseconds) override {}
  void set_layout_fingerprint(uint64_t) override {}
};

RoundOptions opts() {
  RoundOptions o;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  return o;
}

TEST(LocalSgd, PlainAveragingIsTheMean) {
  FixedMean ar;
  LocalSgd sgd(ar, OuterOptimizer{});
  std::vector<float> x = {1, 2};
  ar.mean = {5, 6};
  ASSERT_TRUE(sgd.synchronize(x, 0, opts()).is_ok());
  EXPECT_EQ(x, (std::vector<float>{5, 6}));
}

TEST(LocalSgd, NesterovOuterStepFollowsDiLoCo) {
  FixedMean ar;
  LocalSgd sgd(ar, OuterOptimizer{OuterOptimizer::Kind::kNesterov, 0.5, 0.9});
  std::vector<float> x = {0};
  ar.mean = {1.0f};  // round 0: plain average, defines x_prev = 1
  ASSERT_TRUE(sgd.synchronize(x, 0, opts()).is_ok());
  EXPECT_FLOAT_EQ(x[0], 1.0f);
  // Round 1: average 3 -> g = x_prev - avg = -2; m = 0.9*0 + g = -2;
  // step = g + 0.9*m = -3.8; x = 1 - 0.5 * -3.8 = 2.9.
  ar.mean = {3.0f};
  ASSERT_TRUE(sgd.synchronize(x, 1, opts()).is_ok());
  EXPECT_FLOAT_EQ(x[0], 2.9f);
  // Round 2: average 2.9 (nodes did not move) -> g = 0; m = -1.8; step = -1.62; x = 3.71.
  ar.mean = {2.9f};
  ASSERT_TRUE(sgd.synchronize(x, 2, opts()).is_ok());
  EXPECT_NEAR(x[0], 3.71f, 1e-5);
}

TEST(LocalSgd, PlainOuterLearningRateScalesTheAveragedDelta) {
  FixedMean ar;
  LocalSgd sgd(ar, OuterOptimizer{OuterOptimizer::Kind::kNone, 0.5, 0.0});
  std::vector<float> x = {0};
  ar.mean = {2.0f};
  ASSERT_TRUE(sgd.synchronize(x, 0, opts()).is_ok());
  ar.mean = {4.0f};
  ASSERT_TRUE(sgd.synchronize(x, 1, opts()).is_ok());
  EXPECT_FLOAT_EQ(x[0], 3.0f);  // 2 + 0.5 * (4 - 2)
}

TEST(LocalSgd, AFailedRoundLeavesTheModelAndTheOuterStateAlone) {
  FixedMean ar;
  LocalSgd sgd(ar, OuterOptimizer{OuterOptimizer::Kind::kNesterov, 0.5, 0.9});
  std::vector<float> x = {7};
  ar.failure = Status::timeout("round 0: no complete model from peer 2");
  Status st = sgd.synchronize(x, 0, opts());
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("peer 2"), std::string::npos);
  EXPECT_EQ(x[0], 7.0f);
}

// A ring that merged with another that trained apart (sgd/membership/peer_ring.h): once between
// rounds, or inside a round, which fails then (data unchanged) as the ring ends it.
class MergingMean final : public AllReduce {
 public:
  std::vector<float> mean;
  bool merge_between = false, merge_inside = false;
  std::vector<std::vector<float>> got;  // what each call was given
  std::vector<bool> compressed;         // whether it travelled through a codec
  Status all_reduce_mean(std::span<float> data, uint64_t, const CollectiveOptions& o) override {
    got.emplace_back(data.begin(), data.end());
    compressed.push_back(o.compression.codec != nullptr);
    if (std::exchange(merge_inside, false)) {
      news_ = true;
      return Status::closed("round 5: the ring merged with another that trained apart");
    }
    std::copy(mean.begin(), mean.end(), data.begin());
    return Status::ok();
  }
  bool take_merge() override {
    return std::exchange(news_, false) || std::exchange(merge_between, false);
  }
  void progress(uint64_t, size_t, std::chrono::milliseconds) override {}
  void set_layout_fingerprint(uint64_t) override {}

 private:
  bool news_ = false;
};

// Each side's x_prev and outer momentum are of its own trajectory: the union's first
// round is the models' average, and the momentum restarts at zero on every member.
TEST(LocalSgd, AfterAMergeTheUnionsFirstRoundAveragesTheModelsThemselves) {
  MergingMean ar;
  LocalSgd sgd(ar, OuterOptimizer{OuterOptimizer::Kind::kNesterov, 0.5, 0.9});
  std::vector<float> x = {0};
  ar.mean = {1.0f};
  ASSERT_TRUE(sgd.synchronize(x, 0, opts()).is_ok());  // x_prev = 1
  ar.mean = {3.0f};
  ASSERT_TRUE(sgd.synchronize(x, 1, opts()).is_ok());  // momentum -2, x = 2.9
  ASSERT_FLOAT_EQ(x[0], 2.9f);
  ar.merge_between = true;
  ar.mean = {10.0f};
  ASSERT_TRUE(sgd.synchronize(x, 2, opts()).is_ok());
  EXPECT_FLOAT_EQ(x[0], 10.0f) << "the average itself, no outer step from this side's x_prev";
  // Round 3: g = 10 - 12 = -2 with the momentum from zero: m = -2, step = -3.8, x = 11.9.
  ar.mean = {12.0f};
  ASSERT_TRUE(sgd.synchronize(x, 3, opts()).is_ok());
  EXPECT_FLOAT_EQ(x[0], 11.9f);
  ASSERT_EQ(sgd.shared_state().size(), 1u);
  EXPECT_FLOAT_EQ(sgd.shared_state()[0], -2.0f);
}

TEST(LocalSgd, AMergeInsideARoundRunsItAgainAsTheUnionsFirstRound) {
  auto codec = compression::make_codec("topk:0.5").value();
  MergingMean ar;
  LocalSgd sgd(ar, OuterOptimizer{OuterOptimizer::Kind::kNesterov, 0.5, 0.9}, codec.codec.get());
  std::vector<float> x = {1, 2};
  ar.mean = {1, 2};
  ASSERT_TRUE(sgd.synchronize(x, 0, opts()).is_ok());
  x = {4, 6};  // local steps
  ar.merge_inside = true;
  ar.mean = {7, 8};
  ASSERT_TRUE(sgd.synchronize(x, 5, opts()).is_ok());
  ASSERT_EQ(ar.got.size(), 3u);
  EXPECT_TRUE(ar.compressed[1]) << "the round began as this side's: the change, compressed";
  EXPECT_EQ(ar.got[1], (std::vector<float>{3, 4}));
  EXPECT_FALSE(ar.compressed[2]) << "run again: the models themselves, exact";
  EXPECT_EQ(ar.got[2], (std::vector<float>{4, 6}));
  EXPECT_EQ(x, (std::vector<float>{7, 8}));
  // The next round sends the change since the union's average again.
  x = {8, 8};
  ar.mean = {0.5f, 0.0f};
  ASSERT_TRUE(sgd.synchronize(x, 6, opts()).is_ok());
  EXPECT_TRUE(ar.compressed[3]);
  EXPECT_EQ(ar.got[3], (std::vector<float>{1, 0}));
}

// A node that rejoins takes a member's model (took_model) but keeps, from its own
// checkpoint, the error-feedback residual: mass its updates have not delivered yet.
TEST(LocalSgd, ARejoiningNodeKeepsItsResidualFromItsCheckpoint) {
  FixedMean ar;
  auto codec = compression::make_codec("topk:0.5").value();
  LocalSgd sgd(ar, OuterOptimizer{}, codec.codec.get(), true);
  StrategyState saved;
  saved.tensors["local_sgd.previous"] = {1, 2, 3, 4};
  saved.tensors["local_sgd.momentum"] = {0, 0, 0, 0};
  saved.tensors["local_sgd.residual"] = {0.5f, -0.25f, 0, 0.125f};
  ASSERT_TRUE(sgd.load_state(saved).is_ok());
  const std::vector<float> members = {9, 8, 7, 6};
  sgd.took_model(members, {});
  EXPECT_EQ(sgd.save_state().tensors.count("local_sgd.residual"), 0u) << "took_model drops it";
  auto kept = sgd.keep_own_state(saved);
  ASSERT_TRUE(kept) << kept.status().message();
  EXPECT_EQ(kept->tensors.at("local_sgd.residual"), saved.tensors.at("local_sgd.residual"));
  EXPECT_EQ(kept->tensors.count("local_sgd.momentum"), 0u) << "the members' momentum is not ours";
  const StrategyState now = sgd.save_state();
  EXPECT_EQ(now.tensors.at("local_sgd.residual"), saved.tensors.at("local_sgd.residual"));
  EXPECT_EQ(now.tensors.at("local_sgd.previous"), members) << "the members' model stays x_prev";
  // A checkpoint of another model size is refused with the reason.
  StrategyState other = saved;
  other.tensors["local_sgd.residual"] = {1, 2};
  EXPECT_FALSE(sgd.keep_own_state(other));
}

// A node that takes a member's model under an outer optimizer takes the members'
// momentum too (shared_state), and its next outer step is theirs bit for bit;
// without it, it restarts at zero and its replica parts from theirs.
TEST(LocalSgd, ANodeThatTakesTheMembersMomentumStepsAsTheyDo) {
  const OuterOptimizer outer{OuterOptimizer::Kind::kNesterov, 0.7, 0.9};
  FixedMean ar;
  LocalSgd member(ar, outer);
  EXPECT_EQ(member.shared_state_numel(3), 3u);
  EXPECT_EQ(LocalSgd(ar, OuterOptimizer{}).shared_state_numel(3), 0u) << "no momentum, none";
  std::vector<float> x = {0, 0, 0};
  EXPECT_TRUE(member.shared_state().empty()) << "before the first round";
  for (const std::vector<float>& mean : {std::vector<float>{1, 2, 3}, {2, 4, 1}, {3, 3, 3}}) {
    ar.mean = mean;
    ASSERT_TRUE(member.synchronize(x, 0, opts()).is_ok());
  }
  const std::vector<float> shared(member.shared_state().begin(), member.shared_state().end());
  ASSERT_EQ(shared.size(), 3u);
  EXPECT_NE(shared, std::vector<float>(3, 0.0f));

  LocalSgd joiner(ar, outer), forgetful(ar, outer);
  std::vector<float> y = x, z = x;
  joiner.took_model(y, shared);
  forgetful.took_model(z, {});
  ar.mean = {5, 1, 2};
  ASSERT_TRUE(member.synchronize(x, 3, opts()).is_ok());
  ASSERT_TRUE(joiner.synchronize(y, 3, opts()).is_ok());
  ASSERT_TRUE(forgetful.synchronize(z, 3, opts()).is_ok());
  EXPECT_EQ(y, x);
  EXPECT_NE(z, x) << "without the momentum the outer step differs";
}

RoundOptions fragment(uint64_t offset, uint64_t model_numel) {
  RoundOptions o = opts();
  o.offset = offset;
  o.model_numel = model_numel;
  return o;
}

// Streamed syncs (--fragments): a round of one fragment leaves the other's previous
// model and momentum alone, each fragment's first round is its exact average, and a
// fragment's outer steps are those of a whole-model run on its elements.
TEST(LocalSgd, FragmentsKeepTheirOwnPreviousModelAndMomentum) {
  const OuterOptimizer outer{OuterOptimizer::Kind::kNesterov, 0.5, 0.9};
  FixedMean ar, whole_ar;
  LocalSgd streamed(ar, outer), whole(whole_ar, outer);
  std::vector<float> x = {0, 0, 0, 0}, w = {0, 0, 0, 0};
  const std::vector<std::vector<float>> means = {{1, 2, 3, 4}, {3, 1, 2, 8}, {2, 2, 2, 2}};
  for (size_t r = 0; r < means.size(); ++r) {
    whole_ar.mean = means[r];
    ASSERT_TRUE(whole.synchronize(w, r, opts()).is_ok());
    for (uint64_t f : {0, 2}) {  // fragment [0, 2), then [2, 4)
      ar.mean = {means[r][f], means[r][f + 1]};
      auto part = std::span<float>(x).subspan(f, 2);
      const std::vector<float> other(x.begin() + (f == 0 ? 2 : 0), x.begin() + (f == 0 ? 4 : 2));
      ASSERT_TRUE(streamed.synchronize(part, 2 * r + f / 2, fragment(f, 4)).is_ok());
      EXPECT_EQ(std::vector<float>(x.begin() + (f == 0 ? 2 : 0), x.begin() + (f == 0 ? 4 : 2)),
                other)
          << "a fragment's round leaves the rest alone";
    }
    for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(x[i], w[i]) << "round " << r << " element " << i;
  }
  // Element 0: 1 (exact), 2.9 (as in NesterovOuterStepFollowsDiLoCo), then g = 0.9,
  // m = -0.9, step = 0.09: 2.855.
  EXPECT_NEAR(x[0], 2.855f, 1e-5);
  RoundOptions past = fragment(3, 4);
  std::vector<float> two(2);
  EXPECT_FALSE(streamed.synchronize(two, 9, past).is_ok()) << "a fragment past the model's end";
}

TEST(LocalSgd, UnknownOuterOptimizerIsNamed) {
  auto k = parse_outer_kind("adam");
  ASSERT_FALSE(k.is_ok());
  EXPECT_NE(k.status().message().find("adam"), std::string::npos);
  EXPECT_NE(k.status().message().find("nesterov"), std::string::npos);
}

}  // namespace
}  // namespace gossip::sgd

#include "experiments/trainer/mlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "experiments/trainer/rng.h"
#include "experiments/trainer/sgd.h"

namespace gossip::trainer {
namespace {

// Parameters in one owned buffer, viewed per tensor the way the arena is.
struct OwnedParameters {
  std::vector<float> storage = std::vector<float>(Mlp::num_parameters());
  std::vector<std::span<float>> views() {
    std::vector<std::span<float>> v;
    size_t offset = 0;
    for (const auto& shape : Mlp::layout()) {
      v.emplace_back(storage.data() + offset, shape.numel());
      offset += shape.numel();
    }
    return v;
  }
};

Mlp make_mlp(OwnedParameters& p, uint64_t seed) {
  auto mlp = Mlp::create(p.views());
  EXPECT_TRUE(mlp.is_ok()) << mlp.status().message();
  mlp->init(seed);
  return std::move(*mlp);
}

TEST(Mlp, LayoutIsTheContractWithTheDaemon) {
  const auto layout = Mlp::layout();
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"fc1.weight", 256 * 784}, {"fc1.bias", 256},        {"fc2.weight", 128 * 256},
      {"fc2.bias", 128},         {"fc3.weight", 10 * 128}, {"fc3.bias", 10}};
  ASSERT_EQ(layout.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(layout[i].name, expected[i].first);
    EXPECT_EQ(layout[i].numel(), expected[i].second);
  }
  EXPECT_EQ(Mlp::num_parameters(), 235146u);
}

TEST(Mlp, RefusesParametersThatDoNotMatchTheLayout) {
  OwnedParameters p;
  auto views = p.views();
  views.pop_back();
  EXPECT_EQ(Mlp::create(views).status().code(), Status::Code::kMismatch);
  views = p.views();
  views[2] = views[2].subspan(1);
  auto mlp = Mlp::create(views);
  ASSERT_FALSE(mlp.is_ok());
  EXPECT_NE(mlp.status().message().find("fc2.weight"), std::string::npos) << mlp.status().message();
}

TEST(Mlp, InitDependsOnlyOnTheSeed) {
  OwnedParameters a, b, c;
  make_mlp(a, 1);
  make_mlp(b, 1);
  make_mlp(c, 2);
  EXPECT_EQ(a.storage, b.storage);
  EXPECT_NE(a.storage, c.storage);

  // He init: weights N(0, 2 / fan_in), biases 0.
  const auto views = a.views();
  const auto layout = Mlp::layout();
  for (size_t t = 0; t < views.size(); ++t) {
    if (layout[t].cols == 1) {
      EXPECT_TRUE(std::all_of(views[t].begin(), views[t].end(), [](float x) { return x == 0; }));
      continue;
    }
    double sum_sq = 0;
    for (float x : views[t]) sum_sq += double{x} * x;
    const double std_dev = std::sqrt(sum_sq / static_cast<double>(views[t].size()));
    EXPECT_NEAR(std_dev, std::sqrt(2.0 / static_cast<double>(layout[t].cols)), 0.05 * std_dev)
        << layout[t].name;
  }
}

// An independent forward pass in double precision, written naively from the math, so
// that finite differences on it are free of float round-off (which at small steps would
// swamp the difference) and small steps cross no ReLU kink.
double reference_loss(const std::vector<std::vector<double>>& p, const std::vector<float>& inputs,
                      const std::vector<uint8_t>& labels) {
  const auto layout = Mlp::layout();
  double loss = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    std::vector<double> a(inputs.begin() + static_cast<ptrdiff_t>(r * Mlp::kInputs),
                          inputs.begin() + static_cast<ptrdiff_t>((r + 1) * Mlp::kInputs));
    for (size_t layer = 0; layer < 3; ++layer) {
      const auto& w = p[2 * layer];
      const auto& b = p[2 * layer + 1];
      const size_t out = layout[2 * layer].rows, in = layout[2 * layer].cols;
      std::vector<double> z(out);
      for (size_t o = 0; o < out; ++o) {
        double sum = b[o];
        for (size_t i = 0; i < in; ++i) sum += w[o * in + i] * a[i];
        z[o] = layer < 2 ? std::max(sum, 0.0) : sum;
      }
      a = std::move(z);
    }
    const double max = *std::max_element(a.begin(), a.end());
    double sum = 0;
    for (double z : a) sum += std::exp(z - max);
    loss += std::log(sum) + max - a[labels[r]];
  }
  return loss / static_cast<double>(labels.size());
}

class MlpGradient : public ::testing::Test {
 protected:
  void SetUp() override {
    mlp_.init(3);
    Rng rng(17);
    inputs_.resize(kBatch * Mlp::kInputs);
    for (float& x : inputs_) x = static_cast<float>(rng.uniform());
    labels_.resize(kBatch);
    for (auto& y : labels_) y = static_cast<uint8_t>(rng.below(kNumClasses));
    loss_ = mlp_.forward_backward(inputs_, labels_);
    for (const auto& g : mlp_.gradients()) gradients_.emplace_back(g.begin(), g.end());
    for (const auto& t : mlp_.parameters()) reference_.emplace_back(t.begin(), t.end());
  }

  double reference_loss() const { return trainer::reference_loss(reference_, inputs_, labels_); }

  static constexpr size_t kBatch = 8;
  OwnedParameters params_;
  Mlp mlp_ = std::move(*Mlp::create(params_.views()));
  std::vector<float> inputs_;
  std::vector<uint8_t> labels_;
  float loss_ = 0;
  std::vector<std::vector<float>> gradients_;   // the MLP's, kept: later calls overwrite them
  std::vector<std::vector<double>> reference_;  // the parameters, in double
};

TEST_F(MlpGradient, LossAgreesWithTheReferenceAndTheScore) {
  const double reference = reference_loss();
  EXPECT_NEAR(loss_, reference, 1e-5 * reference);
  EXPECT_NEAR(mlp_.score(inputs_, labels_).loss_sum / kBatch, reference, 1e-5 * reference);
  EXPECT_GT(reference, 0.5);  // an untrained model on random inputs
}

// Central differences on the coordinates with the largest gradients and on a few at
// random, in every tensor.
TEST_F(MlpGradient, MatchesFiniteDifferencesPerCoordinate) {
  const double eps = 1e-6;
  Rng rng(99);
  const auto layout = Mlp::layout();
  for (size_t t = 0; t < layout.size(); ++t) {
    const auto& g = gradients_[t];
    std::vector<size_t> order(g.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](size_t a, size_t b) { return std::abs(g[a]) > std::abs(g[b]); });
    std::vector<size_t> coords(order.begin(), order.begin() + 3);
    for (int k = 0; k < 4; ++k) coords.push_back(rng.below(g.size()));
    for (size_t i : coords) {
      double& x = reference_[t][i];
      const double saved = x;
      x = saved + eps;
      const double plus = reference_loss();
      x = saved - eps;
      const double minus = reference_loss();
      x = saved;
      const double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(g[i], numeric, 1e-3 * std::abs(numeric) + 1e-6)
          << layout[t].name << "[" << i << "]";
    }
  }
}

// The derivative along a random direction of each whole tensor, which checks every
// gradient entry together.
TEST_F(MlpGradient, MatchesFiniteDifferencesAlongADirection) {
  const double eps = 1e-7;
  Rng rng(5);
  const auto layout = Mlp::layout();
  for (size_t t = 0; t < layout.size(); ++t) {
    std::vector<double> direction(reference_[t].size());
    double analytic = 0;
    for (size_t i = 0; i < direction.size(); ++i) {
      direction[i] = rng.normal();
      analytic += direction[i] * gradients_[t][i];
    }
    const std::vector<double> saved = reference_[t];
    for (size_t i = 0; i < direction.size(); ++i) reference_[t][i] = saved[i] + eps * direction[i];
    const double plus = reference_loss();
    for (size_t i = 0; i < direction.size(); ++i) reference_[t][i] = saved[i] - eps * direction[i];
    const double minus = reference_loss();
    reference_[t] = saved;
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 1e-3 * std::abs(numeric) + 1e-5) << layout[t].name;
  }
}

TEST_F(MlpGradient, OutputBiasGradientSumsToZero) {
  // Softmax probabilities sum to one, so dL/db3 = mean(p - onehot) sums to zero.
  const auto& g = gradients_[5];
  EXPECT_NEAR(std::accumulate(g.begin(), g.end(), 0.0), 0.0, 1e-6);
}

TEST(MomentumSgd, FollowsTheMomentumUpdate) {
  std::vector<float> x = {1.0f, -2.0f};
  std::vector<float> g = {0.5f, 0.25f};
  MomentumSgd sgd({2}, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f});
  sgd.step({std::span<float>(x)}, {std::span<float>(g)});
  // v = g + wd x; x -= lr v
  const float v0 = 0.5f + 0.01f * 1.0f, v1 = 0.25f + 0.01f * -2.0f;
  EXPECT_FLOAT_EQ(x[0], 1.0f - 0.1f * v0);
  EXPECT_FLOAT_EQ(x[1], -2.0f - 0.1f * v1);
  const float x0 = x[0];
  sgd.step({std::span<float>(x)}, {std::span<float>(g)}, 0.2f);
  const float w0 = 0.9f * v0 + 0.5f + 0.01f * x0;
  EXPECT_FLOAT_EQ(x[0], x0 - 0.2f * w0);
}

TEST(MomentumSgd, SchedulesTheLearningRate) {
  EXPECT_FLOAT_EQ(scheduled_lr(0.1f, LrSchedule::kConstant, 500, 1000), 0.1f);
  EXPECT_FLOAT_EQ(scheduled_lr(0.1f, LrSchedule::kCosine, 0, 1000), 0.1f);
  EXPECT_FLOAT_EQ(scheduled_lr(0.1f, LrSchedule::kCosine, 500, 1000), 0.05f);
  EXPECT_NEAR(scheduled_lr(0.1f, LrSchedule::kCosine, 999, 1000), 0.0f, 1e-6);
  EXPECT_TRUE(parse_lr_schedule("cosine").is_ok());
  auto bad = parse_lr_schedule("linear");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--lr-schedule"), std::string::npos);
}

}  // namespace
}  // namespace gossip::trainer

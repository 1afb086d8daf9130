// The CNN against an independent reference: direct convolutions in double, no im2col,
// and its gradient against central differences of that reference.

#include "experiments/trainer/cnn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "experiments/trainer/rng.h"

namespace gossip::trainer {
namespace {

struct OwnedParameters {
  std::vector<float> storage = std::vector<float>(Cnn::num_parameters());
  std::vector<std::span<float>> views() {
    std::vector<std::span<float>> v;
    size_t offset = 0;
    for (const auto& shape : Cnn::layout()) {
      v.emplace_back(storage.data() + offset, shape.numel());
      offset += shape.numel();
    }
    return v;
  }
};

using Tensors = std::vector<std::vector<double>>;

// A same-padded 5x5 convolution of an NHWC map in double, then ReLU and 2x2 max-pool.
std::vector<double> conv_relu_pool(const std::vector<double>& in, size_t side, size_t cin,
                                   const std::vector<double>& w, const std::vector<double>& b,
                                   size_t cout) {
  const int k = static_cast<int>(Cnn::kKernel), pad = k / 2, s = static_cast<int>(side);
  std::vector<double> conv(side * side * cout);
  for (int y = 0; y < s; ++y)
    for (int x = 0; x < s; ++x)
      for (size_t co = 0; co < cout; ++co) {
        double acc = b[co];
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx) {
            const int iy = y + ky - pad, ix = x + kx - pad;
            if (iy < 0 || ix < 0 || iy >= s || ix >= s) continue;
            for (size_t ci = 0; ci < cin; ++ci)
              acc += w[co * k * k * cin + static_cast<size_t>(ky * k + kx) * cin + ci] *
                     in[(static_cast<size_t>(iy) * side + static_cast<size_t>(ix)) * cin + ci];
          }
        conv[(static_cast<size_t>(y) * side + static_cast<size_t>(x)) * cout + co] =
            std::max(acc, 0.0);
      }
  const size_t half = side / 2;
  std::vector<double> out(half * half * cout);
  for (size_t y = 0; y < half; ++y)
    for (size_t x = 0; x < half; ++x)
      for (size_t c = 0; c < cout; ++c) {
        double m = -1e300;
        for (size_t dy = 0; dy < 2; ++dy)
          for (size_t dx = 0; dx < 2; ++dx)
            m = std::max(m, conv[((2 * y + dy) * side + 2 * x + dx) * cout + c]);
        out[(y * half + x) * cout + c] = m;
      }
  return out;
}

std::vector<double> dense(const std::vector<double>& in, const std::vector<double>& w,
                          const std::vector<double>& b, bool relu) {
  std::vector<double> out(b.size());
  for (size_t o = 0; o < b.size(); ++o) {
    double acc = b[o];
    for (size_t i = 0; i < in.size(); ++i) acc += w[o * in.size() + i] * in[i];
    out[o] = relu ? std::max(acc, 0.0) : acc;
  }
  return out;
}

double reference_loss(const Tensors& p, const std::vector<float>& inputs,
                      const std::vector<uint8_t>& labels) {
  double loss = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    std::vector<double> x(inputs.begin() + static_cast<ptrdiff_t>(r * kImagePixels),
                          inputs.begin() + static_cast<ptrdiff_t>((r + 1) * kImagePixels));
    auto a = conv_relu_pool(x, Cnn::kSide, 1, p[0], p[1], Cnn::kChannels1);
    a = conv_relu_pool(a, Cnn::kSide / 2, Cnn::kChannels1, p[2], p[3], Cnn::kChannels2);
    a = dense(dense(a, p[4], p[5], true), p[6], p[7], false);
    const double max = *std::max_element(a.begin(), a.end());
    double sum = 0;
    for (double z : a) sum += std::exp(z - max);
    loss += std::log(sum) + max - a[labels[r]];
  }
  return loss / static_cast<double>(labels.size());
}

TEST(Cnn, LayoutIsTheContractWithTheDaemon) {
  const auto layout = Cnn::layout();
  ASSERT_EQ(layout.size(), 8u);
  EXPECT_EQ(layout[0].name, "conv1.weight");
  EXPECT_EQ(layout[0].numel(), 16u * 25);
  EXPECT_EQ(layout[4].name, "fc1.weight");
  EXPECT_EQ(layout[4].numel(), 2048u * 7 * 7 * 32);
  EXPECT_EQ(Cnn::num_parameters(), 3247050u);
  EXPECT_EQ(model_parameters(ModelKind::kCnn), Cnn::num_parameters());
  OwnedParameters p;
  auto views = p.views();
  views[4] = views[4].first(100);
  auto bad = Cnn::create(views);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("fc1.weight"), std::string::npos) << bad.status().message();
}

class CnnGradient : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cnn = Cnn::create(params_.views());
    ASSERT_TRUE(cnn.is_ok());
    cnn_ = std::make_unique<Cnn>(std::move(*cnn));
    cnn_->init(3);
    Rng rng(17);
    inputs_.resize(kBatch * kImagePixels);
    for (float& x : inputs_) x = static_cast<float>(rng.uniform());
    labels_.resize(kBatch);
    for (auto& y : labels_) y = static_cast<uint8_t>(rng.below(kNumClasses));
    loss_ = cnn_->forward_backward(inputs_, labels_);
    for (const auto& g : cnn_->gradients()) gradients_.emplace_back(g.begin(), g.end());
    for (const auto& t : cnn_->parameters()) reference_.emplace_back(t.begin(), t.end());
  }

  double reference() const { return reference_loss(reference_, inputs_, labels_); }

  static constexpr size_t kBatch = 3;
  OwnedParameters params_;
  std::unique_ptr<Cnn> cnn_;
  std::vector<float> inputs_;
  std::vector<uint8_t> labels_;
  float loss_ = 0;
  std::vector<std::vector<float>> gradients_;
  Tensors reference_;
};

TEST_F(CnnGradient, LossAgreesWithTheReferenceAndTheScore) {
  const double want = reference();
  EXPECT_NEAR(loss_, want, 1e-4 * want);
  EXPECT_NEAR(cnn_->score(inputs_, labels_).loss_sum / kBatch, want, 1e-4 * want);
  EXPECT_GT(want, 0.5);  // untrained, on random inputs
}

// The derivative along a random direction of each whole tensor checks every entry of
// its gradient together; the largest entries are checked one by one as well.
TEST_F(CnnGradient, MatchesFiniteDifferences) {
  Rng rng(5);
  const auto layout = Cnn::layout();
  for (size_t t = 0; t < layout.size(); ++t) {
    const double eps = 1e-6;
    std::vector<double> direction(reference_[t].size());
    double analytic = 0;
    for (size_t i = 0; i < direction.size(); ++i) {
      direction[i] = rng.normal();
      analytic += direction[i] * gradients_[t][i];
    }
    const std::vector<double> saved = reference_[t];
    for (size_t i = 0; i < direction.size(); ++i) reference_[t][i] = saved[i] + eps * direction[i];
    const double plus = reference();
    for (size_t i = 0; i < direction.size(); ++i) reference_[t][i] = saved[i] - eps * direction[i];
    const double minus = reference();
    reference_[t] = saved;
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::abs(numeric) + 1e-5) << layout[t].name;

    const auto& g = gradients_[t];
    std::vector<size_t> order(g.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](size_t a, size_t b) { return std::abs(g[a]) > std::abs(g[b]); });
    for (size_t k = 0; k < 2; ++k) {
      const size_t i = order[k];
      reference_[t][i] = saved[i] + eps;
      const double p = reference();
      reference_[t][i] = saved[i] - eps;
      const double m = reference();
      reference_[t][i] = saved[i];
      const double d = (p - m) / (2 * eps);
      EXPECT_NEAR(g[i], d, 2e-3 * std::abs(d) + 1e-6) << layout[t].name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace gossip::trainer

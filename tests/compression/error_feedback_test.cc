#include "compression/error_feedback.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace gossip::compression {
namespace {

// A deliberately biased codec: sends only the entries with |x| >= 1 (as fp32 pairs).
class BigOnly final : public Codec {
 public:
  proto::CodecId id() const override { return proto::CodecId::kTopk; }
  std::string spec() const override { return "big-only"; }
  bool biased() const override { return true; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return n * 4; }
  Status encode(std::span<const float> x, const CodecContext&,
                std::vector<std::byte>& out) const override {
    out.assign(x.size() * 4, std::byte{0});
    for (size_t i = 0; i < x.size(); ++i) {
      float v = std::abs(x[i]) >= 1.0f ? x[i] : 0.0f;
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
    return Status::ok();
  }
  Status decode(std::span<const std::byte> in, const CodecContext&,
                std::span<float> y) const override {
    if (in.size() != y.size() * 4) return Status::protocol("size");
    std::memcpy(y.data(), in.data(), in.size());
    return Status::ok();
  }
};

TEST(ErrorFeedback, SentPlusResidualEqualsInputPlusPreviousResidual) {
  BigOnly codec;
  ErrorFeedback ef(codec, 100);
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.4f);
  std::vector<std::byte> payload;
  for (int round = 0; round < 20; ++round) {
    std::vector<float> u(40), sent(40);
    for (auto& x : u) x = d(rng);
    std::vector<float> before(ef.residual().begin() + 30, ef.residual().begin() + 70);
    ASSERT_TRUE(ef.encode(u, 30, {}, payload, sent).is_ok());
    for (size_t i = 0; i < u.size(); ++i)
      ASSERT_FLOAT_EQ(sent[i] + ef.residual()[30 + i], u[i] + before[i]) << "round " << round;
  }
  // Small updates accumulate in the residual until they are big enough to be sent.
  ErrorFeedback slow(codec, 1);
  std::vector<float> sent(1);
  int sent_at = -1;
  for (int r = 0; r < 10 && sent_at < 0; ++r) {
    std::vector<float> u = {0.3f};
    ASSERT_TRUE(slow.encode(u, 0, {}, payload, sent).is_ok());
    if (sent[0] != 0.0f) sent_at = r;
  }
  EXPECT_EQ(sent_at, 3) << "0.3 * 4 >= 1";
}

TEST(ErrorFeedback, SliceOutsideTheBufferIsRefusedAndLeavesTheResidual) {
  BigOnly codec;
  ErrorFeedback ef(codec, 10);
  std::vector<float> u(5, 0.5f), sent(5);
  std::vector<std::byte> payload;
  ASSERT_TRUE(ef.encode(u, 0, {}, payload, sent).is_ok());
  auto before = std::vector<float>(ef.residual().begin(), ef.residual().end());
  EXPECT_FALSE(ef.encode(u, 6, {}, payload, sent).is_ok());
  std::vector<float> wrong(4);
  EXPECT_FALSE(ef.encode(u, 0, {}, payload, wrong).is_ok());
  EXPECT_EQ(before, std::vector<float>(ef.residual().begin(), ef.residual().end()));
}

}  // namespace
}  // namespace gossip::compression

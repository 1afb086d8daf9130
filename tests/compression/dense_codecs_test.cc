// The dense codecs (fp16, bf16, int8, qsgd, sign): round trips, error bounds,
// independence from the thread split, decoders that refuse bad payloads, and the
// vectorized (AVX2, AVX-512) paths against the portable one, bit for bit.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/finite.h"
#include "base/isa.h"
#include "base/mix.h"
#include "base/split_mix64.h"
#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/half.h"
#include "compression/thread_pool.h"

namespace gossip::compression {
namespace {

constexpr float kFltMax = std::numeric_limits<float>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();

std::vector<float> normal_data(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(gen);
  return x;
}

// Cheap data for the large runs: uniform in (-8, 8), filled on the pool.
std::vector<float> large_data(size_t n, ThreadPool* pool) {
  std::vector<float> x(n);
  parallel_for(pool, n, 1 << 16, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i)
      x[i] = static_cast<float>(static_cast<int32_t>(counter_bits(42, i) >> 32)) * 0x1p-28f;
  });
  return x;
}

std::vector<std::byte> encode_ok(const Codec& c, std::span<const float> x,
                                 const CodecContext& ctx = {}) {
  std::vector<std::byte> out;
  Status st = c.encode(x, ctx, out);
  EXPECT_TRUE(st.is_ok()) << c.spec() << ": " << st.message();
  EXPECT_LE(out.size(), c.max_encoded_bytes(x.size())) << c.spec();
  return out;
}

std::vector<float> decode_ok(const Codec& c, std::span<const std::byte> in, size_t n,
                             const CodecContext& ctx = {}) {
  std::vector<float> y(n, 12345.0f);
  Status st = c.decode(in, ctx, y);
  EXPECT_TRUE(st.is_ok()) << c.spec() << ": " << st.message();
  return y;
}

std::vector<float> round_trip(const Codec& c, std::span<const float> x,
                              const CodecContext& ctx = {}) {
  return decode_ok(c, encode_ok(c, x, ctx), x.size(), ctx);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

// Scale (int8, sign) or norm (qsgd) of block b: the payloads start with them.
float block_scale(std::span<const std::byte> payload, size_t b) {
  return load_f32(payload.data() + 4 * b);
}

// ---------------------------------------------------------------------------
// Properties every dense codec shares, run over each of them.

struct CodecCase {
  std::string name;
  std::function<std::unique_ptr<Codec>()> make;
  // ||x - x'||^2 / ||x||^2 on normal data stays below this (for qsgd twice the
  // paper's variance bound min(d / S^2, sqrt(d) / S) for buckets of d elements;
  // for sign 1, as ||x||^2 - d * mean|x|^2 <= ||x||^2, reached on short blocks).
  double max_rel_mse;
  // |x - x'| / |x| for a constant vector of 700 elements (qsgd: one grid step,
  // sqrt(d) / S).
  double constant_tol;
  friend void PrintTo(const CodecCase& c, std::ostream* os) { *os << c.name; }
};

class DenseCodec : public ::testing::TestWithParam<CodecCase> {
 protected:
  std::unique_ptr<Codec> codec_ = GetParam().make();
};

TEST_P(DenseCodec, EmptyInputGivesAValidPayload) {
  auto payload = encode_ok(*codec_, {});
  EXPECT_EQ(payload.size(), codec_->max_encoded_bytes(0));
  std::vector<float> none;
  EXPECT_TRUE(codec_->decode(payload, {}, none).is_ok());
  std::vector<float> one(1);
  EXPECT_FALSE(codec_->decode(payload, {}, one).is_ok());
}

TEST_P(DenseCodec, RoundTripsNormalDataOfAwkwardLengths) {
  for (size_t n : {1, 2, 7, 8, 9, 31, 255, 256, 257, 511, 512, 513, 1023, 1024, 4099}) {
    auto x = normal_data(n, n);
    auto payload = encode_ok(*codec_, x, {.seed = 7});
    EXPECT_EQ(payload.size(), codec_->max_encoded_bytes(n))
        << "n=" << n;  // dense: the bound is exact
    auto y = decode_ok(*codec_, payload, n);
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << "n=" << n << " i=" << i;
      err += (x[i] - y[i]) * (x[i] - y[i]);
      norm += x[i] * x[i];
    }
    EXPECT_LE(err, GetParam().max_rel_mse * norm) << "n=" << n;
  }
}

TEST_P(DenseCodec, ZerosDecodeToZeros) {
  std::vector<float> x(1000, 0.0f);
  for (float v : round_trip(*codec_, x)) EXPECT_EQ(v, 0.0f);
}

TEST_P(DenseCodec, ConstantsRoundTripClosely) {
  for (float c : {1.0f, -3.5f, 1e-3f, 1000.0f, -0.25f}) {
    std::vector<float> x(700, c);
    for (float v : round_trip(*codec_, x))
      ASSERT_NEAR(v, c, std::fabs(c) * GetParam().constant_tol) << "c=" << c;
  }
}

TEST_P(DenseCodec, SamePayloadWithOneOrTwoThreads) {
  const size_t n = (size_t{3} << 17) + 5;  // several ranges, and a ragged end
  auto x = normal_data(n, 3);
  ThreadPool one(1), two(2);
  auto p0 = encode_ok(*codec_, x, {.seed = 11});
  auto p1 = encode_ok(*codec_, x, {.seed = 11, .pool = &one});
  auto p2 = encode_ok(*codec_, x, {.seed = 11, .pool = &two});
  EXPECT_TRUE(p0 == p1);
  EXPECT_TRUE(p0 == p2);
  auto y1 = decode_ok(*codec_, p2, n, {.pool = &one});
  auto y2 = decode_ok(*codec_, p2, n, {.pool = &two});
  EXPECT_TRUE(same_bits(y1, y2));
}

TEST_P(DenseCodec, RejectsEveryTruncationAndAnExtraByte) {
  auto x = normal_data(37, 5);
  auto payload = encode_ok(*codec_, x);
  std::vector<float> y(37, 7.0f);
  for (size_t len = 0; len < payload.size(); ++len) {
    Status st = codec_->decode(std::span(payload).first(len), {}, y);
    EXPECT_FALSE(st.is_ok()) << "prefix of " << len << " bytes";
    EXPECT_EQ(st.code(), Status::Code::kProtocol);
    EXPECT_NE(st.message().find(codec_->spec().substr(0, 4)), std::string::npos) << st.message();
  }
  for (float v : y) EXPECT_EQ(v, 7.0f) << "a refused payload must not write y";
  payload.push_back(std::byte{0});
  EXPECT_FALSE(codec_->decode(payload, {}, y).is_ok());
}

TEST_P(DenseCodec, RejectsAPayloadForAnotherCount) {
  auto x = normal_data(64, 9);
  auto payload = encode_ok(*codec_, x);
  for (size_t n : {0, 1, 32, 65, 72, 128, 1000}) {
    ASSERT_NE(codec_->max_encoded_bytes(n), payload.size()) << "n=" << n;
    std::vector<float> y(n);
    EXPECT_FALSE(codec_->decode(payload, {}, y).is_ok()) << "n=" << n;
  }
}

TEST_P(DenseCodec, SurvivesGarbage) {
  // Random bytes of every nearby length, including the exact size: decoding may
  // succeed or fail, but must stay in bounds (run under ASan to see it) and never
  // produce a non-finite value from a payload it accepts, except fp16/bf16 which
  // carry inf and NaN by design.
  std::mt19937_64 gen(13);
  const bool carries_non_finite =
      codec_->id() == proto::CodecId::kFp16 || codec_->id() == proto::CodecId::kBf16;
  for (size_t n : {1, 5, 8, 100, 600}) {
    const size_t exact = codec_->max_encoded_bytes(n);
    for (size_t len = exact > 3 ? exact - 3 : 0; len <= exact + 3; ++len) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<std::byte> garbage(len);
        for (auto& b : garbage) b = static_cast<std::byte>(gen());
        std::vector<float> y(n);
        Status st = codec_->decode(garbage, {}, y);
        if (len != exact) {
          EXPECT_FALSE(st.is_ok());
        }
        if (st.is_ok() && !carries_non_finite) {
          for (float v : y) EXPECT_TRUE(std::isfinite(v));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, DenseCodec,
    ::testing::Values(CodecCase{"fp16", [] { return make_fp16(); }, 1e-6, 1e-3},
                      CodecCase{"bf16", [] { return make_bf16(); }, 1e-4, 4e-3},
                      CodecCase{"int8_256", [] { return make_int8(256); }, 1e-3, 1e-5},
                      CodecCase{"int8_100", [] { return make_int8(100); }, 1e-3, 1e-5},
                      CodecCase{"qsgd_16", [] { return make_qsgd(16, 512); }, 2.9, 1.42},
                      CodecCase{"qsgd_3_bucket_100", [] { return make_qsgd(3, 100); }, 6.7, 3.34},
                      CodecCase{"qsgd_32767", [] { return make_qsgd(32767, 512); }, 1e-6, 7e-4},
                      CodecCase{"sign_256", [] { return make_sign(256); }, 1.0, 1e-6},
                      CodecCase{"sign_13", [] { return make_sign(13); }, 1.0, 1e-6}),
    [](const auto& info) { return info.param.name; });

TEST(DenseCodecs, CanonicalSpecsIdsAndBias) {
  EXPECT_EQ(make_fp16()->spec(), "fp16");
  EXPECT_EQ(make_bf16()->spec(), "bf16");
  EXPECT_EQ(make_int8(256)->spec(), "int8:256");
  EXPECT_EQ(make_int8(64)->spec(), "int8:64");
  EXPECT_EQ(make_qsgd(16, 512)->spec(), "qsgd:16");
  EXPECT_EQ(make_qsgd(4, 1024)->spec(), "qsgd:4");
  EXPECT_EQ(make_sign(256)->spec(), "sign:256");
  EXPECT_EQ(make_sign(1000)->spec(), "sign:1000");
  EXPECT_EQ(make_fp16()->id(), proto::CodecId::kFp16);
  EXPECT_EQ(make_bf16()->id(), proto::CodecId::kBf16);
  EXPECT_EQ(make_int8(256)->id(), proto::CodecId::kInt8);
  EXPECT_EQ(make_qsgd(16, 512)->id(), proto::CodecId::kQsgd);
  EXPECT_EQ(make_sign(256)->id(), proto::CodecId::kSign);
  EXPECT_FALSE(make_fp16()->biased());
  EXPECT_FALSE(make_bf16()->biased());
  EXPECT_FALSE(make_int8(256)->biased());
  EXPECT_FALSE(make_qsgd(16, 512)->biased());
  EXPECT_TRUE(make_sign(256)->biased());
}

TEST(DenseCodecs, PayloadSizes) {
  const uint64_t n = 1 << 20;
  EXPECT_EQ(make_fp16()->max_encoded_bytes(n), 2 * n);
  EXPECT_EQ(make_bf16()->max_encoded_bytes(n), 2 * n);
  EXPECT_EQ(make_int8(256)->max_encoded_bytes(n), n + 4 * n / 256);
  EXPECT_EQ(make_qsgd(16, 512)->max_encoded_bytes(n),
            n * 6 / 8 + 4 * n / 512);  // 5 level bits + sign
  EXPECT_EQ(make_qsgd(15, 512)->max_encoded_bytes(n), n * 5 / 8 + 4 * n / 512);
  EXPECT_EQ(make_qsgd(1, 512)->max_encoded_bytes(n), n * 2 / 8 + 4 * n / 512);
  EXPECT_EQ(make_sign(256)->max_encoded_bytes(n), n / 8 + 4 * n / 256);
  EXPECT_EQ(make_sign(10)->max_encoded_bytes(7), 1u + 4u);
}

TEST(DenseCodecs, StochasticCodecsRefuseNonFiniteInput) {
  for (auto make : {+[] { return make_int8(256); }, +[] { return make_qsgd(16, 512); },
                    +[] { return make_sign(256); }}) {
    auto c = make();
    for (float bad : {kNaN, kInf, -kInf}) {
      auto x = normal_data(2000, 1);
      x[1234] = bad;
      x[1900] = bad;
      std::vector<std::byte> out;
      Status st = c->encode(x, {}, out);
      ASSERT_FALSE(st.is_ok()) << c->spec();
      EXPECT_EQ(st.code(), Status::Code::kInvalid);
      EXPECT_NE(st.message().find("1234"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(c->spec().substr(0, 4)), std::string::npos) << st.message();
    }
  }
}

// ---------------------------------------------------------------------------
// fp16 and bf16

TEST(HalfCodecs, Fp16WithinHalfAnUlpAndMatchesTheCompiler) {
  auto c = make_fp16();
  auto x = normal_data(100000, 21, 100.0f);
  // Exact ties and their neighbors: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  for (float v : {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 2048.0f + 1.0f, 65504.0f, 65519.0f,
                  65520.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 3 * 0x1p-25f})
    for (float s : {1.0f, -1.0f}) x.push_back(s * v);
  auto payload = encode_ok(*c, x);
  auto y = decode_ok(*c, payload, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float a = std::fabs(x[i]);
    if (a >= 0x1p-14f && a <= 65504.0f) {
      EXPECT_LE(std::fabs(x[i] - y[i]), a * 0x1p-11f) << x[i];
    }
#ifdef __FLT16_MAX__
    // The compiler's _Float16 conversion is an independent IEEE reference.
    const auto ref = static_cast<_Float16>(x[i]);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    EXPECT_EQ(load_le16(payload.data() + 2 * i), ref_bits) << x[i];
#endif
  }
  EXPECT_EQ(round_trip(*c, std::vector<float>{1.0f + 0x1p-11f})[0], 1.0f);  // ties to even
  EXPECT_EQ(round_trip(*c, std::vector<float>{1.0f + 3 * 0x1p-11f})[0], 1.0f + 0x1p-9f);
}

TEST(HalfCodecs, Bf16WithinHalfAnUlpAndTiesToEven) {
  auto c = make_bf16();
  auto x = normal_data(100000, 22, 1e10f);
  auto y = round_trip(*c, x);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) * 0x1p-8f) << x[i];
  EXPECT_EQ(round_trip(*c, std::vector<float>{1.0f + 0x1p-8f})[0], 1.0f);
  EXPECT_EQ(round_trip(*c, std::vector<float>{1.0f + 3 * 0x1p-8f})[0], 1.0f + 0x1p-6f);
  EXPECT_EQ(round_trip(*c, std::vector<float>{kFltMax})[0], kInf);  // rounds up past bf16's max
}

// Every 16-bit pattern that is a value survives float and back unchanged, denormals
// included; NaNs stay NaN with their sign.
void expect_all_patterns_round_trip(const Codec& c, float (*to_float)(uint16_t)) {
  std::vector<float> x(65536);
  for (uint32_t h = 0; h < 65536; ++h) x[h] = to_float(static_cast<uint16_t>(h));
  auto payload = encode_ok(c, x);
  auto y = decode_ok(c, payload, x.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    if (std::isnan(x[h])) {
      EXPECT_TRUE(std::isnan(y[h])) << c.spec() << " " << h;
      EXPECT_EQ(std::signbit(y[h]), std::signbit(x[h]));
    } else {
      EXPECT_EQ(load_le16(payload.data() + 2 * h), h) << c.spec();
      EXPECT_EQ(std::bit_cast<uint32_t>(y[h]), std::bit_cast<uint32_t>(x[h]))
          << c.spec() << " " << h;
    }
  }
}

TEST(HalfCodecs, EveryHalfValueRoundTripsExactly) {
  expect_all_patterns_round_trip(*make_fp16(), fp16_to_float);
  expect_all_patterns_round_trip(*make_bf16(), bf16_to_float);
}

TEST(HalfCodecs, InfNanOverflowAndUnderflow) {
  for (auto make : {make_fp16, make_bf16}) {
    auto c = make();
    std::vector<float> x = {kInf, -kInf, kNaN, -kNaN, 0.0f, -0.0f, kFltMax, -kFltMax, kDenormMin};
    auto y = round_trip(*c, x);
    EXPECT_EQ(y[0], kInf);
    EXPECT_EQ(y[1], -kInf);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_TRUE(std::isnan(y[3]));
    EXPECT_EQ(std::bit_cast<uint32_t>(y[4]), 0u);
    EXPECT_EQ(std::bit_cast<uint32_t>(y[5]), 0x80000000u);
    EXPECT_EQ(y[6], kInf) << c->spec();
    EXPECT_EQ(y[7], -kInf) << c->spec();
    EXPECT_EQ(y[8], 0.0f) << c->spec();  // below half the smallest denormal of both
  }
  auto fp16 = make_fp16();
  auto y = round_trip(*fp16,
                      std::vector<float>{65520.0f, 65519.99f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f});
  EXPECT_EQ(y[0], kInf);  // the halfway point to 2^16 rounds to inf
  EXPECT_EQ(y[1], 65504.0f);
  EXPECT_EQ(y[2], 0x1p-24f);  // smallest fp16 denormal, exact
  EXPECT_EQ(y[3], 0.0f);      // exactly half of it: ties to even (zero)
  EXPECT_EQ(y[4], 0x1p-24f);  // just above half: rounds up
}

// ---------------------------------------------------------------------------
// int8

// |x - x'| <= scale / 2 of x's block, with a little room for fp32 rounding of x / scale
// and q * scale (a few ulps of 127 * scale).
void expect_int8_bound(std::span<const float> x, std::span<const float> y,
                       std::span<const std::byte> payload, uint32_t block) {
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = block_scale(payload, i / block);
    ASSERT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), 0.5 * s + 127.0 * s * 0x1p-22)
        << "i=" << i << " x=" << x[i] << " scale=" << s;
  }
}

TEST(Int8Codec, WithinHalfAScaleAndScaleIsAbsmaxOver127) {
  for (uint32_t block : {1u, 7u, 256u, 1000u}) {
    auto c = make_int8(block);
    for (size_t n : {1, 257, 1023, 5000}) {
      auto x = normal_data(n, n + block, 3.0f);
      auto payload = encode_ok(*c, x);
      auto y = decode_ok(*c, payload, n);
      expect_int8_bound(x, y, payload, block);
      for (size_t b = 0; b * block < n; ++b) {
        float absmax = 0;
        for (size_t i = b * block; i < std::min<size_t>(n, (b + 1) * block); ++i)
          absmax = std::max(absmax, std::fabs(x[i]));
        EXPECT_FLOAT_EQ(block_scale(payload, b), absmax / 127.0f);
      }
    }
  }
}

TEST(Int8Codec, AdversarialValues) {
  auto c = make_int8(256);
  std::vector<std::vector<float>> cases = {
      std::vector<float>(300, kFltMax),
      std::vector<float>(300, -kFltMax),
      {kFltMax, -kFltMax, 1.0f, -1.0f, 0.0f},
      std::vector<float>(300, kDenormMin),
      {kDenormMin, 190 * kDenormMin, -100 * kDenormMin, 0.0f},  // subnormal scale, rounded up
      {1e-40f, -3e-39f, 1e-45f, 2e-44f},
      {1.0f, 1e-30f, -1e-30f},  // tiny values beside large ones quantize to 0
  };
  for (auto& x : cases) {
    auto payload = encode_ok(*c, x);
    auto y = decode_ok(*c, payload, x.size());
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
    expect_int8_bound(x, y, payload, 256);
  }
  // Max-magnitude elements are reproduced to fp32 rounding, including near fp32's max.
  auto y = round_trip(*c, std::vector<float>{kFltMax, -kFltMax, 3.0f});
  EXPECT_NEAR(y[0], kFltMax, kFltMax * 1e-6f);
  EXPECT_NEAR(y[1], -kFltMax, kFltMax * 1e-6f);
}

TEST(Int8Codec, RejectsBadScalesAndMinus128) {
  auto c = make_int8(4);
  auto payload = encode_ok(*c, std::vector<float>{1, 2, 3, 4, 5, 6});
  std::vector<float> y(6, 9.0f);
  auto with_scale = [&](float s) {
    auto p = payload;
    store_f32(p.data() + 4, s);
    return p;
  };
  for (float s : {kNaN, kInf, -1.0f, -0.0f}) {
    Status st = c->decode(with_scale(s), {}, y);
    EXPECT_FALSE(st.is_ok()) << s;
    EXPECT_NE(st.message().find("scale"), std::string::npos) << st.message();
  }
  auto p = payload;
  p[8 + 5] = std::byte{0x80};  // -128: the encoder never writes it
  Status st = c->decode(p, {}, y);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("element 5"), std::string::npos) << st.message();
  for (float v : y) EXPECT_EQ(v, 9.0f);
  p[8 + 5] = std::byte{0x81};  // -127 is fine
  EXPECT_TRUE(c->decode(p, {}, y).is_ok());
}

// ---------------------------------------------------------------------------
// qsgd

TEST(QsgdCodec, LevelsAreOnTheGridAndBounded) {
  for (uint32_t levels : {1u, 2u, 4u, 16u, 127u, 32767u}) {
    auto c = make_qsgd(levels, 100);
    auto x = normal_data(1001, levels);
    auto payload = encode_ok(*c, x, {.seed = levels});
    auto y = decode_ok(*c, payload, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double norm = block_scale(payload, i / 100);
      const double l = std::fabs(y[i]) / norm * levels;
      EXPECT_NEAR(l, std::round(l), 1e-3 * std::max(1.0, l)) << i;
      EXPECT_LE(std::fabs(y[i]), norm * (1 + 1e-6));
      // One grid step at most from x, on x's side of zero (or zero).
      EXPECT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), norm / levels * (1 + 1e-5)) << i;
      EXPECT_TRUE(y[i] == 0 || std::signbit(y[i]) == std::signbit(x[i]));
    }
  }
}

TEST(QsgdCodec, NormIsTheBucketL2Norm) {
  auto c = make_qsgd(16, 512);
  auto x = normal_data(1300, 4);
  auto payload = encode_ok(*c, x);
  for (size_t b = 0; b < 3; ++b) {
    double sum = 0;
    for (size_t i = b * 512; i < std::min<size_t>(1300, (b + 1) * 512); ++i)
      sum += double{x[i]} * x[i];
    EXPECT_FLOAT_EQ(block_scale(payload, b), static_cast<float>(std::sqrt(sum)));
  }
}

TEST(QsgdCodec, UnbiasedOverSeeds) {
  // Each element's decoded value has mean x and variance <= (norm / S)^2 / 4 (a
  // Bernoulli between two grid points), so the mean of K draws lies within
  // 6 * norm / (2 S sqrt K) of x except with probability ~1e-9 per element.
  constexpr uint32_t kLevels = 2, kBucket = 64;
  constexpr int kDraws = 4000;
  auto c = make_qsgd(kLevels, kBucket);
  auto x = normal_data(300, 17);
  x[5] = 0.0f;
  x[6] = -1e-20f;
  std::vector<double> mean(x.size(), 0.0);
  std::vector<std::byte> payload;
  for (int k = 0; k < kDraws; ++k) {
    auto y = round_trip(*c, x, {.seed = static_cast<uint64_t>(k) * 7919 + 1});
    for (size_t i = 0; i < x.size(); ++i) mean[i] += y[i];
  }
  payload = encode_ok(*c, x);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mean[i] /= kDraws;
    const double norm = block_scale(payload, i / kBucket);
    const double sigma = norm / (2.0 * kLevels * std::sqrt(double{kDraws}));
    EXPECT_NEAR(mean[i], x[i], 6 * sigma) << "i=" << i;
    worst = std::max(worst, std::fabs(mean[i] - x[i]) / sigma);
  }
  EXPECT_GT(worst, 0.5);  // the draws really differ between seeds
}

TEST(QsgdCodec, SeedDeterminesThePayload) {
  auto c = make_qsgd(4, 512);
  auto x = normal_data(2000, 8);
  EXPECT_TRUE(encode_ok(*c, x, {.seed = 1}) == encode_ok(*c, x, {.seed = 1}));
  EXPECT_FALSE(encode_ok(*c, x, {.seed = 1}) == encode_ok(*c, x, {.seed = 2}));
}

TEST(QsgdCodec, HugeValues) {
  auto c = make_qsgd(16, 4);
  // One huge element per bucket: its norm is itself, so it is exact.
  std::vector<float> x = {kFltMax, 0, 0, 0, 0, -kFltMax, 1e30f, 0};
  auto y = round_trip(*c, x);
  EXPECT_EQ(y[0], kFltMax);
  EXPECT_EQ(y[5], -kFltMax);
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
  // Two of them: the bucket norm is beyond fp32, which encode refuses.
  std::vector<std::byte> out;
  Status st = c->encode(std::vector<float>{1, 2, 3, 4, kFltMax, kFltMax}, {}, out);
  EXPECT_EQ(st.code(), Status::Code::kInvalid);
  EXPECT_NE(st.message().find("bucket 1"), std::string::npos) << st.message();
}

TEST(QsgdCodec, RejectsLevelsAboveSBadNormsAndPadding) {
  auto c = make_qsgd(4, 8);  // 3 level bits + sign = 4 bits per code
  auto x = normal_data(11, 3);
  auto payload = encode_ok(*c, x);
  ASSERT_EQ(payload.size(), 2 * 4 + 6u);  // 11 codes = 44 bits = 6 bytes, 4 padding bits
  std::vector<float> y(11, 9.0f);
  auto p = payload;
  p[8 + 4] = (p[8 + 4] & std::byte{0xf0}) | std::byte{0x05};  // element 8: level 5 > 4
  Status st = c->decode(p, {}, y);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("element 8"), std::string::npos) << st.message();
  p = payload;
  p[8 + 5] |= std::byte{0x10};  // a padding bit
  EXPECT_FALSE(c->decode(p, {}, y).is_ok());
  for (float norm : {-1.0f, kNaN, kInf}) {
    p = payload;
    store_f32(p.data() + 4, norm);
    EXPECT_FALSE(c->decode(p, {}, y).is_ok()) << norm;
  }
  for (float v : y) EXPECT_EQ(v, 9.0f);
  EXPECT_TRUE(c->decode(payload, {}, y).is_ok());
}

// ---------------------------------------------------------------------------
// sign

TEST(SignCodec, MagnitudeIsTheBlockMeanAndSignsAreKept) {
  for (uint32_t block : {1u, 5u, 8u, 256u, 300u}) {
    auto c = make_sign(block);
    auto x = normal_data(1023, block);
    x[3] = 0.0f;
    x[4] = -0.0f;
    auto payload = encode_ok(*c, x);
    auto y = decode_ok(*c, payload, x.size());
    for (size_t b = 0; b * block < x.size(); ++b) {
      const size_t lo = b * block, hi = std::min<size_t>(x.size(), lo + block);
      double sum = 0;
      for (size_t i = lo; i < hi; ++i) sum += std::fabs(x[i]);
      const auto mean = static_cast<float>(sum / static_cast<double>(hi - lo));
      for (size_t i = lo; i < hi; ++i) {
        EXPECT_EQ(std::fabs(y[i]), mean) << "block=" << block << " i=" << i;
        EXPECT_EQ(y[i] < 0, x[i] < 0) << "i=" << i;  // zeros (either sign) decode to +mean
      }
    }
  }
}

TEST(SignCodec, BitsAreLsbFirst) {
  auto c = make_sign(256);
  auto payload = encode_ok(*c, std::vector<float>{-1, 2, -3, -4, 5, 6, -7, 8, 9, -1});
  ASSERT_EQ(payload.size(), 4u + 2u);
  EXPECT_EQ(block_scale(payload, 0), 4.6f);
  EXPECT_EQ(payload[4], std::byte{0b10110010});
  EXPECT_EQ(payload[5], std::byte{0b01});
}

TEST(SignCodec, AdversarialValues) {
  auto c = make_sign(4);
  std::vector<float> x = {kFltMax, kFltMax, -kFltMax, kFltMax, kDenormMin, -kDenormMin,
                          0,       0,       0,        0,       0};
  auto y = round_trip(*c, x);
  EXPECT_EQ(y[0], kFltMax);  // the mean, summed in double, does not overflow
  EXPECT_EQ(y[2], -kFltMax);
  EXPECT_EQ(y[4], -y[5]);  // mean of {dm, dm, 0, 0} is dm / 2: rounds to 0 or dm
  EXPECT_GE(y[4], 0.0f);
  for (size_t i = 8; i < 11; ++i) EXPECT_EQ(y[i], 0.0f);
}

TEST(SignCodec, RejectsBadScalesAndPadding) {
  auto c = make_sign(8);
  auto payload = encode_ok(*c, normal_data(10, 1));
  ASSERT_EQ(payload.size(), 8u + 2u);
  std::vector<float> y(10, 9.0f);
  auto p = payload;
  p[9] |= std::byte{0x04};  // bit 10: padding
  EXPECT_FALSE(c->decode(p, {}, y).is_ok());
  for (float s : {-1.0f, kNaN, kInf}) {
    p = payload;
    store_f32(p.data(), s);
    EXPECT_FALSE(c->decode(p, {}, y).is_ok()) << s;
  }
  for (float v : y) EXPECT_EQ(v, 9.0f);
}

// ---------------------------------------------------------------------------
// Large inputs: the whole path at training scale, on two threads.

constexpr size_t kLarge = size_t{1} << 27;  // 512 MB of fp32

class DenseCodecsLarge : public ::testing::Test {
 protected:
  // Made once for the suite: filling 512 MB costs more than encoding it.
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(2);
    x_ = new std::vector<float>(large_data(kLarge, pool_));
  }
  static void TearDownTestSuite() {
    delete x_;
    delete pool_;
  }
  static inline ThreadPool* pool_ = nullptr;
  static inline std::vector<float>* x_ = nullptr;
};

TEST_F(DenseCodecsLarge, Fp16) {
  ThreadPool& pool = *pool_;
  const std::vector<float>& x = *x_;
  auto c = make_fp16();
  auto payload = encode_ok(*c, x, {.pool = &pool});
  ASSERT_EQ(payload.size(), 2 * kLarge);
  auto y = decode_ok(*c, payload, kLarge, {.pool = &pool});
  size_t bad = 0;
  for (size_t i = 0; i < kLarge; ++i) {
    const float a = std::fabs(x[i]);
    const float tol = a >= 0x1p-14f ? a * 0x1p-11f : 0x1p-25f;
    bad += std::fabs(x[i] - y[i]) > tol;
  }
  EXPECT_EQ(bad, 0u);
}

TEST_F(DenseCodecsLarge, Int8) {
  ThreadPool& pool = *pool_;
  const std::vector<float>& x = *x_;
  auto c = make_int8(256);
  auto payload = encode_ok(*c, x, {.pool = &pool});
  ASSERT_EQ(payload.size(), kLarge + 4 * kLarge / 256);
  auto y = decode_ok(*c, payload, kLarge, {.pool = &pool});
  size_t bad = 0;
  for (size_t i = 0; i < kLarge; ++i) {
    const float s = block_scale(payload, i / 256);
    bad += std::fabs(x[i] - y[i]) > s * (0.5f + 0x1p-15f);
  }
  EXPECT_EQ(bad, 0u);
}

// ---------------------------------------------------------------------------
// The vectorized paths (isa.h) against the portable loops: same payload bytes, same
// status and message, same decoded bits, on every input. Each test runs every level
// the machine has above kPortable, and is skipped where it has none.

// Selects an ISA for the scope of a test step.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : previous_(set_active_isa(isa)) {}
  ~ScopedIsa() { set_active_isa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

std::vector<Isa> vector_isas() {
  std::vector<Isa> r;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (static_cast<int>(isa) <= static_cast<int>(detected_isa())) r.push_back(isa);
  return r;
}

#define SKIP_WITHOUT_VECTOR_ISA() \
  if (vector_isas().empty())      \
  GTEST_SKIP() << "this CPU has no AVX2 + F16C: only the portable path runs"

struct Encoded {
  Status status;
  std::vector<std::byte> payload;
};

Encoded encode_with(Isa isa, const Codec& c, std::span<const float> x, ThreadPool* pool = nullptr) {
  ScopedIsa scope(isa);
  Encoded e;
  e.status = c.encode(x, {.seed = 5, .pool = pool}, e.payload);
  return e;
}

// Encodes x with the portable loops and with every vector ISA and expects the same
// result; then decodes the payload with each and expects the same bits.
void expect_same_as_portable(const Codec& c, std::span<const float> x, const std::string& what,
                             ThreadPool* pool = nullptr) {
  const Encoded ref = encode_with(Isa::kPortable, c, x, pool);
  std::vector<float> ref_y(x.size(), 12345.0f);
  Status ref_dec;
  if (ref.status.is_ok()) {
    ScopedIsa scope(Isa::kPortable);
    ref_dec = c.decode(ref.payload, {.pool = pool}, ref_y);
  }
  for (Isa isa : vector_isas()) {
    const Encoded got = encode_with(isa, c, x, pool);
    ASSERT_EQ(got.status.is_ok(), ref.status.is_ok())
        << c.spec() << " " << isa_name(isa) << " " << what;
    ASSERT_EQ(got.status.message(), ref.status.message())
        << c.spec() << " " << isa_name(isa) << " " << what;
    if (!ref.status.is_ok()) continue;
    ASSERT_EQ(got.payload.size(), ref.payload.size())
        << c.spec() << " " << isa_name(isa) << " " << what;
    for (size_t i = 0; i < ref.payload.size(); ++i)
      ASSERT_EQ(got.payload[i], ref.payload[i])
          << c.spec() << " " << isa_name(isa) << " " << what << ": payload byte " << i << " of "
          << ref.payload.size();
    std::vector<float> y(x.size(), 12345.0f);
    ScopedIsa scope(isa);
    const Status dec = c.decode(ref.payload, {.pool = pool}, y);
    ASSERT_EQ(dec.is_ok(), ref_dec.is_ok()) << c.spec() << " " << isa_name(isa) << " " << what;
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(ref_y[i]))
          << c.spec() << " " << isa_name(isa) << " " << what << ": decoded element " << i
          << " of x = " << x[i];
  }
}

std::vector<std::unique_ptr<Codec>> vectorized_codecs() {
  std::vector<std::unique_ptr<Codec>> r;
  r.push_back(make_fp16());
  r.push_back(make_bf16());
  // Blocks that are and are not multiples of the vector widths (8, 16, 32).
  for (uint32_t block : {256u, 100u, 33u, 16u, 7u, 1u, 1000u}) r.push_back(make_int8(block));
  for (uint32_t block : {256u, 24u, 16u, 13u, 8u, 1u, 1000u}) r.push_back(make_sign(block));
  return r;
}

TEST(VectorizedCodecs, IsaCanBeLoweredButNotRaised) {
  const Isa best = detected_isa();
  {
    ScopedIsa scope(Isa::kPortable);
    EXPECT_EQ(active_isa(), Isa::kPortable);
  }
  EXPECT_EQ(active_isa(), best);
  ScopedIsa scope(Isa::kAvx512);
  EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(best));
}

// The gossip round's two loops over every neighbor's chunk (base/finite.h,
// base/mix.h): the NaN/Inf scan finds a bad value at every position of every short
// length, tails included, and the mix writes the portable loop's bits.
TEST(VectorizedCodecs, TheNonFiniteScanAndTheGossipMixAgreeWithThePortableLoops) {
  SKIP_WITHOUT_VECTOR_ISA();
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::bit_cast<float>(0x7f800001u)};  // a signalling NaN
  for (Isa isa : vector_isas()) {
    ScopedIsa scope(isa);
    for (size_t n = 0; n <= 70; ++n) {
      std::vector<float> x = normal_data(n, 2000 + n, 1e30f);  // large, none of them Inf
      ASSERT_FALSE(any_nonfinite(x)) << isa_name(isa) << " n=" << n;
      for (size_t at = 0; at < n; ++at)
        for (float b : bad) {
          const float kept = x[at];
          x[at] = b;
          ASSERT_TRUE(any_nonfinite(x)) << isa_name(isa) << " n=" << n << " " << b << " at " << at;
          x[at] = kept;
        }
    }
    for (size_t n : {0u, 1u, 7u, 8u, 15u, 16u, 33u, 1000u, 4099u}) {
      const std::vector<float> v = normal_data(n, 3000 + n), x = normal_data(n, 4000 + n);
      std::vector<float> want = normal_data(n, 5000 + n), got = want;
      {
        ScopedIsa portable(Isa::kPortable);
        add_weighted_difference(want, v, x, 0.3f);
      }
      add_weighted_difference(got, v, x, 0.3f);
      for (size_t e = 0; e < n; ++e)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[e]), std::bit_cast<uint32_t>(want[e]))
            << isa_name(isa) << " n=" << n << " element " << e;
    }
  }
#ifdef GOSSIP_HAVE_X86_KERNELS
  // The AVX2 versions called directly, so that a dispatch that never picked them could
  // not pass the checks above by running the portable loops twice.
  const size_t n = 4099;
  const std::vector<float> v = normal_data(n, 6000), x = normal_data(n, 7000);
  std::vector<float> want = normal_data(n, 8000), got = want;
  mix_detail::portable(want.data(), v.data(), x.data(), 0.7f, n);
  mix_detail::avx2(got.data(), v.data(), x.data(), 0.7f, n);
  for (size_t e = 0; e < n; ++e)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[e]), std::bit_cast<uint32_t>(want[e])) << e;
  std::vector<float> tail = x;
  EXPECT_FALSE(finite_detail::any_nonfinite_avx2(tail.data(), n));
  tail[n - 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(finite_detail::any_nonfinite_avx2(tail.data(), n));
#endif
}

TEST(VectorizedCodecs, NormalDataOfEveryShortLength) {
  SKIP_WITHOUT_VECTOR_ISA();
  // Every length up to past two of the widest loop steps (32), so every tail runs.
  for (const auto& c : vectorized_codecs())
    for (size_t n = 0; n <= 70; ++n)
      expect_same_as_portable(*c, normal_data(n, 1000 + n), "n=" + std::to_string(n));
}

TEST(VectorizedCodecs, NormalDataAtScalesAndRaggedLengths) {
  SKIP_WITHOUT_VECTOR_ISA();
  for (const auto& c : vectorized_codecs())
    for (size_t n : {255, 256, 257, 1000, 4099, 65536 + 5})
      for (float stddev : {1.0f, 1e-3f, 3e4f, 1e-38f, 1e30f})
        expect_same_as_portable(*c, normal_data(n, n, stddev),
                                "n=" + std::to_string(n) + " stddev=" + std::to_string(stddev));
}

TEST(VectorizedCodecs, SeveralRangesOnTwoThreads) {
  SKIP_WITHOUT_VECTOR_ISA();
  ThreadPool two(2);
  const auto x = normal_data((size_t{3} << 17) + 5, 77);
  for (const auto& c : vectorized_codecs()) expect_same_as_portable(*c, x, "2 threads", &two);
}

// Special values at every position of a vector: zeros of both signs, denormals,
// fp32 and fp16 limits, and (for the codecs that refuse them) inf and NaN, whose
// error must name the same element.
TEST(VectorizedCodecs, AdversarialValuesAtEveryLanePosition) {
  SKIP_WITHOUT_VECTOR_ISA();
  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       kDenormMin,
                                       -kDenormMin,
                                       1e-40f,
                                       -3e-39f,
                                       std::numeric_limits<float>::min(),
                                       kFltMax,
                                       -kFltMax,
                                       65504.0f,
                                       65519.99f,
                                       65520.0f,
                                       -65520.0f,
                                       0x1p-14f,
                                       0x1p-24f,
                                       0x1p-25f,
                                       0x1.000002p-25f,
                                       1.0f + 0x1p-11f,
                                       1.0f + 0x1p-8f,
                                       1e-30f};
  const std::vector<float> non_finite = {kInf,
                                         -kInf,
                                         kNaN,
                                         -kNaN,
                                         std::bit_cast<float>(0x7f800001u),
                                         std::bit_cast<float>(0xffa00000u)};
  for (const auto& c : vectorized_codecs()) {
    for (float v : specials)
      for (size_t pos : {0, 3, 7, 8, 15, 16, 31, 40}) {
        auto x = normal_data(48, pos);
        x[pos] = v;
        expect_same_as_portable(*c, x, "x[" + std::to_string(pos) + "] = " + std::to_string(v));
        std::vector<float> all(37, v);  // a whole block of it
        expect_same_as_portable(*c, all, "all " + std::to_string(v));
      }
    for (float v : non_finite)
      for (size_t pos : {0, 9, 31, 47, 300}) {
        auto x = normal_data(301, pos);
        x[pos] = v;
        expect_same_as_portable(*c, x, "non-finite at " + std::to_string(pos));
      }
  }
}

// int8 divides by the scale except where x * (1 / scale) is within 2^-15 of a
// half-integer; these inputs sit on, and a few ulps around, such ties, and use
// scales that are subnormal (divided throughout) or near fp32's max.
TEST(VectorizedCodecs, Int8NearTiesAndExtremeScales) {
  SKIP_WITHOUT_VECTOR_ISA();
  std::mt19937_64 gen(99);
  for (uint32_t block : {256u, 64u, 37u}) {
    auto c = make_int8(block);
    for (float scale : {1.0f, 0.1f, 3.0f / 127.0f, 1e-3f, 7.77e-20f, 1e-36f, 1e-41f, 2.0e36f}) {
      std::vector<float> x;
      for (int k = -127; x.size() < 4 * block; k = k == 126 ? -127 : k + 1) {
        float v = (static_cast<float>(k) + 0.5f) * scale;
        const int ulps = static_cast<int>(gen() % 7) - 3;
        for (int u = 0; u < std::abs(ulps); ++u) v = std::nextafter(v, ulps > 0 ? kInf : -kInf);
        x.push_back(v);
      }
      for (size_t b = 0; b * block < x.size(); ++b)
        x[b * block] = 127.0f * scale;  // the block's absmax
      expect_same_as_portable(*c, x,
                              "block " + std::to_string(block) + " scale " + std::to_string(scale));
    }
  }
}

// sign sums each block in lanes when that sum is provably exact and in order
// otherwise; these blocks straddle that line (|x| spanning 2^20 .. 2^23 at 256) and
// mix zeros, -0 and denormals in.
TEST(VectorizedCodecs, SignExactAndInexactBlockSums) {
  SKIP_WITHOUT_VECTOR_ISA();
  std::mt19937_64 gen(7);
  for (uint32_t block : {256u, 200u, 8u, 13u}) {
    auto c = make_sign(block);
    for (int span : {0, 5, 19, 20, 21, 22, 23, 40, 120, 200}) {
      std::vector<float> x(3 * block + 5);
      for (size_t i = 0; i < x.size(); ++i) {
        const float mant = 1.0f + static_cast<float>(gen() % (1u << 23)) * 0x1p-23f;
        const int e = span == 0 ? 0 : -static_cast<int>(gen() % static_cast<uint64_t>(span + 1));
        x[i] = std::ldexp(mant, e) * ((gen() & 1) ? 1.0f : -1.0f);
        if (gen() % 23 == 0) x[i] = (gen() & 1) ? 0.0f : -0.0f;
        if (gen() % 97 == 0) x[i] = kDenormMin * static_cast<float>(gen() % 1000);
      }
      expect_same_as_portable(*c, x,
                              "block " + std::to_string(block) + " span 2^" + std::to_string(span));
    }
  }
}

// A block whose sum in order is inexact, and where summing in lanes would round the
// mean the other way: 1 + 2^-24, then 2^-54s that the ordered sum drops one by one
// but lane sums keep. The mean in order is (1 + 2^-24) / 256, a tie between two
// floats, which rounds to even: 2^-8.
TEST(VectorizedCodecs, SignBlockWhoseLaneSumWouldDiffer) {
  std::vector<float> x(256, 0x1p-54f);
  x[0] = 1.0f;
  x[1] = 0x1p-24f;
  auto c = make_sign(256);
  EXPECT_EQ(block_scale(encode_ok(*c, x), 0), 0x1p-8f);
  SKIP_WITHOUT_VECTOR_ISA();
  expect_same_as_portable(*c, x, "inexact block");
}

// fp16 and bf16 on a sample of all 2^32 bit patterns: every sign, exponent and top
// mantissa pattern (the high 16 bits) with low halves at the rounding boundaries and
// a few random ones. The whole space is checked by DISABLED_Fp16EveryFloat.
TEST(VectorizedCodecs, HalfConversionsOnSampledBitPatterns) {
  SKIP_WITHOUT_VECTOR_ISA();
  std::mt19937_64 gen(3);
  std::vector<float> x;
  x.reserve(65536 * 24);
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu, 0x2000u, 0x3000u,
                        0x7fffu, 0x8000u, 0x8001u, 0xefffu, 0xf000u, 0xf001u, 0xffffu})
      x.push_back(std::bit_cast<float>(hi << 16 | lo));
    for (int r = 0; r < 9; ++r)
      x.push_back(std::bit_cast<float>(hi << 16 | static_cast<uint32_t>(gen() & 0xffff)));
  }
  expect_same_as_portable(*make_fp16(), x, "sampled patterns");
  expect_same_as_portable(*make_bf16(), x, "sampled patterns");
}

// Every 16-bit payload pattern, signalling NaNs included, decodes to the same bits.
TEST(VectorizedCodecs, HalfDecodeOfEveryPattern) {
  SKIP_WITHOUT_VECTOR_ISA();
  std::vector<std::byte> payload(2 * 65536 + 2 * 5);  // and a ragged tail
  for (uint32_t h = 0; h < 65536 + 5; ++h)
    store_le16(payload.data() + 2 * h, static_cast<uint16_t>(h * 40503u));
  for (uint32_t h = 0; h < 65536; ++h) store_le16(payload.data() + 2 * h, static_cast<uint16_t>(h));
  const size_t n = payload.size() / 2;
  for (auto make : {make_fp16, make_bf16}) {
    auto c = make();
    std::vector<float> ref(n), y(n);
    {
      ScopedIsa scope(Isa::kPortable);
      ASSERT_TRUE(c->decode(payload, {}, ref).is_ok());
    }
    for (Isa isa : vector_isas()) {
      ScopedIsa scope(isa);
      ASSERT_TRUE(c->decode(payload, {}, y).is_ok());
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(ref[i]))
            << c->spec() << " " << isa_name(isa) << " pattern " << std::hex
            << load_le16(payload.data() + 2 * i);
    }
  }
}

// By hand (80 s on the reference VM): --gtest_also_run_disabled_tests
// --gtest_filter='*EveryFloat*'. Every float through the vectorized fp16 and bf16 encoders against
// half.h's conversions.
TEST(VectorizedCodecs, DISABLED_HalfEncodeOfEveryFloat) {
  SKIP_WITHOUT_VECTOR_ISA();
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<float> x(kChunk);
  using Make = std::unique_ptr<Codec> (*)();
  using ToHalf = uint16_t (*)(float);
  for (auto [make, to_half] : {std::pair<Make, ToHalf>{make_fp16, float_to_fp16},
                               std::pair<Make, ToHalf>{make_bf16, float_to_bf16}}) {
    auto c = make();
    for (Isa isa : vector_isas()) {
      ScopedIsa scope(isa);
      std::vector<std::byte> out;
      uint64_t mismatches = 0;
      for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
        for (size_t i = 0; i < kChunk; ++i)
          x[i] = std::bit_cast<float>(static_cast<uint32_t>(base + i));
        ASSERT_TRUE(c->encode(x, {}, out).is_ok());
        for (size_t i = 0; i < kChunk; ++i) {
          if (load_le16(out.data() + 2 * i) != to_half(x[i]) && mismatches++ < 10)
            ADD_FAILURE() << c->spec() << " " << isa_name(isa) << std::hex << " bits " << base + i
                          << ": got " << load_le16(out.data() + 2 * i) << ", want "
                          << to_half(x[i]);
        }
      }
      EXPECT_EQ(mismatches, 0u) << c->spec() << " " << isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace gossip::compression

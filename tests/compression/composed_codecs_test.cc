// Composed sparse codecs (composed_codec.cc): specs, round trips for every index
// encoding and value width, error feedback over the whole chain, the sizes the
// encodings reach, and hostile payloads refused with the reason, the output untouched.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "compression/error_feedback.h"

namespace gossip::compression {
namespace {

using Bytes = std::vector<std::byte>;

std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

std::unique_ptr<Codec> codec(const std::string& spec) {
  auto c = make_codec(spec);
  EXPECT_TRUE(c.is_ok()) << spec << ": " << c.status().message();
  return c.is_ok() ? std::move(c->codec) : nullptr;
}

TEST(ComposedCodecs, SpecsParseToTheirCanonicalForm) {
  const std::pair<const char*, const char*> cases[] = {
      {"topk:0.01+quant:2+idx:chunk12", "topk:0.01+quant:2+idx:chunk12"},
      {"topk:0.01+quant:2", "topk:0.01+quant:2+idx:auto"},
      {"topk:0.03:approx+idx:eliasfano+quant:4", "topk:0.03:approx+quant:4+idx:eliasfano"},
      {"topk:0.5+idx:delta", "topk:0.5+idx:delta"},
      {"randk:0.1+quant:8", "randk:0.1+quant:8"},
  };
  for (const auto& [spec, canonical] : cases) {
    auto c = make_codec(std::string(spec) + "+ef");
    ASSERT_TRUE(c.is_ok()) << spec << ": " << c.status().message();
    EXPECT_EQ(c->codec->spec(), canonical);
    EXPECT_TRUE(c->error_feedback);
    EXPECT_EQ(c->codec->id(), proto::CodecId::kChain);
    EXPECT_TRUE(c->codec->biased());
    auto again = make_codec(c->canonical());
    ASSERT_TRUE(again.is_ok()) << c->canonical();
    EXPECT_EQ(again->codec->spec(), canonical) << "canonical specs parse back to themselves";
  }
  EXPECT_EQ(make_codec("topk:0.01+ef")->codec->id(), proto::CodecId::kTopk) << "no chain: top-k";
}

TEST(ComposedCodecs, BadChainsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"topk:0.01+quant:3", "quant takes 2, 4 or 8 bits, not 3"},
      {"topk:0.01+quant:16", "quant's bits must be an integer in [2, 8]"},
      {"topk:0.01+quant:2+quant:4", "repeated or malformed stage 'quant:4'"},
      {"topk:0.01+idx:zip", "unknown index encoding 'zip'"},
      {"randk:0.01+quant:2+idx:delta", "rand-k's indices are implicit"},
      {"randk:0.01+idx:auto", "rand-k's indices are implicit"},
      {"topk:0.01:fp16+quant:2", "quantize with +quant:BITS"},
      {"sign+quant:2", "a chain starts with topk or randk, not 'sign'"},
      {"topk:2+quant:2", "ratio must be a number in (0, 1]"},
      {"topk:0.01+lz4", "unknown, repeated or malformed stage 'lz4'"},
  };
  for (const auto& [spec, why] : cases) {
    auto c = make_codec(spec);
    ASSERT_FALSE(c.is_ok()) << spec;
    EXPECT_NE(c.status().message().find(why), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(spec), std::string::npos) << "names the spec";
  }
}

// Top-k chains keep exactly top-k's support; fp32 values come back exactly, B-bit
// values within half a quantization step of their block's scale.
TEST(ComposedCodecs, TopkChainsRoundTripForEveryEncodingAndWidth) {
  for (size_t n : {size_t{1}, size_t{100}, size_t{4097}, size_t{100000}}) {
    const auto x = gaussian(n, n);
    auto reference = codec("topk:0.05");
    Bytes ref_payload;
    ASSERT_TRUE(reference->encode(x, {}, ref_payload).is_ok());
    std::vector<float> ref(n);
    ASSERT_TRUE(reference->decode(ref_payload, {}, ref).is_ok());
    for (const char* idx : {"auto", "delta", "chunk12", "eliasfano"})
      for (int bits : {32, 8, 4, 2}) {
        const std::string spec = std::string("topk:0.05") +
                                 (bits < 32 ? "+quant:" + std::to_string(bits) : "") +
                                 "+idx:" + idx;
        SCOPED_TRACE(spec + " n=" + std::to_string(n));
        auto c = codec(spec);
        Bytes payload;
        ASSERT_TRUE(c->encode(x, {}, payload).is_ok());
        EXPECT_LE(payload.size(), c->max_encoded_bytes(n));
        std::vector<float> y(n, 7.0f);
        ASSERT_TRUE(c->decode(payload, {}, y).is_ok());
        float scale = 0;
        for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(ref[i]));
        const float step = bits == 32 ? 0.0f : scale / static_cast<float>((1 << bits) - 1);
        for (size_t i = 0; i < n; ++i) {
          if (ref[i] == 0.0f) {
            ASSERT_EQ(y[i], 0.0f) << "element " << i << " is not kept";
            continue;
          }
          ASSERT_LE(std::fabs(y[i] - ref[i]), step * 1.0001f) << "element " << i;
          if (bits == 32) {
            ASSERT_EQ(y[i], ref[i]) << "element " << i;
          }
        }
      }
  }
}

TEST(ComposedCodecs, RandkChainsKeepRandksPositionsUnbiasedScale) {
  const size_t n = 10000;
  const auto x = gaussian(n, 3);
  auto plain = codec("randk:0.1");
  auto chain = codec("randk:0.1+quant:8");
  CodecContext ctx;
  ctx.seed = 99;
  Bytes a, b;
  ASSERT_TRUE(plain->encode(x, ctx, a).is_ok());
  ASSERT_TRUE(chain->encode(x, ctx, b).is_ok());
  std::vector<float> ya(n), yb(n);
  ASSERT_TRUE(plain->decode(a, ctx, ya).is_ok());
  ASSERT_TRUE(chain->decode(b, ctx, yb).is_ok());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(ya[i] == 0.0f, yb[i] == 0.0f) << "the same positions, at " << i;
    ASSERT_NEAR(yb[i], ya[i], 10.0f * 5.0f / 255) << i;  // n/k times a step of the block
  }
  EXPECT_LT(b.size() * 3, a.size()) << "8-bit values and no indices: a third of rand-k's fp32";
}

// One error-feedback memory for the whole chain: after each step the residual is
// exactly what the receivers did not get, and a constant input is delivered in full
// over time (what top-k drops and what quantization rounds away alike).
TEST(ComposedCodecs, ErrorFeedbackCarriesWhatTheWholeChainDropped) {
  const size_t n = 2000;
  auto c = codec("topk:0.05+quant:2+idx:auto");
  ErrorFeedback ef(*c, n);
  const auto u = gaussian(n, 11);
  std::vector<double> delivered(n, 0.0);
  std::vector<float> sent(n);
  Bytes payload;
  const int steps = 400;
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> before(ef.residual().begin(), ef.residual().end());
    ASSERT_TRUE(ef.encode(u, 0, {}, payload, sent).is_ok());
    std::vector<float> decoded(n);
    ASSERT_TRUE(c->decode(payload, {}, decoded).is_ok());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(decoded[i], sent[i]) << "sent is what receivers decode";
      ASSERT_NEAR(ef.residual()[i], before[i] + u[i] - decoded[i], 1e-4f) << i;
      delivered[i] += decoded[i];
    }
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(delivered[i] / steps - u[i]));
  EXPECT_LT(worst, 0.05) << "the mean delivered equals the input: nothing is lost for good";
}

// At 1% of a million elements with 2-bit values: the payload is over 200x smaller than
// fp32, and Elias-Fano indices are the smallest (auto picks them).
TEST(ComposedCodecs, OnePercentWithTwoBitValuesIsOver200xSmaller) {
  const size_t n = 1000000;
  const auto x = gaussian(n, 5);
  size_t sizes[4] = {};
  const char* modes[4] = {"auto", "delta", "chunk12", "eliasfano"};
  for (int m = 0; m < 4; ++m) {
    auto c = codec(std::string("topk:0.01+quant:2+idx:") + modes[m]);
    Bytes payload;
    ASSERT_TRUE(c->encode(x, {}, payload).is_ok());
    sizes[m] = payload.size();
  }
  EXPECT_EQ(sizes[0], std::min({sizes[1], sizes[2], sizes[3]}));
  EXPECT_EQ(sizes[0], sizes[3]) << "Elias-Fano, at 1%";
  EXPECT_GT(4.0 * n / static_cast<double>(sizes[0]), 200.0)
      << sizes[0] << " bytes (delta " << sizes[1] << ", chunk12 " << sizes[2] << ")";
}

// Every hostile payload is refused with a reason, before anything is written.
TEST(ComposedCodecs, HostilePayloadsAreRefusedAndTheOutputUntouched) {
  const size_t n = 5000;
  const auto x = gaussian(n, 8);
  for (const char* spec : {"topk:0.02+quant:4+idx:delta", "topk:0.02+quant:2+idx:chunk12",
                           "topk:0.02+idx:eliasfano", "randk:0.02+quant:8"}) {
    SCOPED_TRACE(spec);
    auto c = codec(spec);
    CodecContext ctx;
    ctx.seed = 4;
    Bytes good;
    ASSERT_TRUE(c->encode(x, ctx, good).is_ok());
    auto refused = [&](const Bytes& p, const std::string& why) {
      std::vector<float> y(n, 3.0f);
      const Status st = c->decode(p, ctx, y);
      EXPECT_FALSE(st.is_ok()) << why;
      EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
      EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == 3.0f; })) << why;
    };
    for (size_t cut : {size_t{0}, size_t{3}, size_t{6}, good.size() / 2, good.size() - 1})
      refused(Bytes(good.begin(), good.begin() + static_cast<ptrdiff_t>(cut)), "truncated");
    Bytes longer = good;
    longer.push_back(std::byte{0});
    refused(longer, "bytes past the payload's end");
    Bytes version = good;
    version[0] = std::byte{9};
    refused(version, "payload format version 9");
    Bytes bits = good;
    bits[2] = std::byte{bits[2] == std::byte{8} ? uint8_t{4} : uint8_t{8}};
    refused(bits, "run one --codec on every node");
    Bytes encoding = good;
    encoding[3] = std::byte{7};
    refused(encoding, "index encoding 7 (unknown)");
    std::vector<float> wrong(n + 1);
    EXPECT_FALSE(c->decode(good, ctx, wrong).is_ok()) << "another element count";
  }
  // Structure inside the sections: a top-k payload whose k lies, whose indices go
  // backwards, whose scale is NaN.
  auto c = codec("topk:0.02+quant:4+idx:delta");
  Bytes good;
  ASSERT_TRUE(c->encode(x, {}, good).is_ok());
  // [version, selector, bits, encoding, varint n (2 bytes: 5000), varint k (1 byte: 100)]
  ASSERT_EQ(std::to_integer<int>(good[6]), 100);
  Bytes k = good;
  k[6] = std::byte{99};
  std::vector<float> y(n, 3.0f);
  Status st = c->decode(k, {}, y);
  EXPECT_NE(st.message().find("carries 99 entries, 100 expected"), std::string::npos)
      << st.message();
  Bytes zero_gap = good;
  zero_gap[8] = std::byte{0};  // the second index's gap (the first one's varint is 1 byte)
  if (std::to_integer<int>(good[7]) < 0x80) {
    st = c->decode(zero_gap, {}, y);
    EXPECT_FALSE(st.is_ok());
  }
  // The scales follow the indices: find the first one by decoding the index varints.
  size_t at = 7;
  for (int j = 0; j < 100; ++j)
    while (std::to_integer<int>(good[at++]) & 0x80) {
    }
  Bytes nan = good;
  const float q = std::nanf("");
  std::memcpy(nan.data() + at, &q, 4);
  st = c->decode(nan, {}, y);
  EXPECT_NE(st.message().find("scale 0 is nan"), std::string::npos) << st.message();
  EXPECT_EQ(y[0], 3.0f);
}

TEST(ComposedCodecs, NonFiniteInputIsRefusedByTheEncoder) {
  auto x = gaussian(1000, 2);
  x[17] = std::numeric_limits<float>::infinity();
  for (const char* spec : {"topk:0.1+quant:2", "randk:1+quant:2"}) {
    Bytes p;
    EXPECT_FALSE(codec(spec)->encode(x, {}, p).is_ok()) << spec;
  }
}

}  // namespace
}  // namespace gossip::compression

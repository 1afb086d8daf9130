// The sparse payload encoding, top-k (exact and approximate) and rand-k.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "compression/half.h"
#include "compression/sparse_encoding.h"
#include "compression/thread_pool.h"

namespace gossip::compression {
namespace {

using Bytes = std::vector<std::byte>;

Bytes make_bytes(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

void append_f32(Bytes& b, float f) {
  std::byte raw[4];
  std::memcpy(raw, &f, 4);
  b.insert(b.end(), raw, raw + 4);
}

// Fast deterministic data: a Gaussian-ish mix from a seeded engine.
std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// For the large timing inputs: a sum of uniforms (cheap, bell shaped).
std::vector<float> bell(size_t n, uint64_t seed) {
  std::vector<float> x(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<float>(s >> 40) * 0x1p-24f;
  };
  for (auto& v : x) v = next() + next() + next() - 1.5f;
  return x;
}

std::unique_ptr<Codec> codec(const std::string& spec) {
  auto c = make_codec(spec);
  EXPECT_TRUE(c.is_ok()) << spec << ": " << c.status().message();
  return std::move(c->codec);
}

// Top-k by the rule the codec promises: largest |x|, ties to the lower index;
// returned ascending.
std::vector<uint64_t> magnitude_order(const std::vector<float>& x) {
  std::vector<uint64_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](uint64_t a, uint64_t b) {
    float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa != fb ? fa > fb : a < b;
  });
  return idx;
}

std::vector<uint64_t> reference_topk(const std::vector<float>& x, uint64_t k) {
  auto idx = magnitude_order(x);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<uint64_t> payload_indices(const Bytes& p, uint64_t n) {
  auto v = decode_sparse(p, n, "test");
  EXPECT_TRUE(v.is_ok()) << v.status().message();
  return v.is_ok() ? v->indices : std::vector<uint64_t>{};
}

// ---------------------------------------------------------------- encoding

struct Pattern {
  uint64_t n;
  std::vector<uint64_t> indices;
};

std::vector<Pattern> patterns() {
  std::vector<Pattern> ps;
  ps.push_back({0, {}});
  ps.push_back({1, {}});
  ps.push_back({1, {0}});
  ps.push_back({100, {}});
  ps.push_back({100, {0}});
  ps.push_back({100, {99}});
  ps.push_back({13, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}});  // k = n, odd n
  Pattern dense{1000, {}};
  for (uint64_t i = 0; i < 1000; i += 2) dense.indices.push_back(i);
  ps.push_back(dense);
  ps.push_back({1000000, {0, 5, 127, 128, 16511, 999999}});  // very sparse, gaps on varint edges
  Pattern big_gap{uint64_t{1} << 40, {1, (uint64_t{1} << 40) - 1}};
  ps.push_back(big_gap);
  return ps;
}

TEST(SparseEncoding, RoundTripsEveryPatternAndEncoding) {
  for (const auto& p : patterns()) {
    std::vector<float> vals(p.indices.size());
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i) * 0.37f - 3.1f;
    for (ValueType t : {ValueType::kF32, ValueType::kF16}) {
      std::vector<std::optional<IndexEncoding>> encs{std::nullopt, IndexEncoding::kVarint};
      if (p.n <= 1000000) encs.push_back(IndexEncoding::kBitmap);
      for (auto e : encs) {
        SCOPED_TRACE(::testing::Message() << "n=" << p.n << " k=" << p.indices.size()
                                          << " fp16=" << (t == ValueType::kF16)
                                          << " enc=" << (e ? static_cast<int>(*e) : -1));
        Bytes out;
        ASSERT_TRUE(encode_sparse(p.n, p.indices, vals, t, out, e).is_ok());
        EXPECT_EQ(out.size(), sparse_encoded_size(p.n, p.indices, t, e));
        if (!e) {
          EXPECT_LE(out.size(), sparse_max_encoded_size(p.n, p.indices.size(), t));
        }
        auto d = decode_sparse(out, p.n, "test");
        ASSERT_TRUE(d.is_ok()) << d.status().message();
        EXPECT_EQ(d->n, p.n);
        EXPECT_EQ(d->indices, p.indices);
        ASSERT_EQ(d->values.size(), vals.size());
        for (size_t i = 0; i < vals.size(); ++i) {
          float want = t == ValueType::kF32 ? vals[i] : fp16_to_float(float_to_fp16(vals[i]));
          EXPECT_EQ(d->values[i], want);
        }
        if (p.n <= 1000000) {
          std::vector<float> y(p.n, 9.0f);
          ASSERT_TRUE(decode_sparse_into(out, t, "test", nullptr, y).is_ok());
          size_t j = 0;
          for (uint64_t i = 0; i < p.n; ++i) {
            if (j < p.indices.size() && p.indices[j] == i)
              EXPECT_EQ(y[i], d->values[j++]);
            else
              ASSERT_EQ(y[i], 0.0f);
          }
        }
      }
    }
  }
}

TEST(SparseEncoding, PicksTheSmallerIndexEncoding) {
  // Dense: every other index of 1000, 500 one-byte varints vs a 125-byte bitmap.
  Pattern dense = patterns()[7];
  uint64_t v = varint_index_bytes(dense.indices), b = bitmap_index_bytes(dense.n);
  EXPECT_EQ(v, 500u);
  EXPECT_EQ(b, 125u);
  EXPECT_EQ(choose_index_encoding(dense.n, dense.indices), IndexEncoding::kBitmap);
  std::vector<float> vals(dense.indices.size(), 1.0f);
  Bytes out, forced;
  ASSERT_TRUE(encode_sparse(dense.n, dense.indices, vals, ValueType::kF32, out).is_ok());
  ASSERT_TRUE(
      encode_sparse(dense.n, dense.indices, vals, ValueType::kF32, forced, IndexEncoding::kVarint)
          .is_ok());
  EXPECT_EQ(static_cast<int>(out[1]), static_cast<int>(IndexEncoding::kBitmap));
  EXPECT_EQ(forced.size() - out.size(), v - b);

  // Sparse: 6 indices of 10^6, 9 bytes of varints vs a 125000-byte bitmap.
  Pattern sparse = patterns()[8];
  v = varint_index_bytes(sparse.indices);
  EXPECT_EQ(v, 1u + 1 + 1 + 1 + 2 + 3);  // 0, 5, 122, 1, 16383 (largest 2-byte), 983488
  EXPECT_EQ(choose_index_encoding(sparse.n, sparse.indices), IndexEncoding::kVarint);
  vals.assign(sparse.indices.size(), 1.0f);
  ASSERT_TRUE(encode_sparse(sparse.n, sparse.indices, vals, ValueType::kF16, out).is_ok());
  ASSERT_TRUE(
      encode_sparse(sparse.n, sparse.indices, vals, ValueType::kF16, forced, IndexEncoding::kBitmap)
          .is_ok());
  EXPECT_EQ(static_cast<int>(out[1]), static_cast<int>(IndexEncoding::kVarint));
  EXPECT_EQ(forced.size() - out.size(), bitmap_index_bytes(sparse.n) - v);
  EXPECT_EQ(out.size(), sparse_header_bytes(sparse.n, 6) + v + 6 * 2);
}

TEST(SparseEncoding, EncoderRefusesBadInput) {
  Bytes out;
  std::vector<float> two{1, 2}, one{1};
  EXPECT_EQ(encode_sparse(10, std::vector<uint64_t>{3, 3}, two, ValueType::kF32, out).code(),
            Status::Code::kInvalid);
  EXPECT_FALSE(encode_sparse(10, std::vector<uint64_t>{4, 3}, two, ValueType::kF32, out).is_ok());
  EXPECT_FALSE(encode_sparse(10, std::vector<uint64_t>{10}, one, ValueType::kF32, out).is_ok());
  EXPECT_FALSE(encode_sparse(10, std::vector<uint64_t>{1, 2}, one, ValueType::kF32, out).is_ok());
  EXPECT_FALSE(encode_sparse_values(1, two, ValueType::kF32, out).is_ok());
}

// Every way to fail must fail for both decoders, and leave y untouched.
void expect_rejected(const Bytes& p, uint64_t n, const std::string& why_contains = "") {
  auto d = decode_sparse(p, n, "topk");
  ASSERT_FALSE(d.is_ok()) << "accepted a bad payload (" << why_contains << ")";
  EXPECT_EQ(d.status().code(), Status::Code::kProtocol);
  EXPECT_NE(d.status().message().find("topk"), std::string::npos) << d.status().message();
  if (!why_contains.empty()) {
    EXPECT_NE(d.status().message().find(why_contains), std::string::npos) << d.status().message();
  }
  if (n <= 4096) {
    for (ValueType t : {ValueType::kF32, ValueType::kF16}) {
      std::vector<float> y(n, 7.0f);
      EXPECT_FALSE(decode_sparse_into(p, t, "topk", nullptr, y).is_ok());
      for (float v : y) ASSERT_EQ(v, 7.0f);
    }
  }
}

TEST(SparseEncoding, RejectsTruncationsAndTrailingBytes) {
  for (const auto& p : patterns()) {
    if (p.n > 1000000) continue;
    std::vector<float> vals(p.indices.size(), 1.5f);
    for (ValueType t : {ValueType::kF32, ValueType::kF16}) {
      for (auto e : {IndexEncoding::kVarint, IndexEncoding::kBitmap}) {
        Bytes out;
        ASSERT_TRUE(encode_sparse(p.n, p.indices, vals, t, out, e).is_ok());
        // Every strict prefix: at most the first 600 and the last 600 (the
        // bitmap of 10^6 elements is long; the middle is all the same case).
        for (size_t len = 0; len < out.size(); ++len) {
          if (len > 600 && len + 600 < out.size()) continue;
          Bytes cut(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(len));
          ASSERT_FALSE(decode_sparse(cut, p.n, "topk").is_ok()) << "prefix " << len;
          if (p.n <= 4096) {
            std::vector<float> y(p.n, 7.0f);
            ASSERT_FALSE(decode_sparse_into(cut, t, "topk", nullptr, y).is_ok());
            for (float v : y) ASSERT_EQ(v, 7.0f);
          }
        }
        Bytes extra = out;
        extra.push_back(std::byte{0});
        expect_rejected(extra, p.n, "trailing");
        expect_rejected(out, p.n + 1, "elements");
        if (p.n > 0) expect_rejected(out, p.n - 1, "elements");
      }
    }
  }
}

TEST(SparseEncoding, RejectsMalformedIndices) {
  // Header for n = 10: version 1, varint indices, fp32, n, k.
  auto varint_payload = [](int k, std::initializer_list<int> index_bytes) {
    Bytes b = make_bytes({1, 0, 0, 10, k});
    for (int v : index_bytes) b.push_back(static_cast<std::byte>(v));
    for (int i = 0; i < k; ++i) append_f32(b, 1.0f);
    return b;
  };
  ASSERT_TRUE(decode_sparse(varint_payload(2, {3, 1}), 10, "topk").is_ok());  // 3, 4
  expect_rejected(varint_payload(2, {3, 0}), 10, "strictly increasing");      // 3, 3
  expect_rejected(varint_payload(1, {10}), 10, "not below n");                // index == n
  expect_rejected(varint_payload(2, {5, 5}), 10, "not below n");              // 5, 10
  // A gap that would wrap 64 bits: 5 + (2^64 - 1).
  expect_rejected(
      varint_payload(2, {5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), 10);
  // Varint overflow: 10 continuation bytes, and a 10th byte above 1.
  expect_rejected(
      varint_payload(1, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}), 10,
      "overflow");
  expect_rejected(varint_payload(1, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}),
                  10, "overflow");
  {
    Bytes b =
        make_bytes({1, 0, 0, 0x8a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0});
    expect_rejected(b, 10, "overflow");  // in n
  }
  expect_rejected(varint_payload(1, {0x83, 0x00}), 10, "non-canonical");  // 3 in two bytes
  // k > n, and a k larger than the payload could hold (refused before allocating).
  expect_rejected(make_bytes({1, 0, 0, 10, 11}), 10, "exceeds");
  {
    Bytes b = make_bytes({1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0xff, 0xff, 0xff, 0xff, 0x0f});
    expect_rejected(b, 0xffffffffu, "cannot hold");
  }
  // Unknown version, encoding, value type.
  expect_rejected(make_bytes({2, 0, 0, 10, 0}), 10, "version");
  expect_rejected(make_bytes({1, 3, 0, 10, 0}), 10, "encoding");
  expect_rejected(make_bytes({1, 0, 2, 10, 0}), 10, "value type");
  // An implicit (rand-k) payload carries no indices.
  expect_rejected(make_bytes({1, 2, 0, 10, 0}), 10, "no indices");
}

TEST(SparseEncoding, RejectsMalformedBitmaps) {
  auto bitmap_payload = [](int k, int b0, int b1, int values) {
    Bytes b = make_bytes({1, 1, 0, 10, k, b0, b1});
    for (int i = 0; i < values; ++i) append_f32(b, 2.0f);
    return b;
  };
  auto ok = decode_sparse(bitmap_payload(2, 0x21, 0x02, 2), 10, "topk");  // 0, 5, 9
  ASSERT_FALSE(ok.is_ok());  // three bits set for k = 2
  EXPECT_NE(ok.status().message().find("3 bits set"), std::string::npos);
  auto good = decode_sparse(bitmap_payload(3, 0x21, 0x02, 3), 10, "topk");
  ASSERT_TRUE(good.is_ok()) << good.status().message();
  EXPECT_EQ(good->indices, (std::vector<uint64_t>{0, 5, 9}));
  expect_rejected(bitmap_payload(4, 0x21, 0x02, 4), 10, "bits set");
  expect_rejected(bitmap_payload(3, 0x21, 0x06, 3), 10, "padding");  // bit 10 of n = 10
  expect_rejected(bitmap_payload(3, 0x21, 0x02, 2), 10, "truncated values");
  expect_rejected(bitmap_payload(3, 0x21, 0x02, 4), 10, "trailing");
}

TEST(SparseEncoding, SurvivesRandomGarbageAndMutations) {
  std::mt19937_64 rng(42);
  auto check_invariants = [](const SparseVector& v, uint64_t n) {
    ASSERT_EQ(v.indices.size(), v.values.size());
    for (size_t i = 0; i < v.indices.size(); ++i) {
      ASSERT_LT(v.indices[i], n);
      if (i) {
        ASSERT_GT(v.indices[i], v.indices[i - 1]);
      }
    }
  };
  for (int trial = 0; trial < 20000; ++trial) {
    Bytes b(rng() % 48);
    for (auto& c : b) c = static_cast<std::byte>(rng());
    if (b.size() >= 1 && trial % 2) b[0] = std::byte{1};  // get past the version now and then
    if (b.size() >= 2 && trial % 4 == 1) b[1] = static_cast<std::byte>(rng() % 2);
    if (b.size() >= 3 && trial % 4 == 1) b[2] = static_cast<std::byte>(rng() % 2);
    uint64_t n = rng() % 64;
    if (b.size() >= 4 && trial % 4 == 1) b[3] = static_cast<std::byte>(n);
    auto d = decode_sparse(b, n, "topk");
    if (d.is_ok()) check_invariants(*d, n);
    std::vector<float> y(n);
    (void)decode_sparse_into(b, ValueType::kF32, "topk", nullptr, y);
    std::vector<float> vals;
    (void)decode_sparse_values(b, n, rng() % (n + 1), ValueType::kF32, "randk", vals);
  }
  // Single-byte mutations of valid payloads.
  for (const auto& p : patterns()) {
    if (p.n > 1000) continue;
    std::vector<float> vals(p.indices.size(), -0.5f);
    for (auto e : {IndexEncoding::kVarint, IndexEncoding::kBitmap}) {
      Bytes out;
      ASSERT_TRUE(encode_sparse(p.n, p.indices, vals, ValueType::kF16, out, e).is_ok());
      for (int trial = 0; trial < 500 && !out.empty(); ++trial) {
        Bytes m = out;
        m[rng() % m.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
        auto d = decode_sparse(m, p.n, "topk");
        if (d.is_ok()) check_invariants(*d, p.n);
      }
    }
  }
}

TEST(SparseEncoding, ValuesOnlyForm) {
  std::vector<float> vals{1.0f, -2.0f, 1e6f, -1e6f};
  Bytes out;
  ASSERT_TRUE(encode_sparse_values(100, vals, ValueType::kF16, out).is_ok());
  EXPECT_EQ(out.size(), sparse_values_encoded_size(100, 4, ValueType::kF16));
  EXPECT_EQ(out.size(), 3u + 1 + 1 + 4 * 2);
  std::vector<float> got;
  ASSERT_TRUE(decode_sparse_values(out, 100, 4, ValueType::kF16, "randk", got).is_ok());
  // fp16 saturates finite values beyond its range.
  EXPECT_EQ(got, (std::vector<float>{1.0f, -2.0f, 65504.0f, -65504.0f}));
  EXPECT_FALSE(decode_sparse_values(out, 101, 4, ValueType::kF16, "randk", got).is_ok());
  EXPECT_FALSE(decode_sparse_values(out, 100, 3, ValueType::kF16, "randk", got).is_ok());
  EXPECT_FALSE(decode_sparse_values(out, 100, 4, ValueType::kF32, "randk", got).is_ok());
  for (size_t len = 0; len < out.size(); ++len)
    EXPECT_FALSE(
        decode_sparse_values(std::span(out).first(len), 100, 4, ValueType::kF16, "randk", got)
            .is_ok());
  Bytes extra = out;
  extra.push_back(std::byte{0});
  EXPECT_FALSE(decode_sparse_values(extra, 100, 4, ValueType::kF16, "randk", got).is_ok());
  // An explicit-index payload is not a rand-k payload.
  Bytes explicit_idx;
  ASSERT_TRUE(
      encode_sparse(100, std::vector<uint64_t>{1, 2, 3, 4}, vals, ValueType::kF16, explicit_idx)
          .is_ok());
  auto st = decode_sparse_values(explicit_idx, 100, 4, ValueType::kF16, "randk", got);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("randk"), std::string::npos);
}

// ---------------------------------------------------------------- top-k

TEST(Topk, SpecsAndProperties) {
  EXPECT_EQ(codec("topk:0.01")->spec(), "topk:0.01");
  EXPECT_EQ(codec("topk:0.01:approx:fp16")->spec(), "topk:0.01:approx:fp16");
  EXPECT_EQ(codec("topk:1:fp16")->spec(), "topk:1:fp16");
  EXPECT_EQ(make_topk(0.25, true, ValueType::kF32)->spec(), "topk:0.25:approx");
  EXPECT_TRUE(codec("topk:0.01")->biased());
  EXPECT_EQ(codec("topk:0.01")->id(), proto::CodecId::kTopk);
}

// Encodes with `spec`, checks the payload's size bound, decodes into y and checks
// y is x on the kept indices (fp16-rounded where asked) and zero elsewhere.
std::vector<uint64_t> topk_round_trip(const std::string& spec, const std::vector<float>& x,
                                      ThreadPool* pool = nullptr, uint64_t seed = 1) {
  auto c = codec(spec);
  CodecContext ctx{seed, pool};
  Bytes out;
  Status st = c->encode(x, ctx, out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_LE(out.size(), c->max_encoded_bytes(x.size()));
  auto idx = payload_indices(out, x.size());
  std::vector<float> y(x.size(), 5.0f);
  st = c->decode(out, ctx, y);
  EXPECT_TRUE(st.is_ok()) << st.message();
  bool fp16 = spec.find("fp16") != std::string::npos;
  size_t j = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (j < idx.size() && idx[j] == i) {
      float want = fp16 ? fp16_to_float(float_to_fp16(x[i])) : x[i];
      EXPECT_EQ(y[i], want) << i;
      ++j;
    } else if (y[i] != 0.0f) {
      ADD_FAILURE() << "y[" << i << "] = " << y[i] << " outside the kept set";
      break;
    }
  }
  return idx;
}

TEST(Topk, ExactMatchesSortReference) {
  int seed = 0;
  for (size_t n : {0, 1, 2, 3, 7, 100, 1001, 65537, 200003}) {
    for (double r : {0.001, 0.01, 0.1, 0.5, 1.0}) {
      auto x = gaussian(n, static_cast<uint64_t>(++seed));
      std::string spec = fmt::format("topk:{}", r);
      SCOPED_TRACE(spec + " n=" + std::to_string(n));
      EXPECT_EQ(topk_round_trip(spec, x), reference_topk(x, sparse_count(r, n)));
      EXPECT_EQ(topk_round_trip(spec + ":fp16", x), reference_topk(x, sparse_count(r, n)));
    }
  }
}

TEST(Topk, ExactTiesZerosAndConstants) {
  std::mt19937 rng(7);
  for (size_t n : {5, 64, 999, 150001}) {
    std::vector<float> ties(n), zeros(n, 0.0f), constant(n, -2.5f), signed_zero(n);
    for (auto& v : ties) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);  // -3..3
    for (size_t i = 0; i < n; ++i) signed_zero[i] = i % 2 ? -0.0f : 0.0f;
    for (const auto* x : {&ties, &zeros, &constant, &signed_zero}) {
      for (double r : {0.01, 0.3, 1.0}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " r=" << r);
        EXPECT_EQ(topk_round_trip(fmt::format("topk:{}", r), *x),
                  reference_topk(*x, sparse_count(r, n)));
      }
    }
  }
  // Constants: ties to the lower index means the first k.
  std::vector<float> c(1000, 1.0f);
  auto idx = topk_round_trip("topk:0.01", c);
  EXPECT_EQ(idx, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // Magnitudes that differ only in the lowest mantissa bit, and denormals.
  std::vector<float> close{1.0f, std::nextafter(1.0f, 2.0f), -std::nextafter(1.0f, 2.0f), 1e-45f,
                           -1e-40f};
  EXPECT_EQ(topk_round_trip("topk:0.4", close), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(topk_round_trip("topk:0.6", close), (std::vector<uint64_t>{0, 1, 2}));
}

TEST(Topk, NonFiniteInputFailsNamingTheFirstIndex) {
  for (const char* spec : {"topk:0.01", "topk:0.01:approx"}) {
    for (size_t n : {100, 200000}) {
      auto x = gaussian(n, 3);
      x[n / 2] = std::numeric_limits<float>::quiet_NaN();
      x[17] = -std::numeric_limits<float>::infinity();
      x[n - 1] = std::numeric_limits<float>::infinity();
      Bytes out;
      Status st = codec(spec)->encode(x, CodecContext{1, nullptr}, out);
      ASSERT_FALSE(st.is_ok()) << spec;
      EXPECT_EQ(st.code(), Status::Code::kInvalid);
      EXPECT_NE(st.message().find("x[17]"), std::string::npos) << st.message();
      // A single NaN, which the sample rarely sees.
      x = gaussian(n, 4);
      x[n - 3] = -std::numeric_limits<float>::quiet_NaN();
      st = codec(spec)->encode(x, CodecContext{1, nullptr}, out);
      ASSERT_FALSE(st.is_ok()) << spec;
      EXPECT_NE(st.message().find(fmt::format("x[{}]", n - 3)), std::string::npos) << st.message();
    }
  }
}

TEST(Topk, DecodeChecksCountAndValueType) {
  auto x = gaussian(1000, 5);
  Bytes out;
  ASSERT_TRUE(codec("topk:0.1")->encode(x, {}, out).is_ok());
  std::vector<float> y(1000, 3.0f);
  Status st = codec("topk:0.01")->decode(out, {}, y);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), Status::Code::kProtocol);
  EXPECT_NE(st.message().find("topk"), std::string::npos);
  EXPECT_FALSE(codec("topk:0.1:fp16")->decode(out, {}, y).is_ok());
  std::vector<float> wrong_n(999);
  EXPECT_FALSE(codec("topk:0.1")->decode(out, {}, wrong_n).is_ok());
  for (float v : y) ASSERT_EQ(v, 3.0f);
  EXPECT_TRUE(codec("topk:0.1")->decode(out, {}, y).is_ok());
}

TEST(Topk, ApproximateCountWithinToleranceAndTopMagnitudes) {
  // Tolerance: the count is in [k - floor(k/10), k], and what is kept is always the
  // largest (so recall against exact is count / k >= 90%).
  std::mt19937_64 rng(11);
  double worst_recall = 1.0;
  int exactly_k = 0, runs = 0;
  for (size_t n : {65536, 100003, 400000}) {
    for (int dist = 0; dist < 4; ++dist) {
      std::vector<float> x = gaussian(n, n + dist);
      if (dist == 1)  // heavy tails
        for (auto& v : x) v = v * v * v;
      if (dist == 2)  // few distinct values: many ties at the threshold
        for (auto& v : x) v = std::round(v * 2.0f);
      if (dist == 3)  // mostly zeros, a few hundred spikes
        for (size_t i = 0; i < n; ++i) x[i] = rng() % 200 == 0 ? x[i] : 0.0f;
      auto order = magnitude_order(x);
      for (double r : {0.001, 0.01, 0.05}) {
        uint64_t k = sparse_count(r, n);
        std::vector<bool> in_exact(n, false);
        for (uint64_t i = 0; i < k; ++i) in_exact[order[i]] = true;
        for (uint64_t seed = 0; seed < 6; ++seed) {
          SCOPED_TRACE(::testing::Message()
                       << "n=" << n << " dist=" << dist << " r=" << r << " seed=" << seed);
          auto idx = topk_round_trip(fmt::format("topk:{}:approx", r), x, nullptr, seed);
          ASSERT_GE(idx.size(), k - k / 10);
          ASSERT_LE(idx.size(), k);
          ++runs;
          exactly_k += idx.size() == k;
          // Every kept magnitude >= every dropped one.
          std::vector<bool> kept(n, false);
          float min_kept = std::numeric_limits<float>::infinity(), max_dropped = 0.0f;
          for (uint64_t i : idx) kept[i] = true;
          for (size_t i = 0; i < n; ++i) {
            if (kept[i])
              min_kept = std::min(min_kept, std::fabs(x[i]));
            else
              max_dropped = std::max(max_dropped, std::fabs(x[i]));
          }
          EXPECT_GE(min_kept, max_dropped);
          size_t hit = 0;
          for (uint64_t i : idx) hit += in_exact[i];
          double recall = static_cast<double>(hit) / static_cast<double>(k);
          worst_recall = std::min(worst_recall, recall);
          EXPECT_GE(recall, 0.9);
        }
      }
    }
  }
  std::printf("[ approx  ] %d runs, %d with exactly k, worst recall vs exact %.4f\n", runs,
              exactly_k, worst_recall);
}

TEST(Topk, SameResultWithOneAndTwoThreads) {
  ThreadPool one(1), two(2);
  auto x = gaussian(1 << 20, 21);
  for (int i = 0; i < 1000; ++i) x[static_cast<size_t>(i) * 997] = 3.25f;  // ties across ranges
  for (const char* spec :
       {"topk:0.01", "topk:0.01:approx", "topk:0.2:fp16", "topk:0.003:approx:fp16"}) {
    auto c = codec(spec);
    Bytes a, b, s;
    ASSERT_TRUE(c->encode(x, CodecContext{9, &one}, a).is_ok());
    ASSERT_TRUE(c->encode(x, CodecContext{9, &two}, b).is_ok());
    ASSERT_TRUE(c->encode(x, CodecContext{9, nullptr}, s).is_ok());
    EXPECT_EQ(a, b) << spec;
    EXPECT_EQ(a, s) << spec;
    std::vector<float> ya(x.size()), yb(x.size());
    ASSERT_TRUE(c->decode(a, CodecContext{9, &one}, ya).is_ok());
    ASSERT_TRUE(c->decode(a, CodecContext{9, &two}, yb).is_ok());
    EXPECT_EQ(ya, yb) << spec;
  }
  EXPECT_EQ(topk_round_trip("topk:0.01", x, &two), reference_topk(x, sparse_count(0.01, x.size())));
}

TEST(Topk, CompressionOfOnePercent) {
  const size_t n = 1 << 20;
  auto x = gaussian(n, 31);
  uint64_t k = sparse_count(0.01, n);
  for (const char* spec : {"topk:0.01", "topk:0.01:fp16"}) {
    Bytes out;
    ASSERT_TRUE(codec(spec)->encode(x, {}, out).is_ok());
    double per_kept = static_cast<double>(out.size()) / static_cast<double>(k);
    double reduction = static_cast<double>(n * 4) / static_cast<double>(out.size());
    std::printf(
        "[ ratio   ] %s, n = %zu, k = %llu: %zu bytes, %.3f bytes per kept element, %.1fx smaller "
        "than fp32\n",
        spec, n, static_cast<unsigned long long>(k), out.size(), per_kept, reduction);
    bool fp16 = std::string(spec).find("fp16") != std::string::npos;
    EXPECT_GT(per_kept, fp16 ? 3.0 : 5.0);
    EXPECT_LT(per_kept, fp16 ? 4.0 : 6.0);
  }
}

TEST(Topk, TimingExactVersusApproximate) {
  const size_t n = 25'000'000;
  auto x = bell(n, 5);
  auto exact = codec("topk:0.01"), approx = codec("topk:0.01:approx");
  uint64_t k = sparse_count(0.01, n);
  for (size_t threads : {1, 2}) {
    ThreadPool pool(threads);
    CodecContext ctx{3, &pool};
    auto time = [&](const Codec& c, Bytes& out) {
      double best = 1e9;
      for (int rep = 0; rep < 2; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_TRUE(c.encode(x, ctx, out).is_ok());
        best = std::min(
            best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count());
      }
      return best;
    };
    Bytes a, b;
    double te = time(*exact, a), ta = time(*approx, b);
    auto ia = payload_indices(b, n);
    EXPECT_GE(ia.size(), k - k / 10);
    EXPECT_LE(ia.size(), k);
    std::printf(
        "[ timing  ] topk 1%% of %zu, %zu thread(s): exact %.1f ms, approx %.1f ms (%.1fx), approx "
        "kept %zu of %llu\n",
        n, threads, te, ta, te / ta, ia.size(), static_cast<unsigned long long>(k));
  }
  // For scale: a textbook exact selection, std::nth_element on the magnitudes.
  std::vector<float> mag(n);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) mag[i] = std::fabs(x[i]);
  std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(k - 1), mag.end(),
                   std::greater<>());
  double tn =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timing  ] std::nth_element on |x| (selection only, 1 thread): %.1f ms\n", tn);
}

// ---------------------------------------------------------------- rand-k

TEST(Randk, SpecsAndProperties) {
  EXPECT_EQ(codec("randk:0.05")->spec(), "randk:0.05");
  EXPECT_EQ(codec("randk:0.1:fp16")->spec(), "randk:0.1:fp16");
  EXPECT_FALSE(codec("randk:0.05")->biased());
  EXPECT_EQ(codec("randk:0.05")->id(), proto::CodecId::kRandk);
}

// The kept set, read off a decode of an all-ones vector (each kept entry is n/k).
std::vector<uint64_t> randk_set(const Codec& c, size_t n, uint64_t seed,
                                ThreadPool* pool = nullptr) {
  std::vector<float> ones(n, 1.0f), y(n, 4.0f);
  Bytes out;
  EXPECT_TRUE(c.encode(ones, CodecContext{seed, pool}, out).is_ok());
  EXPECT_EQ(out.size(), c.max_encoded_bytes(n));
  EXPECT_TRUE(c.decode(out, CodecContext{seed, pool}, y).is_ok());
  std::vector<uint64_t> set;
  for (size_t i = 0; i < n; ++i)
    if (y[i] != 0.0f) set.push_back(i);
  return set;
}

TEST(Randk, DistinctIndicesInRangeFromTheSeedAlone) {
  for (size_t n : {1, 2, 10, 1000, 4097}) {
    for (double r : {0.01, 0.3, 0.9, 1.0}) {
      auto c = make_randk(r, ValueType::kF32);
      uint64_t k = sparse_count(r, n);
      auto s1 = randk_set(*c, n, 77);
      EXPECT_EQ(s1.size(), k) << n << " " << r;  // k distinct, in range by construction
      EXPECT_EQ(randk_set(*c, n, 77), s1);
      if (k < n && n >= 10) {
        EXPECT_NE(randk_set(*c, n, 78), s1) << n << " " << r;
      }
    }
  }
  // The values land where the sender took them, scaled by n/k.
  const size_t n = 10000;
  auto x = gaussian(n, 8);
  for (const char* spec : {"randk:0.01", "randk:0.01:fp16"}) {
    auto c = codec(spec);
    Bytes out;
    ASSERT_TRUE(c->encode(x, CodecContext{5, nullptr}, out).is_ok());
    std::vector<float> y(n);
    ASSERT_TRUE(c->decode(out, CodecContext{5, nullptr}, y).is_ok());
    auto set = randk_set(*c, n, 5);
    bool fp16 = std::string(spec).find("fp16") != std::string::npos;
    size_t j = 0;
    for (size_t i = 0; i < n; ++i) {
      if (j < set.size() && set[j] == i) {
        float v = fp16 ? fp16_to_float(float_to_fp16(x[i])) : x[i];
        EXPECT_FLOAT_EQ(y[i], v * 100.0f);
        ++j;
      } else {
        ASSERT_EQ(y[i], 0.0f);
      }
    }
  }
  // n = 0 and ratio 1 (all kept, scale 1: exact).
  std::vector<float> empty;
  Bytes out;
  ASSERT_TRUE(codec("randk:0.5")->encode(empty, {}, out).is_ok());
  EXPECT_TRUE(codec("randk:0.5")->decode(out, {}, empty).is_ok());
  auto y = x;
  ASSERT_TRUE(codec("randk:1")->encode(x, {}, out).is_ok());
  ASSERT_TRUE(codec("randk:1")->decode(out, {}, y).is_ok());
  EXPECT_EQ(y, x);
}

TEST(Randk, UnbiasedAndUniform) {
  const size_t n = 64;
  const int seeds = 20000;
  auto x = gaussian(n, 9);
  auto c = codec("randk:0.25");  // k = 16, scale 4
  std::vector<double> sum(n, 0.0);
  std::vector<int> hits(n, 0);
  Bytes out;
  std::vector<float> y(n);
  for (int s = 0; s < seeds; ++s) {
    CodecContext ctx{static_cast<uint64_t>(s) * 1000003, nullptr};
    ASSERT_TRUE(c->encode(x, ctx, out).is_ok());
    ASSERT_TRUE(c->decode(out, ctx, y).is_ok());
    for (size_t i = 0; i < n; ++i) {
      sum[i] += y[i];
      hits[i] += y[i] != 0.0f;
    }
  }
  // Each y_i is 4 x_i with probability 1/4: the mean has sd sqrt(3/seeds) |x_i|
  // (0.012 |x_i|); each hit count has mean 5000 and sd 61.
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(sum[i] / seeds, x[i], 0.06 * std::fabs(x[i]) + 1e-6) << i;
    EXPECT_NEAR(hits[i], seeds / 4, 300) << i;
  }
}

TEST(Randk, DecodeRejectsBadPayloads) {
  const size_t n = 1000;
  auto x = gaussian(n, 10);
  Bytes out;
  ASSERT_TRUE(codec("randk:0.1")->encode(x, CodecContext{3, nullptr}, out).is_ok());
  std::vector<float> y(n, 6.0f);
  auto reject = [&](const Codec& c, std::span<const std::byte> p, std::span<float> yy) {
    Status st = c.decode(p, CodecContext{3, nullptr}, yy);
    EXPECT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), Status::Code::kProtocol);
    EXPECT_NE(st.message().find("randk"), std::string::npos) << st.message();
  };
  auto c = codec("randk:0.1");
  for (size_t len = 0; len < out.size(); ++len) reject(*c, std::span(out).first(len), y);
  Bytes extra = out;
  extra.push_back(std::byte{1});
  reject(*c, extra, y);
  reject(*codec("randk:0.2"), out, y);       // another k
  reject(*codec("randk:0.1:fp16"), out, y);  // another value type
  std::vector<float> other(n + 1, 6.0f);
  reject(*c, out, other);  // another n
  Bytes topk;
  ASSERT_TRUE(codec("topk:0.1")->encode(x, {}, topk).is_ok());
  reject(*c, topk, y);  // explicit indices
  for (float v : y) ASSERT_EQ(v, 6.0f);
  for (float v : other) ASSERT_EQ(v, 6.0f);
}

TEST(Randk, SameResultWithOneAndTwoThreads) {
  ThreadPool one(1), two(2);
  auto x = gaussian(1 << 20, 12);
  auto c = codec("randk:0.01:fp16");
  Bytes a, b;
  ASSERT_TRUE(c->encode(x, CodecContext{4, &one}, a).is_ok());
  ASSERT_TRUE(c->encode(x, CodecContext{4, &two}, b).is_ok());
  EXPECT_EQ(a, b);
  std::vector<float> ya(x.size()), yb(x.size());
  ASSERT_TRUE(c->decode(a, CodecContext{4, &one}, ya).is_ok());
  ASSERT_TRUE(c->decode(a, CodecContext{4, &two}, yb).is_ok());
  EXPECT_EQ(ya, yb);
}

}  // namespace
}  // namespace gossip::compression

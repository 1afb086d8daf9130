// The math the CUDA kernels run (compression/cuda/device_math.h, compression/randk_indices.h),
// run here on the CPU and compared bit for bit with the CPU codecs' payloads and
// decoded values. The emulations below call the per-thread functions the way the
// kernels do (one call per element, block, byte of bits or group of codes; the
// top-k radix rounds and tile compaction step by step), so without a GPU only the
// kernels' launches, indexing and atomics go unchecked. Runs in every build.

#include "compression/cuda/device_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/split_mix64.h"
#include "compression/codec.h"
#include "compression/randk_indices.h"
#include "compression/sparse_encoding.h"

namespace gossip::compression::cuda {
namespace {

using Bytes = std::vector<std::byte>;

constexpr float kFltMax = std::numeric_limits<float>::max();
constexpr float kFltMin = std::numeric_limits<float>::min();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint64_t kNoBad = ~uint64_t{0};

uint8_t* u8(Bytes& b) { return reinterpret_cast<uint8_t*>(b.data()); }
const uint8_t* u8(const Bytes& b) { return reinterpret_cast<const uint8_t*>(b.data()); }
uint64_t blocks(uint64_t n, uint64_t block) { return (n + block - 1) / block; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

// The first index where two byte strings differ, for failure messages.
std::string first_difference(const Bytes& a, const Bytes& b) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return "byte " + std::to_string(i) + ": " + std::to_string(std::to_integer<int>(a[i])) +
             " vs " + std::to_string(std::to_integer<int>(b[i]));
  return "equal";
}

// ---------------------------------------------------------------------------
// Inputs: random data at several scales and the cases that break conversions.

std::vector<float> normal(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(gen) * scale;
  return x;
}

std::vector<float> random_bits(size_t n, uint64_t seed, bool finite_only) {
  std::mt19937_64 gen(seed);
  std::vector<float> x(n);
  for (auto& v : x) {
    do {
      v = bits_f32(static_cast<uint32_t>(gen()));
    } while (finite_only && !std::isfinite(v));
  }
  return x;
}

// Finite values that sit on rounding boundaries of the codecs.
std::vector<float> adversarial_finite() {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          kDenormMin,
                          -kDenormMin,
                          kFltMin,
                          -kFltMin,
                          kFltMax,
                          -kFltMax,
                          1.0f,
                          -1.0f,
                          0.5f,
                          1.5f,
                          2.5f,
                          -2.5f,
                          126.5f,
                          -126.5f,
                          127.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -65520.0f,
                          0x1p-24f,
                          0x1p-25f,
                          3 * 0x1p-25f,
                          0x1p-14f,
                          0x1.ff8p-15f,
                          1 + 0x1p-11f,
                          1 + 3 * 0x1p-11f,
                          1 + 0x1p-8f,
                          1 + 3 * 0x1p-8f,
                          0x1p-126f * 127,
                          0x1p-149f * 127,
                          kFltMax / 127,
                          3e38f,
                          -3e38f,
                          1e-40f,
                          1e-45f};
  for (int e = -149; e <= 127; e += 7) {
    x.push_back(std::ldexp(1.0f, e));
    x.push_back(-std::ldexp(1.5f, e > 126 ? 126 : e));
  }
  return x;
}

struct DataSet {
  std::string name;
  std::vector<float> x;
};

// Finite data sets of many lengths and shapes.
std::vector<DataSet> finite_sets() {
  std::vector<DataSet> sets;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{255}, size_t{256},
                   size_t{257}, size_t{1001}, size_t{4099}})
    sets.push_back({"normal" + std::to_string(n), normal(n, n + 1, 1.0f)});
  sets.push_back({"tiny", normal(3000, 2, 1e-39f)});
  sets.push_back({"huge", normal(3000, 3, 1e37f)});
  sets.push_back({"bits", random_bits(5000, 4, true)});
  auto adv = adversarial_finite();
  sets.push_back({"adversarial", adv});
  std::vector<float> rep;
  for (int r = 0; r < 40; ++r) rep.insert(rep.end(), adv.begin(), adv.end());
  std::shuffle(rep.begin(), rep.end(), std::mt19937_64(5));
  sets.push_back({"adversarial_shuffled", rep});
  sets.push_back({"zeros", std::vector<float>(777, 0.0f)});
  sets.push_back({"negative_zeros", std::vector<float>(777, -0.0f)});
  sets.push_back({"constant", std::vector<float>(1000, 0.3f)});
  std::vector<float> halves(1024);
  for (size_t i = 0; i < halves.size(); ++i)
    halves[i] = static_cast<float>(static_cast<int>(i % 255) - 127) + 0.5f;
  halves[0] = 127.0f;  // absmax 127 in the first block: scale 1, so every x / scale is a tie
  sets.push_back({"int8_ties", halves});
  std::vector<float> few_levels(3000);
  for (size_t i = 0; i < few_levels.size(); ++i)
    few_levels[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
  sets.push_back({"few_levels", few_levels});
  // The boundary values without those whose squares overflow a qsgd bucket's norm,
  // and zeros of both signs among normal data (qsgd codes a sign for them).
  std::vector<float> moderate;
  for (float v : rep)
    if (std::fabs(v) < 1e30f) moderate.push_back(v);
  sets.push_back({"adversarial_moderate", moderate});
  auto zeros_mixed = normal(2000, 6, 1.0f);
  for (size_t i = 0; i < zeros_mixed.size(); i += 3) zeros_mixed[i] = i % 2 ? -0.0f : 0.0f;
  sets.push_back({"zeros_mixed", zeros_mixed});
  // Blocks of four whose double sum rounds differently in another order (sign,
  // block 4: 4 + 2^-22 + 3*2^-53 + 3*2^-53 gives mean 1 in index order, 1 + 2^-23
  // from the back) and buckets of eight whose norm does (qsgd, bucket 8: the norm
  // is the fp32 tie 2 + 2^-23 in index order and just above it from the back).
  std::vector<float> order;
  for (int r = 0; r < 64; ++r) {
    for (float v : {4.0f, 0x1p-22f, 3 * 0x1p-53f, 3 * 0x1p-53f}) order.push_back(r % 2 ? -v : v);
    for (float v : {2.0f, 0x1p-11f, 0x1p-11f, 0x1p-23f, 0.67f * 0x1p-25f, 0.67f * 0x1p-25f,
                    0.67f * 0x1p-25f, 0.67f * 0x1p-25f})
      order.push_back(v);
  }
  sets.push_back({"summation_order", order});
  return sets;
}

// ---------------------------------------------------------------------------
// Emulations of the dense kernels (dense_kernels.cu), one loop per kernel.

Bytes emulate_half_encode(const std::vector<float>& x, bool bf16) {
  Bytes out(2 * x.size());
  for (uint64_t i = 0; i < x.size(); ++i)
    store_le16(u8(out) + 2 * i, bf16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]));
  return out;
}

// int8 (sign = false) and sign: block_scales_kernel, then int8_values_kernel or
// sign_bits_kernel.
Bytes emulate_scaled_encode(const std::vector<float>& x, uint32_t block, bool sign,
                            uint64_t& first_bad) {
  const uint64_t n = x.size(), nb = blocks(n, block);
  Bytes out(4 * nb + (sign ? (n + 7) / 8 : n));
  first_bad = kNoBad;
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * block, hi = std::min<uint64_t>(n, lo + block);
    BlockScale s = sign ? sign_block_scale(x.data(), lo, hi) : int8_block_scale(x.data(), lo, hi);
    if (!s.finite) {
      first_bad = std::min(first_bad, b);
      s.scale = 0.0f;
    }
    store_f32le(u8(out) + 4 * b, s.scale);
  }
  if (sign) {
    for (uint64_t g = 0; g < (n + 7) / 8; ++g) u8(out)[4 * nb + g] = sign_pack_byte(x.data(), n, g);
  } else {
    for (uint64_t i = 0; i < n; ++i)
      u8(out)[4 * nb + i] = int8_quantize(x[i], load_f32le(u8(out) + 4 * (i / block)));
  }
  return out;
}

Bytes emulate_qsgd_encode(const std::vector<float>& x, QsgdShape q, uint64_t seed,
                          uint64_t& first_bad) {
  const uint64_t n = x.size(), nb = blocks(n, q.bucket);
  Bytes out(4 * nb + (n * q.bits + 7) / 8);
  first_bad = kNoBad;
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * q.bucket, hi = std::min<uint64_t>(n, lo + q.bucket);
    BucketNorm s = qsgd_bucket_norm(x.data(), lo, hi);
    if (s.status != kNormOk) {
      first_bad = std::min(first_bad, b);
      s.norm = 0.0f;
    }
    store_f32le(u8(out) + 4 * b, s.norm);
  }
  const uint64_t key = stream_key(seed);
  for (uint64_t g = 0; g < (n + 7) / 8; ++g)
    qsgd_encode_group(x.data(), n, g, u8(out), q, key, u8(out) + 4 * nb + g * q.bits);
  return out;
}

// The check kernels: bad[0] first invalid scale, bad[1] int8 -128 / padding (0),
// bad[2] first qsgd level above S.
struct Verdict {
  uint64_t bad[3] = {kNoBad, kNoBad, kNoBad};
  bool ok() const { return bad[0] == kNoBad && bad[1] == kNoBad && bad[2] == kNoBad; }
};

Verdict emulate_int8_check(const Bytes& in, uint64_t n, uint32_t block) {
  Verdict v;
  const uint64_t nb = blocks(n, block);
  for (uint64_t i = 0; i < n; ++i) {
    if (i < nb && !int8_scale_valid(load_f32le(u8(in) + 4 * i))) v.bad[0] = std::min(v.bad[0], i);
    if (u8(in)[4 * nb + i] == 0x80) v.bad[1] = std::min(v.bad[1], i);
  }
  return v;
}

Verdict emulate_sign_check(const Bytes& in, uint64_t n, uint32_t block) {
  Verdict v;
  const uint64_t nb = blocks(n, block);
  for (uint64_t b = 0; b < nb; ++b)
    if (!sign_scale_valid(load_f32le(u8(in) + 4 * b))) v.bad[0] = std::min(v.bad[0], b);
  if (n > 0 && !padding_clear(u8(in)[4 * nb + (n - 1) / 8], n)) v.bad[1] = 0;
  return v;
}

Verdict emulate_qsgd_check(const Bytes& in, uint64_t n, QsgdShape q) {
  Verdict v;
  const uint64_t nb = blocks(n, q.bucket);
  for (uint64_t b = 0; b < nb; ++b)
    if (!qsgd_norm_valid(load_f32le(u8(in) + 4 * b))) v.bad[0] = std::min(v.bad[0], b);
  const uint8_t* codes = u8(in) + 4 * nb;
  const uint64_t used_bits = n * q.bits;
  if (n > 0 && !padding_clear(codes[(used_bits - 1) / 8], used_bits)) v.bad[1] = 0;
  for (uint64_t g = 0; g < (n + 7) / 8; ++g)
    qsgd_for_each_code(codes + g * q.bits, n, g, q.bits, [&](uint64_t i, uint64_t code) {
      if (!qsgd_level_valid(code, q)) v.bad[2] = std::min(v.bad[2], i);
    });
  return v;
}

std::vector<float> emulate_dense_decode(const Bytes& in, uint64_t n, proto::CodecId id,
                                        uint32_t block, QsgdShape q) {
  std::vector<float> y(n);
  if (id == proto::CodecId::kFp16 || id == proto::CodecId::kBf16) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint16_t h = load_le16(u8(in) + 2 * i);
      y[i] = id == proto::CodecId::kBf16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  } else if (id == proto::CodecId::kInt8) {
    const uint64_t nb = blocks(n, block);
    for (uint64_t i = 0; i < n; ++i)
      y[i] = int8_dequantize(u8(in)[4 * nb + i], load_f32le(u8(in) + 4 * (i / block)));
  } else if (id == proto::CodecId::kSign) {
    const uint64_t nb = blocks(n, block);
    for (uint64_t i = 0; i < n; ++i)
      y[i] = sign_decode_element(u8(in) + 4 * nb, i, load_f32le(u8(in) + 4 * (i / block)));
  } else {
    const uint64_t nb = blocks(n, q.bucket);
    for (uint64_t g = 0; g < (n + 7) / 8; ++g)
      qsgd_for_each_code(
          u8(in) + 4 * nb + g * q.bits, n, g, q.bits, [&](uint64_t i, uint64_t code) {
            y[i] = qsgd_decode_value(code, load_f32le(u8(in) + 4 * (i / q.bucket)), q);
          });
  }
  return y;
}

// ---------------------------------------------------------------------------
// Helpers around the CPU codecs.

Bytes cpu_encode(const Codec& c, const std::vector<float>& x, uint64_t seed, Status& st) {
  Bytes out;
  CodecContext ctx;
  ctx.seed = seed;
  st = c.encode(x, ctx, out);
  return out;
}

// The element index a CPU "non-finite element N (...)" message names.
uint64_t named_element(const Status& st) {
  const std::string& m = st.message();
  size_t at = m.find("element ");
  if (at == std::string::npos) return kNoBad;
  return std::stoull(m.substr(at + 8));
}

// Dense decode on both sides: same verdict; when accepted, the same floats.
void expect_same_decode(const Codec& c, const Bytes& payload, uint64_t n, proto::CodecId id,
                        uint32_t block, QsgdShape q, const std::string& what) {
  std::vector<float> cpu(n, 12345.0f);
  const Status st = c.decode(payload, {}, cpu);
  Verdict v;
  if (id == proto::CodecId::kInt8) v = emulate_int8_check(payload, n, block);
  if (id == proto::CodecId::kSign) v = emulate_sign_check(payload, n, block);
  if (id == proto::CodecId::kQsgd) v = emulate_qsgd_check(payload, n, q);
  ASSERT_EQ(st.is_ok(), v.ok()) << what << ": " << st.message();
  if (!st.is_ok()) {
    // The same check fires first, in the CPU's order: scales, then padding or -128, then levels.
    const std::string& m = st.message();
    if (v.bad[0] != kNoBad) {
      EXPECT_NE(m.find(" " + std::to_string(v.bad[0]) + " has invalid"), std::string::npos)
          << what << ": " << m;
    } else if (v.bad[1] != kNoBad) {
      EXPECT_NE(
          m.find(id == proto::CodecId::kInt8 ? "element " + std::to_string(v.bad[1]) + " is -128"
                                             : "padding"),
          std::string::npos)
          << what << ": " << m;
    } else {
      EXPECT_NE(m.find("element " + std::to_string(v.bad[2]) + " has level"), std::string::npos)
          << what << ": " << m;
    }
    return;
  }
  EXPECT_TRUE(same_bits(cpu, emulate_dense_decode(payload, n, id, block, q))) << what;
}

// ---------------------------------------------------------------------------
// fp16 / bf16

TEST(DeviceMath, HalfDecodeEveryCode) {
  Bytes all(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) store_le16(u8(all) + 2 * h, static_cast<uint16_t>(h));
  for (bool bf16 : {false, true}) {
    auto codec = bf16 ? make_bf16() : make_fp16();
    std::vector<float> cpu(65536);
    ASSERT_TRUE(codec->decode(all, {}, cpu).is_ok());
    auto dev = emulate_dense_decode(all, 65536,
                                    bf16 ? proto::CodecId::kBf16 : proto::CodecId::kFp16, 1, {});
    for (uint32_t h = 0; h < 65536; ++h)
      ASSERT_EQ(f32_bits(cpu[h]), f32_bits(dev[h])) << codec->spec() << " code " << h;
  }
}

TEST(DeviceMath, HalfEncodeRoundingBoundaries) {
  // Every high half-word with the low bits that decide rounding (ties, one either
  // side, all ones) for fp16 (13 dropped bits) and bf16 (16), then random patterns
  // (inf and NaN included: they pass through).
  std::vector<float> x;
  const uint32_t lows[] = {0x0000, 0x0001, 0x07ff, 0x0800, 0x0fff, 0x1000, 0x1001, 0x17ff,
                           0x1800, 0x1fff, 0x2000, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xffff};
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : lows) x.push_back(bits_f32(hi << 16 | lo));
  auto rnd = random_bits(1 << 20, 7, false);
  x.insert(x.end(), rnd.begin(), rnd.end());
  for (bool bf16 : {false, true}) {
    auto codec = bf16 ? make_bf16() : make_fp16();
    Status st;
    Bytes cpu = cpu_encode(*codec, x, 0, st);
    ASSERT_TRUE(st.is_ok());
    Bytes dev = emulate_half_encode(x, bf16);
    ASSERT_EQ(cpu, dev) << codec->spec() << ": " << first_difference(cpu, dev);
  }
}

// ---------------------------------------------------------------------------
// int8 and sign

void check_scaled_codec(bool sign, uint32_t block, const DataSet& set) {
  auto codec = sign ? make_sign(block) : make_int8(block);
  const std::string what = codec->spec() + " on " + set.name;
  Status st;
  Bytes cpu = cpu_encode(*codec, set.x, 0, st);
  uint64_t first_bad = kNoBad;
  Bytes dev = emulate_scaled_encode(set.x, block, sign, first_bad);
  ASSERT_EQ(st.is_ok(), first_bad == kNoBad) << what << ": " << st.message();
  if (!st.is_ok()) {
    EXPECT_EQ(named_element(st) / block, first_bad) << what << ": " << st.message();
    return;
  }
  ASSERT_EQ(cpu, dev) << what << ": " << first_difference(cpu, dev);
  expect_same_decode(*codec, cpu, set.x.size(),
                     sign ? proto::CodecId::kSign : proto::CodecId::kInt8, block, {}, what);
}

TEST(DeviceMath, Int8AndSignEncodeLikeTheCpu) {
  for (const DataSet& set : finite_sets())
    for (uint32_t block : {1u, 3u, 4u, 8u, 256u, 1000u})
      for (bool sign : {false, true}) check_scaled_codec(sign, block, set);
}

TEST(DeviceMath, Int8AndSignRefuseNonFiniteInTheSameBlock) {
  for (float bad : {kInf, -kInf, kNaN, -kNaN}) {
    for (size_t at : {size_t{0}, size_t{5}, size_t{300}, size_t{999}}) {
      DataSet set{"non-finite at " + std::to_string(at), normal(1000, at, 1.0f)};
      set.x[at] = bad;
      if (at > 500) set.x[at - 400] = bad;  // the first one decides
      for (uint32_t block : {1u, 7u, 256u})
        for (bool sign : {false, true}) check_scaled_codec(sign, block, set);
    }
  }
}

// Mutated scales and values: the check functions accept exactly what the CPU
// decoders accept, and decode the same floats.
TEST(DeviceMath, Int8AndSignDecodeChecksMatchTheCpu) {
  const float scales[] = {0.0f,
                          -0.0f,
                          kNaN,
                          -kNaN,
                          kInf,
                          -kInf,
                          -1.0f,
                          kFltMax,
                          kFltMax / 127,
                          std::nextafter(kFltMax / 127, kInf),
                          std::nextafter(kFltMax / 127, 0.0f),
                          kDenormMin,
                          1.0f,
                          3e36f};
  std::mt19937_64 gen(11);
  for (bool sign : {false, true}) {
    for (uint32_t block : {1u, 5u, 256u}) {
      for (uint64_t n : {uint64_t{1}, uint64_t{13}, uint64_t{700}}) {
        auto codec = sign ? make_sign(block) : make_int8(block);
        Status st;
        const Bytes good = cpu_encode(*codec, normal(n, n, 2.0f), 0, st);
        ASSERT_TRUE(st.is_ok());
        const auto id = sign ? proto::CodecId::kSign : proto::CodecId::kInt8;
        const uint64_t nb = blocks(n, block);
        for (float s : scales) {
          Bytes p = good;
          store_f32le(u8(p) + 4 * (gen() % nb), s);
          expect_same_decode(*codec, p, n, id, block, {},
                             codec->spec() + " scale " + std::to_string(s));
        }
        for (int trial = 0; trial < 20; ++trial) {
          Bytes p = good;
          // Flip a random byte of the value/bit section (for sign, often a padding bit).
          const uint64_t at = 4 * nb + gen() % (p.size() - 4 * nb);
          u8(p)[at] = trial % 2 ? 0x80 : static_cast<uint8_t>(gen());
          expect_same_decode(*codec, p, n, id, block, {},
                             codec->spec() + " trial " + std::to_string(trial));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// qsgd

void check_qsgd(uint32_t levels, uint32_t bucket, uint64_t seed, const DataSet& set) {
  auto codec = make_qsgd(levels, bucket);
  const QsgdShape q{levels, bucket, qsgd_code_bits(levels)};
  const std::string what = codec->spec() + "/" + std::to_string(bucket) + " seed " +
                           std::to_string(seed) + " on " + set.name;
  Status st;
  Bytes cpu = cpu_encode(*codec, set.x, seed, st);
  uint64_t first_bad = kNoBad;
  Bytes dev = emulate_qsgd_encode(set.x, q, seed, first_bad);
  ASSERT_EQ(st.is_ok(), first_bad == kNoBad) << what << ": " << st.message();
  if (!st.is_ok()) {
    const uint64_t element = named_element(st);
    if (element != kNoBad) {
      EXPECT_EQ(element / bucket, first_bad) << what << ": " << st.message();
    } else {
      EXPECT_NE(st.message().find("bucket " + std::to_string(first_bad) + " "), std::string::npos)
          << what << ": " << st.message();
    }
    return;
  }
  ASSERT_EQ(cpu, dev) << what << ": " << first_difference(cpu, dev);
  expect_same_decode(*codec, cpu, set.x.size(), proto::CodecId::kQsgd, 0, q, what);
}

TEST(DeviceMath, QsgdEncodesTheSameBytesForTheSameSeed) {
  for (const DataSet& set : finite_sets())
    for (uint32_t levels : {1u, 2u, 16u, 255u, 32767u})
      for (uint32_t bucket : {1u, 5u, 8u, 512u})
        for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeefcafef00dull}})
          check_qsgd(levels, bucket, seed, set);
}

TEST(DeviceMath, QsgdRefusesNonFiniteAndOversizedNorms) {
  DataSet big{"norm beyond fp32", normal(2000, 9, 1.0f)};
  for (size_t i = 1000; i < 1010; ++i) big.x[i] = 3e38f;  // each finite, their norm is not
  for (uint32_t bucket : {5u, 512u}) check_qsgd(16, bucket, 1, big);
  for (float bad : {kInf, kNaN}) {
    DataSet set{"non-finite", normal(2000, 10, 1.0f)};
    set.x[1500] = bad;
    set.x[1200] = 3e38f;
    set.x[1201] = 3e38f;
    for (uint32_t bucket : {1u, 5u, 512u, 4096u}) check_qsgd(16, bucket, 1, set);
  }
}

TEST(DeviceMath, QsgdDecodeChecksMatchTheCpu) {
  std::mt19937_64 gen(12);
  for (uint32_t levels : {1u, 3u, 16u, 100u}) {
    for (uint64_t n : {uint64_t{1}, uint64_t{9}, uint64_t{1037}}) {
      auto codec = make_qsgd(levels, 64);
      const QsgdShape q{levels, 64, qsgd_code_bits(levels)};
      Status st;
      const Bytes good = cpu_encode(*codec, normal(n, n + levels, 1.0f), 3, st);
      ASSERT_TRUE(st.is_ok());
      const uint64_t nb = blocks(n, 64);
      for (float s : {-0.0f, kNaN, kInf, -1.0f, 0.0f, kFltMax}) {
        Bytes p = good;
        store_f32le(u8(p) + 4 * (gen() % nb), s);
        expect_same_decode(*codec, p, n, proto::CodecId::kQsgd, 0, q, codec->spec() + " norm");
      }
      for (int trial = 0; trial < 40; ++trial) {
        Bytes p = good;
        u8(p)[4 * nb + gen() % (p.size() - 4 * nb)] ^= static_cast<uint8_t>(1u << (gen() % 8));
        expect_same_decode(
            *codec, p, n, proto::CodecId::kQsgd, 0, q,
            codec->spec() + " n " + std::to_string(n) + " trial " + std::to_string(trial));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// top-k: the radix rounds and the tile compaction of sparse_kernels.cu.

struct Selection {
  std::vector<uint64_t> idx;
  std::vector<float> val;
  uint64_t first_non_finite = kNoBad;
};

Selection emulate_topk(const std::vector<float>& x, uint64_t k) {
  Selection out;
  const uint64_t n = x.size();
  if (n == 0 || k == 0) return out;
  RadixState st;
  st.remaining = k;
  std::vector<unsigned long long> hist(kRadixMaxBins);
  for (int r = 0; r < kRadixRounds; ++r) {
    const RadixRound rd = kRadixRound[r];
    const uint32_t bins = 1u << rd.bits;
    std::fill(hist.begin(), hist.end(), 0);
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t key = mag_key(x[i]);
      if (r == 0 && key >= kNonFiniteKey) out.first_non_finite = std::min(out.first_non_finite, i);
      if (radix_candidate(key, st)) ++hist[(key >> rd.shift) & (bins - 1)];
    }
    radix_narrow(hist.data(), rd, st);
  }
  constexpr uint64_t kTile = 256;
  const uint64_t tiles = (n + kTile - 1) / kTile;
  std::vector<uint64_t> above_before(tiles), ties_before(tiles);
  uint64_t above_total = 0, ties_total = 0;
  for (uint64_t t = 0; t < tiles; ++t) {  // tile_counts_kernel + tile_scan_kernel
    above_before[t] = above_total;
    ties_before[t] = ties_total;
    for (uint64_t i = t * kTile; i < std::min(n, (t + 1) * kTile); ++i) {
      above_total += mag_key(x[i]) > st.prefix;
      ties_total += mag_key(x[i]) == st.prefix;
    }
  }
  EXPECT_EQ(above_total + std::min<uint64_t>(ties_total, st.remaining), k);
  out.idx.assign(k, kNoBad);
  out.val.assign(k, 0.0f);
  for (uint64_t t = 0; t < tiles; ++t) {  // compact_kernel
    uint64_t tie_rank = 0, keep_rank = 0;
    for (uint64_t i = t * kTile; i < std::min(n, (t + 1) * kTile); ++i) {
      const uint32_t key = mag_key(x[i]);
      const bool keep = topk_keep(key, ties_before[t] + tie_rank, st);
      tie_rank += key == st.prefix;
      if (!keep) continue;
      const uint64_t pos =
          above_before[t] + std::min<uint64_t>(ties_before[t], st.remaining) + keep_rank++;
      EXPECT_LT(pos, k);
      if (pos < k) {
        out.idx[pos] = i;
        out.val[pos] = x[i];
      }
    }
  }
  return out;
}

void check_topk(double ratio, const DataSet& set) {
  const uint64_t n = set.x.size(), k = sparse_count(ratio, n);
  auto codec = make_topk(ratio, false, ValueType::kF32);
  const std::string what = codec->spec() + " on " + set.name;
  Status st;
  Bytes cpu = cpu_encode(*codec, set.x, 0, st);
  Selection dev = emulate_topk(set.x, k);
  ASSERT_EQ(st.is_ok(), dev.first_non_finite == kNoBad) << what << ": " << st.message();
  if (!st.is_ok()) {
    EXPECT_NE(st.message().find("x[" + std::to_string(dev.first_non_finite) + "]"),
              std::string::npos)
        << what << ": " << st.message();
    return;
  }
  auto v = decode_sparse(cpu, n, "topk");
  ASSERT_TRUE(v.is_ok()) << what << ": " << v.status().message();
  ASSERT_EQ(v->indices, dev.idx) << what;
  ASSERT_TRUE(same_bits(v->values, dev.val)) << what;
  // And the payload the device side would frame from them is the CPU's.
  Bytes framed;
  ASSERT_TRUE(encode_sparse(n, dev.idx, dev.val, ValueType::kF32, framed).is_ok());
  EXPECT_EQ(framed, cpu) << what;
}

TEST(DeviceMath, TopkSelectsTheCpuSet) {
  for (const DataSet& set : finite_sets())
    for (double ratio : {1e-9, 0.001, 0.01, 0.1, 0.5, 0.999, 1.0}) check_topk(ratio, set);
}

TEST(DeviceMath, TopkBreaksTiesLikeTheCpu) {
  // Many equal magnitudes at and around the threshold, both signs, in every tile.
  std::mt19937_64 gen(13);
  for (int trial = 0; trial < 20; ++trial) {
    DataSet set{"ties " + std::to_string(trial), std::vector<float>(3000 + trial * 37)};
    for (auto& v : set.x) {
      const float mags[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f, kDenormMin, 1.0000001f};
      v = mags[gen() % 8] * (gen() % 2 ? -1.0f : 1.0f);
    }
    for (double ratio : {0.01, 0.2, 0.37, 0.6, 0.9}) check_topk(ratio, set);
  }
  // Keys that agree in the first one or two radix digits.
  DataSet close{"close keys", std::vector<float>(5000)};
  for (size_t i = 0; i < close.x.size(); ++i)
    close.x[i] = bits_f32(0x3f800000u + static_cast<uint32_t>(gen() % 700));
  for (double ratio : {0.001, 0.05, 0.5}) check_topk(ratio, close);
}

TEST(DeviceMath, TopkRefusesNonFinite) {
  for (float bad : {kInf, -kInf, kNaN}) {
    DataSet set{"non-finite", normal(1000, 14, 1.0f)};
    set.x[700] = bad;
    set.x[300] = bad;
    for (double ratio : {0.001, 0.5, 1.0}) check_topk(ratio, set);
  }
}

// ---------------------------------------------------------------------------
// rand-k: the host-side index derivation against the CPU codec (x[i] = i makes
// the payload's values the indices).

TEST(DeviceMath, RandkIndicesAreTheCpuIndices) {
  for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{10}, uint64_t{1000}, uint64_t{100003}}) {
    std::vector<float> x(n);
    for (uint64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
    for (double ratio : {1e-9, 0.01, 0.3, 1.0}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
        auto codec = make_randk(ratio, ValueType::kF32);
        Status st;
        Bytes cpu = cpu_encode(*codec, x, seed, st);
        ASSERT_TRUE(st.is_ok());
        const uint64_t k = sparse_count(ratio, n);
        std::vector<float> vals;
        ASSERT_TRUE(decode_sparse_values(cpu, n, k, ValueType::kF32, "randk", vals).is_ok());
        const auto idx = randk_indices(seed, n, k);
        ASSERT_EQ(idx.size(), vals.size());
        for (size_t j = 0; j < idx.size(); ++j)
          ASSERT_EQ(static_cast<float>(idx[j]), vals[j])
              << codec->spec() << " n " << n << " seed " << seed;
      }
    }
  }
}

// The device copy of the counter RNG against base/split_mix64.h's, and the code width
// of qsgd_codec.cc.
TEST(DeviceMath, CounterStreamAndCodeBits) {
  EXPECT_EQ(qsgd_code_bits(1), 2u);
  EXPECT_EQ(qsgd_code_bits(2), 3u);
  EXPECT_EQ(qsgd_code_bits(16), 6u);
  EXPECT_EQ(qsgd_code_bits(32767), 16u);
  for (uint64_t z : {uint64_t{0}, uint64_t{1}, uint64_t{0x9e3779b97f4a7c15}, ~uint64_t{0}})
    EXPECT_EQ(mix64(z), gossip::mix64(z));
  for (uint64_t seed : {uint64_t{0}, uint64_t{5}, ~uint64_t{0}}) {
    ASSERT_EQ(stream_key(seed), gossip::stream_key(seed));
    for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, ~uint64_t{0} - 1}) {
      const uint64_t key = stream_key(seed);
      EXPECT_EQ(counter_bits(key, i), gossip::counter_bits(key, i));
      EXPECT_EQ(f64_bits(counter_uniform(key, i)), f64_bits(gossip::counter_uniform(key, i)));
    }
  }
}

}  // namespace
}  // namespace gossip::compression::cuda

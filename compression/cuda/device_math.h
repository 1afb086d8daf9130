#pragma once
// The per-element and per-block math of the dense codecs and of top-k selection,
// as inline functions that compile both as CUDA __host__ __device__ code (the
// kernels call them) and as plain C++ (tests/compression/device_math_test.cc runs
// them on the CPU against the CPU codecs' payloads, bit for bit, on machines
// without a GPU). Each function mirrors one step of a CPU codec; the comment names
// the file. Only launch, indexing and reductions are left to the kernels.
//
// Floating point: every step that rounds goes through an *_rn helper. On the
// device these are the IEEE round-to-nearest-even intrinsics, which nvcc never
// contracts into an FMA (an FMA rounds once where the CPU rounds twice) and whose
// division and sqrt are IEEE whatever -prec-div/-prec-sqrt say; on the host they
// are the plain operators. Denormals must not be flushed (int8 scales can be
// subnormal): the .cu files are built with -ftz=false (compression/CMakeLists.txt).
//
// Payload bytes are uint8_t here (std::byte at the public API) and every
// multi-byte field is read and written a byte at a time: payload offsets are not
// aligned, and both ends are little-endian.

#include <cfloat>
#include <cstdint>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#include <cstring>
#endif

#if defined(__CUDACC__)
#define GOSSIP_HD __host__ __device__ inline
#else
#define GOSSIP_HD inline
#endif

namespace gossip::compression::cuda {

// ---------------------------------------------------------------------------
// Bits, rounding arithmetic, little-endian bytes.

GOSSIP_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

GOSSIP_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

GOSSIP_HD uint64_t f64_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}

#if defined(__CUDA_ARCH__)
GOSSIP_HD float add_rn(float a, float b) { return __fadd_rn(a, b); }
GOSSIP_HD float sub_rn(float a, float b) { return __fsub_rn(a, b); }
GOSSIP_HD float mul_rn(float a, float b) { return __fmul_rn(a, b); }
GOSSIP_HD float div_rn(float a, float b) { return __fdiv_rn(a, b); }
GOSSIP_HD double add_rn(double a, double b) { return __dadd_rn(a, b); }
GOSSIP_HD double mul_rn(double a, double b) { return __dmul_rn(a, b); }
GOSSIP_HD double div_rn(double a, double b) { return __ddiv_rn(a, b); }
GOSSIP_HD double sqrt_rn(double a) { return __dsqrt_rn(a); }
GOSSIP_HD double floor_f64(double a) { return ::floor(a); }
GOSSIP_HD float to_f32_rn(double a) { return __double2float_rn(a); }
#else
GOSSIP_HD float add_rn(float a, float b) { return a + b; }
GOSSIP_HD float sub_rn(float a, float b) { return a - b; }
GOSSIP_HD float mul_rn(float a, float b) { return a * b; }
GOSSIP_HD float div_rn(float a, float b) { return a / b; }
GOSSIP_HD double add_rn(double a, double b) { return a + b; }
GOSSIP_HD double mul_rn(double a, double b) { return a * b; }
GOSSIP_HD double div_rn(double a, double b) { return a / b; }
GOSSIP_HD double sqrt_rn(double a) { return std::sqrt(a); }
GOSSIP_HD double floor_f64(double a) { return std::floor(a); }
GOSSIP_HD float to_f32_rn(double a) { return static_cast<float>(a); }
#endif

// |x| by clearing the sign bit: exact, and the same on both sides.
GOSSIP_HD double abs_f64(float x) {
  const uint32_t a = f32_bits(x) & 0x7fffffffu;
  return static_cast<double>(bits_f32(a));
}

GOSSIP_HD bool finite_f32(float f) { return (f32_bits(f) & 0x7f800000u) != 0x7f800000u; }
GOSSIP_HD bool finite_f64(double d) {
  return (f64_bits(d) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}
GOSSIP_HD bool sign_bit(float f) { return (f32_bits(f) >> 31) != 0; }

GOSSIP_HD void store_le16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
GOSSIP_HD uint16_t load_le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint32_t>(p[1]) << 8));
}
GOSSIP_HD void store_le32(uint8_t* p, uint32_t v) {
  for (int b = 0; b < 4; ++b) p[b] = static_cast<uint8_t>(v >> (8 * b));
}
GOSSIP_HD uint32_t load_le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
GOSSIP_HD void store_f32le(uint8_t* p, float f) { store_le32(p, f32_bits(f)); }
GOSSIP_HD float load_f32le(const uint8_t* p) { return bits_f32(load_le32(p)); }

GOSSIP_HD uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

// ---------------------------------------------------------------------------
// fp16 / bf16, round to nearest even (half.h).

GOSSIP_HD uint16_t float_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded =
      (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest even; overflows to inf
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

GOSSIP_HD float bf16_to_float(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

GOSSIP_HD uint16_t float_to_fp16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal: rebias 127 -> 15 and round the 13 dropped bits to nearest even (a
  // carry gives the next exponent, or inf past 65504).
  const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // fp16 denormals: adding 0.5f puts the 2^-24 units in the low mantissa bits,
  // rounded to nearest even by the adder (an fp32 denormal a gives 0.5f whether
  // or not the device flushes it, so FTZ cannot change the result).
  const uint32_t denormal = f32_bits(add_rn(bits_f32(a), 0.5f)) - 0x3f000000u;
  const uint32_t quiet_nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t r = a < 0x38800000u ? denormal : normal;
  r = a >= 0x47800000u ? 0x7c00u : r;  // 65536 and above, inf
  r = a > 0x7f800000u ? quiet_nan : r;
  return static_cast<uint16_t>(sign | r);
}

GOSSIP_HD float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  const uint32_t normal = ((exp + 112) << 23) | (mant << 13);
  const uint32_t inf_nan = 0x7f800000u | (mant << 13);
  // mant * 2^-24, exact in fp32.
  const uint32_t denormal = f32_bits(mul_rn(static_cast<float>(mant), 5.9604644775390625e-8f));
  const uint32_t r = exp == 0 ? denormal : (exp == 0x1f ? inf_nan : normal);
  return bits_f32(sign | r);
}

// ---------------------------------------------------------------------------
// Per-block scales: a block [lo, hi) is summarized by one thread, in index order,
// exactly as the CPU codec's inner loop does (the sums are not associative, so the
// order is part of the result).

struct BlockScale {
  float scale = 0.0f;
  bool finite = true;  // false: the block holds an inf or NaN; scale unset
};

// int8_codec.cc: scale = max|x| / 127, nudged so that 127 * scale covers max|x|
// when subnormal and stays finite near fp32's max.
GOSSIP_HD float int8_scale_of(uint32_t max_bits) {
  const float absmax = bits_f32(max_bits);
  float scale = div_rn(absmax, 127.0f);
  // nextafter(scale, +inf) for scale >= 0 (it may be +0: then the smallest denormal).
  if (scale < FLT_MIN && mul_rn(scale, 127.0f) < absmax) scale = bits_f32(f32_bits(scale) + 1);
  // nextafter(scale, 0) for a positive scale.
  if (!(mul_rn(scale, 127.0f) <= FLT_MAX)) scale = bits_f32(f32_bits(scale) - 1);
  return scale;
}

// The scales and norms accumulate a block element by element in index order
// (add), so that a kernel can feed a block to them piece by piece; finish(len)
// gives the block's result. The *_block_scale and qsgd_bucket_norm loops use them.
struct Int8ScaleAcc {
  uint32_t max_bits = 0;  // of |x|: inf and NaN have the largest, one integer max finds both
  GOSSIP_HD void add(float v) {
    const uint32_t a = f32_bits(v) & 0x7fffffffu;
    max_bits = a > max_bits ? a : max_bits;
  }
  GOSSIP_HD BlockScale finish(uint64_t) const {
    if (max_bits >= 0x7f800000u) return {0.0f, false};
    return {int8_scale_of(max_bits), true};
  }
};

GOSSIP_HD BlockScale int8_block_scale(const float* x, uint64_t lo, uint64_t hi) {
  Int8ScaleAcc acc;
  for (uint64_t i = lo; i < hi; ++i) acc.add(x[i]);
  return acc.finish(hi - lo);
}

// int8_codec.cc: round-to-nearest-even(x / scale) clamped to [-127, 127], as a
// two's complement byte; 0 for a zero scale.
GOSSIP_HD uint8_t int8_quantize(float x, float scale) {
  if (scale == 0.0f) return 0;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
  float v = div_rn(x, scale);
  v = v < -127.0f ? -127.0f : (127.0f < v ? 127.0f : v);  // std::clamp, argument order kept
  v = sub_rn(add_rn(v, kRoundMagic), kRoundMagic);
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

GOSSIP_HD float int8_dequantize(uint8_t q, float scale) {
  return mul_rn(static_cast<float>(static_cast<int8_t>(q)), scale);
}

// What the int8 decoder accepts: non-negative, and 127 * scale still finite.
GOSSIP_HD bool int8_scale_valid(float s) { return !sign_bit(s) && mul_rn(s, 127.0f) <= FLT_MAX; }

// sign_codec.cc: mean |x| of the block, summed in double in index order.
struct SignScaleAcc {
  Int8ScaleAcc max;  // finite or not
  double sum = 0;
  GOSSIP_HD void add(float v) {
    max.add(v);
    sum = add_rn(sum, abs_f64(v));
  }
  GOSSIP_HD BlockScale finish(uint64_t len) const {
    if (max.max_bits >= 0x7f800000u) return {0.0f, false};
    return {to_f32_rn(div_rn(sum, static_cast<double>(len))), true};
  }
};

GOSSIP_HD BlockScale sign_block_scale(const float* x, uint64_t lo, uint64_t hi) {
  SignScaleAcc acc;
  for (uint64_t i = lo; i < hi; ++i) acc.add(x[i]);
  return acc.finish(hi - lo);
}

// sign_codec.cc: byte g of the bit section, element i at bit i % 8, set for x >= 0
// (both zeros included); bits past n stay zero.
GOSSIP_HD uint8_t sign_pack_byte(const float* x, uint64_t n, uint64_t g) {
  const uint64_t lo = 8 * g, hi = min_u64(n, lo + 8);
  uint32_t byte = 0;
  for (uint64_t i = lo; i < hi; ++i) byte |= static_cast<uint32_t>(x[i] >= 0.0f) << (i - lo);
  return static_cast<uint8_t>(byte);
}

// sign_codec.cc: +scale where the bit is set, else -scale (the sign bit spliced in).
GOSSIP_HD float sign_decode_element(const uint8_t* bits, uint64_t i, float scale) {
  const uint32_t bit = (static_cast<uint32_t>(bits[i >> 3]) >> (i & 7)) & 1u;
  return bits_f32(f32_bits(scale) | ((bit ^ 1u) << 31));
}

GOSSIP_HD bool sign_scale_valid(float s) { return finite_f32(s) && !sign_bit(s); }

// The padding bits above `used_bits` in the last byte of a bit section are zero
// (sign, qsgd). `last` is that byte; used_bits % 8 == 0 means there is no padding.
GOSSIP_HD bool padding_clear(uint8_t last, uint64_t used_bits) {
  return used_bits % 8 == 0 || (static_cast<uint32_t>(last) >> (used_bits % 8)) == 0;
}

// ---------------------------------------------------------------------------
// QSGD (qsgd_codec.cc) and its counter-based randomness (rng.h).

GOSSIP_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
GOSSIP_HD uint64_t stream_key(uint64_t seed) { return mix64(seed ^ 0x6a09e667f3bcc909ull); }
GOSSIP_HD uint64_t counter_bits(uint64_t key, uint64_t i) {
  return mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull);
}
// 53 random bits times 2^-53: exact in double.
GOSSIP_HD double counter_uniform(uint64_t key, uint64_t i) {
  return static_cast<double>(counter_bits(key, i) >> 11) * 0x1p-53;
}

struct QsgdShape {
  uint32_t levels = 1;  // S
  uint32_t bucket = 1;  // elements per norm
  uint32_t bits = 2;    // per code: bit_width(S) + 1
};

GOSSIP_HD uint32_t qsgd_code_bits(uint32_t levels) {
  uint32_t w = 0;
  while (w < 32 && (levels >> w) != 0) ++w;
  return w + 1;
}

enum : uint8_t { kNormOk = 0, kNormNonFinite = 1, kNormTooLarge = 2 };

struct BucketNorm {
  float norm = 0.0f;
  uint8_t status = kNormOk;
};

// Squares of floats are exact in double and summed in index order; sqrt is
// correctly rounded on both sides.
struct QsgdNormAcc {
  double sum = 0;
  GOSSIP_HD void add(float x) {
    const double v = x;
    sum = add_rn(sum, mul_rn(v, v));
  }
  GOSSIP_HD BucketNorm finish(uint64_t) const {
    const double norm = sqrt_rn(sum);
    if (!finite_f64(norm)) return {0.0f, kNormNonFinite};
    if (norm > static_cast<double>(FLT_MAX)) return {0.0f, kNormTooLarge};
    return {to_f32_rn(norm), kNormOk};
  }
};

GOSSIP_HD BucketNorm qsgd_bucket_norm(const float* x, uint64_t lo, uint64_t hi) {
  QsgdNormAcc acc;
  for (uint64_t i = lo; i < hi; ++i) acc.add(x[i]);
  return acc.finish(hi - lo);
}

// The code of element i: level floor(|x| / norm * S + u) (at most S) and the sign
// bit above it; 0 for a zero norm.
GOSSIP_HD uint64_t qsgd_code(float x, float norm_f32, QsgdShape q, uint64_t key, uint64_t i) {
  const double norm = norm_f32;
  if (!(norm > 0)) return 0;
  const double r = mul_rn(div_rn(abs_f64(x), norm), static_cast<double>(q.levels));
  const double l = floor_f64(add_rn(r, counter_uniform(key, i)));
  uint64_t code = min_u64(static_cast<uint64_t>(l), q.levels);
  if (x < 0) code |= uint64_t{1} << (q.bits - 1);
  return code;
}

// Group g (elements 8g .. 8g+7, fewer at the end): eight codes fill exactly
// q.bits bytes, written LSB first at `out` (the group's first byte). norms_le is
// the payload's norm section. Writes every byte the group owns, padding included.
GOSSIP_HD void qsgd_encode_group(const float* x, uint64_t n, uint64_t g, const uint8_t* norms_le,
                                 QsgdShape q, uint64_t key, uint8_t* out) {
  uint64_t acc = 0;
  uint32_t nacc = 0;
  const uint64_t hi = min_u64(n, 8 * g + 8);
  // One division per group (a 64-bit division is a long sequence on a GPU): the
  // bucket moves on at most a few times within eight elements.
  uint64_t bucket = 8 * g / q.bucket;
  uint64_t bucket_end = (bucket + 1) * q.bucket;
  float norm = load_f32le(norms_le + 4 * bucket);
  for (uint64_t i = 8 * g; i < hi; ++i) {
    if (i == bucket_end) {
      ++bucket;
      bucket_end += q.bucket;
      norm = load_f32le(norms_le + 4 * bucket);
    }
    acc |= qsgd_code(x[i], norm, q, key, i) << nacc;
    nacc += q.bits;
    while (nacc >= 8) {
      *out++ = static_cast<uint8_t>(acc & 0xff);
      acc >>= 8;
      nacc -= 8;
    }
  }
  if (nacc > 0) *out = static_cast<uint8_t>(acc);  // only in the last group
}

// Calls fn(i, code) for the elements of group g, reading the group's bytes at p.
template <typename Fn>
GOSSIP_HD void qsgd_for_each_code(const uint8_t* p, uint64_t n, uint64_t g, uint32_t bits,
                                  Fn&& fn) {
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t acc = 0;
  uint32_t nacc = 0;
  const uint64_t hi = min_u64(n, 8 * g + 8);
  for (uint64_t i = 8 * g; i < hi; ++i) {
    while (nacc < bits) {
      acc |= static_cast<uint64_t>(*p++) << nacc;
      nacc += 8;
    }
    fn(i, acc & mask);
    acc >>= bits;
    nacc -= bits;
  }
}

// level * norm / S with the sign of the code.
GOSSIP_HD float qsgd_decode_value(uint64_t code, float norm, QsgdShape q) {
  const uint64_t level_mask = (uint64_t{1} << (q.bits - 1)) - 1;
  const float v =
      to_f32_rn(div_rn(mul_rn(static_cast<double>(code & level_mask), static_cast<double>(norm)),
                       static_cast<double>(q.levels)));
  return (code >> (q.bits - 1)) ? -v : v;
}

GOSSIP_HD bool qsgd_level_valid(uint64_t code, QsgdShape q) {
  return (code & ((uint64_t{1} << (q.bits - 1)) - 1)) <= q.levels;
}

GOSSIP_HD bool qsgd_norm_valid(float norm) { return finite_f32(norm) && !sign_bit(norm); }

// ---------------------------------------------------------------------------
// Top-k selection (topk_codec.cc): the k largest magnitude keys, ties at the k-th
// key to the lower indices. Radix select over the 31 key bits in three rounds of
// 11, 11 and 9 bits, most significant first (the CPU's rounds).

GOSSIP_HD uint32_t mag_key(float f) { return f32_bits(f) & 0x7fffffffu; }

// The blocks (scales, buckets) of n values; block 0 (refused by check_params) counts as
// 1, as the CPU factories treat it.
GOSSIP_HD uint64_t block_count(uint64_t n, uint32_t block) {
  block = block == 0 ? 1 : block;
  return (n + block - 1) / block;
}

inline constexpr uint32_t kNonFiniteKey = 0x7f800000u;  // keys at or above: inf or NaN

struct RadixRound {
  int shift;
  int bits;
};
inline constexpr int kRadixRounds = 3;
inline constexpr RadixRound kRadixRound[kRadixRounds] = {{20, 11}, {9, 11}, {0, 9}};
inline constexpr uint32_t kRadixMaxBins = 1u << 11;

// The selection so far: keys matching prefix under mask are the candidates, and
// `remaining` of them are still to be taken.
struct RadixState {
  uint32_t prefix = 0;
  uint32_t mask = 0;
  unsigned long long remaining = 0;
};

// One round: hist[b] counts the candidates whose key has digit b at this round.
// Walks down from the top bin to the one holding the remaining-th largest and
// narrows the state to it. The caller guarantees sum(hist) >= remaining >= 1; the
// walk still stops at bin 0 if not.
GOSSIP_HD void radix_narrow(const unsigned long long* hist, RadixRound rd, RadixState& st) {
  const uint32_t bins = 1u << rd.bits;
  unsigned long long above = 0;
  uint32_t b = bins - 1;
  for (;; --b) {
    if (above + hist[b] >= st.remaining || b == 0) break;
    above += hist[b];
  }
  st.remaining -= above;
  st.prefix |= b << rd.shift;
  st.mask |= (bins - 1) << rd.shift;
}

GOSSIP_HD bool radix_candidate(uint32_t key, const RadixState& st) {
  return (key & st.mask) == st.prefix;
}

// After the last round prefix is the k-th largest key t and `remaining` the number
// of its ties to keep. Element with key `key`, the tie_rank-th tie (0-based, in
// index order) when key == t, is kept:
GOSSIP_HD bool topk_keep(uint32_t key, uint64_t tie_rank, const RadixState& st) {
  return key > st.prefix || (key == st.prefix && tie_rank < st.remaining);
}

}  // namespace gossip::compression::cuda

// int8: blockwise absmax quantization. Per block of `block` elements (the last one
// shorter), scale = max|x| / 127 as fp32 and q = round-to-nearest-even(x / scale)
// in [-127, 127], so |x - q * scale| <= scale / 2 (plus fp32 rounding).
//
// Payload (little-endian): the ceil(n / block) scales as f32, then the n values as
// int8; 4 * ceil(n / block) + n bytes, ~1.016 bytes per element at block 256.
// Keeping the values contiguous lets the element loops index x and the payload alike.
//
// Non-finite input is refused: encode() fails with Status::invalid naming the first
// inf or NaN, since one such value would poison its whole block's scale (the daemon
// refuses NaN updates anyway). The decoder accepts only what the encoder writes:
// non-negative scales with 127 * scale finite, and values in [-127, 127].

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "base/isa.h"
#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

constexpr float kQmax = 127.0f;
// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the
// nearest integer, ties to even, in the current (default) rounding mode: a
// vectorizable std::nearbyint for the range we need.
constexpr float kRoundMagic = 12582912.0f;

// What the encoder's loops over blocks need; each block's scale, values and flag are
// written by the one thread that owns the block.
struct BlockArgs {
  const float* x;
  size_t n;
  size_t block;
  std::byte* scales;
  std::byte* values;
  uint8_t* bad;
};

// The scale of a block whose max |x| has the (finite) bit pattern max_bits.
float block_scale(uint32_t max_bits) {
  const float absmax = std::bit_cast<float>(max_bits);
  float scale = absmax / kQmax;
  // A subnormal scale loses precision; round it up so that 127 * scale still
  // covers absmax and the clamp never cuts more than half a step. (A normal scale
  // is within 2^-24 of exact, so clamping costs at most rounding.)
  if (scale < std::numeric_limits<float>::min() && scale * kQmax < absmax)
    scale = std::nextafter(scale, std::numeric_limits<float>::infinity());
  // Near fp32's max, absmax / 127 may round up so far that 127 * scale is inf:
  // round it down instead (the clamp then costs a few ulps of absmax).
  if (!(scale * kQmax <= std::numeric_limits<float>::max())) scale = std::nextafter(scale, 0.0f);
  return scale;
}

// q[i] = round-to-nearest-even(clamp(x[i] / scale, -127, 127)), scale > 0.
inline void quantize_portable(const float* x, std::byte* q, size_t count, float scale) {
  for (size_t i = 0; i < count; ++i) {
    float v = std::clamp(x[i] / scale, -kQmax, kQmax);
    v = (v + kRoundMagic) - kRoundMagic;
    q[i] = static_cast<std::byte>(static_cast<int32_t>(v));  // two's complement
  }
}

void encode_blocks_portable(const BlockArgs& args, size_t b0, size_t b1) {
  // Local copies: stores through std::byte* may alias anything, args included, and
  // GCC would reload them each iteration and not vectorize.
  const float* xs = args.x;
  std::byte* const scale_out = args.scales;
  std::byte* const value_out = args.values;
  const size_t block = args.block, count = args.n;
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * block, hi = std::min(count, lo + block);
    // Max of |x| as integer bits: monotone for non-negative floats, and inf and
    // NaN compare above every finite value, so one reduction finds both.
    uint32_t max_bits = 0;
    for (size_t i = lo; i < hi; ++i)
      max_bits = std::max(max_bits, std::bit_cast<uint32_t>(xs[i]) & 0x7fffffffu);
    if (max_bits >= 0x7f800000u) {
      args.bad[b] = 1;
      continue;
    }
    const float scale = block_scale(max_bits);
    store_f32(scale_out + 4 * b, scale);
    if (scale == 0.0f) {
      std::fill(value_out + lo, value_out + hi, std::byte{0});
      continue;
    }
    quantize_portable(xs + lo, value_out + lo, hi - lo, scale);
  }
}

void decode_blocks_portable(const std::byte* scales, const std::byte* q, float* y, size_t n,
                            size_t block, size_t b0, size_t b1) {
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * block, hi = std::min(n, lo + block);
    const float s = load_f32(scales + 4 * b);
    for (size_t i = lo; i < hi; ++i) y[i] = static_cast<float>(static_cast<int8_t>(q[i])) * s;
  }
}

#ifdef GOSSIP_HAVE_X86_KERNELS

// quantize_portable's rounding on 8 lanes without its clamp: vcvtps2dq rounds to
// nearest even under the default MXCSR, as the magic-number addition does. The clamp
// only guards the bytes (store32_avx2): block_scale leaves 127 * scale >= absmax to
// within 2^-22, so |x / scale| < 127.5 for every x of the block, and v and clamp(v)
// round to the same integer.

// q = x / scale with an IEEE division, as in quantize_portable.
GOSSIP_TARGET_AVX2 inline __m256i quantize8_div_avx2(const float* x, __m256 scale) {
  return _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x), scale));
}

// The same q from x * (1 / scale), a multiplication instead of a division, for a
// normal scale. x * inv is within 3 * 2^-24 * |x / scale| <= 2.3e-5 of the correctly
// rounded x / scale (inv and the product each round once), so the two round to the
// same integer unless x * inv lies within 2.3e-5 of a half-integer. The largest
// distance |v - q| goes to *max_frac; the caller redoes the group with the division
// when it reaches 0.5 - 2^-15 (3.05e-5 from a half-integer).
GOSSIP_TARGET_AVX2 inline __m256i quantize8_mul_avx2(const float* x, __m256 inv, __m256& max_frac) {
  const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), inv);
  const __m256i q = _mm256_cvtps_epi32(v);
  // Exact in fp32: both are below 128 and at most 0.5 apart.
  const __m256 frac =
      _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, _mm256_cvtepi32_ps(q)));
  max_frac = _mm256_max_ps(max_frac, frac);
  return q;
}

// Saturating packs work per 128-bit lane and leave the 4-byte groups as
// a0 b0 c0 d0 | a1 b1 c1 d1; the permute restores a0 a1 b0 b1 ..., and the max is
// the clamp's lower end.
GOSSIP_TARGET_AVX2 inline void store32_avx2(std::byte* q, __m256i a, __m256i b, __m256i c,
                                            __m256i d) {
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_max_epi8(ordered, _mm256_set1_epi8(-127)));
}

// inv_scale: 1 / scale when that is a normal float (scale is normal: scale <= FLT_MAX /
// 127 already), else 0 to divide throughout.
GOSSIP_TARGET_AVX2 void quantize_avx2(const float* x, std::byte* q, size_t count, float scale,
                                      float inv_scale) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  if (inv_scale != 0.0f) {
    const __m256 inv = _mm256_set1_ps(inv_scale);
    const __m256 near_tie = _mm256_set1_ps(0.5f - 0x1p-15f);
    for (; i + 32 <= count; i += 32) {
      __m256 max_frac = _mm256_setzero_ps();
      const __m256i a = quantize8_mul_avx2(x + i, inv, max_frac),
                    b = quantize8_mul_avx2(x + i + 8, inv, max_frac);
      const __m256i c = quantize8_mul_avx2(x + i + 16, inv, max_frac);
      const __m256i d = quantize8_mul_avx2(x + i + 24, inv, max_frac);
      if (_mm256_movemask_ps(_mm256_cmp_ps(max_frac, near_tie, _CMP_GE_OQ)) == 0) {
        store32_avx2(q + i, a, b, c, d);
      } else {
        store32_avx2(q + i, quantize8_div_avx2(x + i, s), quantize8_div_avx2(x + i + 8, s),
                     quantize8_div_avx2(x + i + 16, s), quantize8_div_avx2(x + i + 24, s));
      }
    }
  }
  for (; i + 32 <= count; i += 32)
    store32_avx2(q + i, quantize8_div_avx2(x + i, s), quantize8_div_avx2(x + i + 8, s),
                 quantize8_div_avx2(x + i + 16, s), quantize8_div_avx2(x + i + 24, s));
  quantize_portable(x + i, q + i, count - i, scale);
}

// Max |x| as bits over [lo, hi), as in encode_blocks_portable.
GOSSIP_TARGET_AVX2 inline uint32_t max_abs_bits_avx2(const float* xs, size_t lo, size_t hi) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  size_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    m0 = _mm256_max_epu32(
        m0,
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + i)), abs_mask));
    m1 = _mm256_max_epu32(
        m1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + i + 8)),
                             abs_mask));
  }
  const __m256i m = _mm256_max_epu32(m0, m1);
  __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
  uint32_t max_bits = static_cast<uint32_t>(_mm_cvtsi128_si32(m4));
  for (; i < hi; ++i) max_bits = std::max(max_bits, std::bit_cast<uint32_t>(xs[i]) & 0x7fffffffu);
  return max_bits;
}

// The x86 versions go through the blocks in chunks: first every scale of the chunk,
// then its values (still in L1), so that one block's chain of max, division and
// reciprocal does not hold up the next block's arithmetic.
constexpr size_t kChunkBlocks = 16;

// Scales of a chunk's blocks, and 1 / scale where that is a normal float (else 0:
// divide). A negative scale marks a block with inf or NaN (flagged in args.bad).
struct ChunkScales {
  float scale[kChunkBlocks];
  float inv[kChunkBlocks];
};

inline void set_block_scale(const BlockArgs& args, size_t b, uint32_t max_bits, ChunkScales& cs,
                            size_t k) {
  if (max_bits >= 0x7f800000u) {
    args.bad[b] = 1;
    cs.scale[k] = -1.0f;
    return;
  }
  const float scale = block_scale(max_bits);
  cs.scale[k] = scale;
  // scale <= FLT_MAX / 127, so 1 / scale is normal whenever scale is.
  cs.inv[k] = scale >= std::numeric_limits<float>::min() ? 1.0f / scale : 0.0f;
  store_f32(args.scales + 4 * b, scale);
}

// Blocks [b0, b1) with one instruction set's kernels: MaxAbs gives a block's largest
// |x| (its bits), Quantize writes its bytes. Always inlined into the target-attributed
// encode_blocks_* below, so that it is compiled once per instruction set.
template <uint32_t (*MaxAbs)(const float*, size_t, size_t),
          void (*Quantize)(const float*, std::byte*, size_t, float, float)>
[[gnu::always_inline]] inline void encode_blocks_chunked(const BlockArgs& args, size_t b0,
                                                         size_t b1) {
  ChunkScales cs;
  for (size_t c0 = b0; c0 < b1; c0 += kChunkBlocks) {
    const size_t c1 = std::min(b1, c0 + kChunkBlocks);
    for (size_t b = c0; b < c1; ++b) {
      const size_t lo = b * args.block, hi = std::min(args.n, lo + args.block);
      set_block_scale(args, b, MaxAbs(args.x, lo, hi), cs, b - c0);
    }
    for (size_t b = c0; b < c1; ++b) {
      const size_t lo = b * args.block, hi = std::min(args.n, lo + args.block);
      const float scale = cs.scale[b - c0];
      if (scale > 0.0f) {
        Quantize(args.x + lo, args.values + lo, hi - lo, scale, cs.inv[b - c0]);
      } else if (scale == 0.0f) {
        std::fill(args.values + lo, args.values + hi, std::byte{0});
      }
    }
  }
}

GOSSIP_TARGET_AVX2 void encode_blocks_avx2(const BlockArgs& args, size_t b0, size_t b1) {
  encode_blocks_chunked<max_abs_bits_avx2, quantize_avx2>(args, b0, b1);
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip
// -Wmaybe-uninitialized (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// AVX-512: the same algorithm on 16 lanes, with masked loads and stores for the
// tails, vreduceps for the distance to the nearest integer (v - rint(v), exact) and
// vpmovsdb for the narrowing (saturating, then the clamp's lower end).

GOSSIP_TARGET_AVX512 inline uint32_t max_abs_bits_avx512(const float* xs, size_t lo, size_t hi) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
  size_t i = lo;
  for (; i + 32 <= hi; i += 32) {
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(xs + i), abs_mask));
    m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(xs + i + 16), abs_mask));
  }
  if (i + 16 <= hi) {
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(xs + i), abs_mask));
    i += 16;
  }
  if (i < hi) {  // masked-off lanes load as 0
    const __mmask16 k = static_cast<__mmask16>((1u << (hi - i)) - 1);
    m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, xs + i), abs_mask));
  }
  return _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
}

GOSSIP_TARGET_AVX512 inline __m128i narrow16_avx512(__m512i q) {
  return _mm_max_epi8(_mm512_cvtsepi32_epi8(q), _mm_set1_epi8(-127));
}

GOSSIP_TARGET_AVX512 inline __m128i quantize16_div_avx512(__m512 x, __m512 scale) {
  return narrow16_avx512(_mm512_cvtps_epi32(_mm512_div_ps(x, scale)));
}

GOSSIP_TARGET_AVX512 void quantize_avx512(const float* x, std::byte* q, size_t count, float scale,
                                          float inv_scale) {
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  if (inv_scale != 0.0f) {  // as in quantize_avx2
    const __m512 inv = _mm512_set1_ps(inv_scale);
    const __m512 near_tie = _mm512_set1_ps(0.5f - 0x1p-15f);
    for (; i + 32 <= count; i += 32) {
      const __m512 v0 = _mm512_mul_ps(_mm512_loadu_ps(x + i), inv);
      const __m512 v1 = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), inv);
      const __m512 frac =
          _mm512_max_ps(_mm512_abs_ps(_mm512_reduce_ps(v0, _MM_FROUND_TO_NEAREST_INT)),
                        _mm512_abs_ps(_mm512_reduce_ps(v1, _MM_FROUND_TO_NEAREST_INT)));
      if (_mm512_cmp_ps_mask(frac, near_tie, _CMP_GE_OQ) == 0) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                         narrow16_avx512(_mm512_cvtps_epi32(v0)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i + 16),
                         narrow16_avx512(_mm512_cvtps_epi32(v1)));
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                         quantize16_div_avx512(_mm512_loadu_ps(x + i), s));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i + 16),
                         quantize16_div_avx512(_mm512_loadu_ps(x + i + 16), s));
      }
    }
  }
  for (; i + 16 <= count; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     quantize16_div_avx512(_mm512_loadu_ps(x + i), s));
  if (i < count) {
    const __mmask16 k = static_cast<__mmask16>((1u << (count - i)) - 1);
    _mm_mask_storeu_epi8(q + i, k, quantize16_div_avx512(_mm512_maskz_loadu_ps(k, x + i), s));
  }
}

GOSSIP_TARGET_AVX512 void encode_blocks_avx512(const BlockArgs& args, size_t b0, size_t b1) {
  encode_blocks_chunked<max_abs_bits_avx512, quantize_avx512>(args, b0, b1);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// int8 -> float is exact and the product is one rounding, as in the portable loop.
GOSSIP_TARGET_AVX2 void decode_blocks_avx2(const std::byte* scales, const std::byte* q, float* y,
                                           size_t n, size_t block, size_t b0, size_t b1) {
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * block, hi = std::min(n, lo + block);
    const float s = load_f32(scales + 4 * b);
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), sv));
      _mm256_storeu_ps(
          y + i + 8,
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))), sv));
    }
    for (; i < hi; ++i) y[i] = static_cast<float>(static_cast<int8_t>(q[i])) * s;
  }
}

#endif  // GOSSIP_HAVE_X86_KERNELS

class Int8Codec final : public Codec {
 public:
  explicit Int8Codec(uint32_t block) : block_(block) {}

  proto::CodecId id() const override { return proto::CodecId::kInt8; }
  std::string spec() const override { return fmt::format("int8:{}", block_); }
  bool biased() const override { return false; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return 4 * blocks(n) + n; }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    const size_t n = x.size();
    const size_t nb = blocks(n);
    out.resize(4 * nb + n);
    // One flag per block (each written by one thread only) rather than a shared
    // error, so the first bad element can be named without a race.
    std::vector<uint8_t> bad(nb, 0);
    const BlockArgs args{x.data(), n, block_, out.data(), out.data() + 4 * nb, bad.data()};
    const Isa isa = active_isa();
    parallel_for(ctx.pool, nb, block_grain(), [&args, isa](size_t b0, size_t b1) {
#ifdef GOSSIP_HAVE_X86_KERNELS
      if (isa >= Isa::kAvx512) return encode_blocks_avx512(args, b0, b1);
      if (isa >= Isa::kAvx2) return encode_blocks_avx2(args, b0, b1);
#endif
      (void)isa;
      encode_blocks_portable(args, b0, b1);
    });
    auto first_bad = std::find(bad.begin(), bad.end(), 1);
    if (first_bad != bad.end()) {
      const size_t lo = static_cast<size_t>(first_bad - bad.begin()) * block_;
      size_t i = lo;
      while (std::isfinite(x[i])) ++i;
      out.clear();
      return Status::invalid(
          fmt::format("int8: cannot encode non-finite element {} ({})", i, x[i]));
    }
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    const size_t n = y.size();
    const size_t nb = blocks(n);
    if (in.size() != 4 * nb + n)
      return Status::protocol(fmt::format("int8:{}: payload is {} bytes, {} elements need {}",
                                          block_, in.size(), n, 4 * nb + n));
    const std::byte* scales = in.data();
    const std::byte* q = in.data() + 4 * nb;
    // Validate everything before writing y, so a bad payload leaves y untouched.
    for (size_t b = 0; b < nb; ++b) {
      const float s = load_f32(scales + 4 * b);
      // Anything the encoder can write: non-negative, and 127 * scale still finite.
      if (std::signbit(s) || !(s * kQmax <= std::numeric_limits<float>::max()))
        return Status::protocol(
            fmt::format("int8:{}: block {} has invalid scale {}", block_, b, s));
    }
    uint8_t has_min = 0;
    for (size_t i = 0; i < n; ++i) has_min |= static_cast<uint8_t>(q[i] == std::byte{0x80});
    if (has_min) {
      const size_t i = static_cast<size_t>(std::find(q, q + n, std::byte{0x80}) - q);
      return Status::protocol(
          fmt::format("int8:{}: element {} is -128, outside [-127, 127]", block_, i));
    }
    float* dst = y.data();
    const size_t block = block_;
    const Isa isa = active_isa();
    parallel_for(ctx.pool, nb, block_grain(), [=](size_t b0, size_t b1) {
#ifdef GOSSIP_HAVE_X86_KERNELS
      if (isa >= Isa::kAvx2) return decode_blocks_avx2(scales, q, dst, n, block, b0, b1);
#endif
      (void)isa;
      decode_blocks_portable(scales, q, dst, n, block, b0, b1);
    });
    return Status::ok();
  }

 private:
  uint64_t blocks(uint64_t n) const { return (n + block_ - 1) / block_; }
  size_t block_grain() const { return std::max<size_t>(1, kParallelGrain / block_); }

  uint32_t block_;
};

}  // namespace

std::unique_ptr<Codec> make_int8(uint32_t block) {
  return std::make_unique<Int8Codec>(std::max<uint32_t>(block, 1));
}

}  // namespace gossip::compression

// sign: one bit per element plus one scale per block, the scaled sign compressor of
// EF-signSGD (Karimireddy et al. 2019): x' = +scale where x >= 0, else -scale, with
// scale = mean |x| over the block. Zeros (+0 and -0) count as non-negative and
// decode to +scale; an all-zero block has scale 0 and decodes to zeros. Biased:
// use it with error feedback.
//
// Payload (little-endian): the ceil(n / block) scales as f32, then ceil(n / 8) bytes
// of sign bits, element i at bit i % 8 of byte i / 8 (LSB first), bit set = x >= 0;
// the last byte's unused bits are zero. 0.141 bytes per element at block 256.
//
// Non-finite input fails encode() with Status::invalid naming the first inf or NaN
// (its block's mean would be inf or NaN). The decoder checks the size, that scales
// are finite and non-negative, and the padding bits.

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "base/isa.h"
#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

// What the encoder's loops need. Scales and flags are written per block by the
// block's owner, sign bits per byte by the byte's owner.
struct EncodeArgs {
  const float* x;
  size_t n;
  size_t block;
  std::byte* scales;
  std::byte* bits;
  uint8_t* bad;
};

// mean |x| over [lo, hi): in double and in index order, so no overflow near fp32's
// max and the same sum whatever the thread split. The mean of finite floats fits in
// fp32.
float mean_abs(const float* x, size_t lo, size_t hi) {
  double sum = 0;
  for (size_t i = lo; i < hi; ++i) sum += std::fabs(static_cast<double>(x[i]));
  return static_cast<float>(sum / static_cast<double>(hi - lo));
}

void scales_portable(const EncodeArgs& args, size_t b0, size_t b1) {
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * args.block, hi = std::min(args.n, lo + args.block);
    // inf and NaN have the largest |x| bit patterns: one integer max finds them.
    uint32_t max_bits = 0;
    for (size_t i = lo; i < hi; ++i)
      max_bits = std::max(max_bits, std::bit_cast<uint32_t>(args.x[i]) & 0x7fffffffu);
    if (max_bits >= 0x7f800000u) {
      args.bad[b] = 1;
      continue;
    }
    store_f32(args.scales + 4 * b, mean_abs(args.x, lo, hi));
  }
}

// Bytes [g0, g1) of the sign bits.
void bits_portable(const float* x, size_t n, std::byte* bits, size_t g0, size_t g1) {
  for (size_t g = g0; g < g1; ++g) {
    const size_t lo = 8 * g, hi = std::min(n, lo + 8);
    uint32_t byte = 0;
    for (size_t i = lo; i < hi; ++i) byte |= static_cast<uint32_t>(x[i] >= 0.0f) << (i - lo);
    bits[g] = static_cast<std::byte>(byte);
  }
}

// y[i] = +-s for i in [lo, hi), branch-free: the sign bit of +-s comes straight from
// the packed bit.
inline void decode_span_portable(const std::byte* bits, uint32_t s_bits, float* y, size_t lo,
                                 size_t hi) {
  for (size_t i = lo; i < hi; ++i) {
    const uint32_t bit = (std::to_integer<uint32_t>(bits[i >> 3]) >> (i & 7)) & 1u;
    y[i] = std::bit_cast<float>(s_bits | ((bit ^ 1u) << 31));
  }
}

void decode_sign_blocks_portable(const std::byte* scales, const std::byte* bits, float* y, size_t n,
                                 size_t block, size_t b0, size_t b1) {
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * block, hi = std::min(n, lo + block);
    decode_span_portable(bits, std::bit_cast<uint32_t>(load_f32(scales + 4 * b)), y, lo, hi);
  }
}

// Stores block b's mean |x| for the vectorized versions, which sum in lanes, given
// the block's max |x| and min non-zero |x| (0 if none) as bits and that sum.
//
// The mean must equal mean_abs's, whose sum is sequential; a sum in another order
// gives the same double whenever the sequential sum is exact, as every partial sum
// then is in any order. It is exact when all |x| are multiples of u, the ulp of the
// smallest non-zero one (2^(f_min - 150) for a biased exponent f_min >= 1, denormals
// counting as 1), and the total, below count * 2^(f_max - 126), stays within 2^53 u:
// f_max - f_min <= 29 - ceil(log2(count)). Blocks beyond that (|x| spanning more
// than ~2^21 at block 256) are summed again in order.
inline void store_block_mean(const EncodeArgs& args, size_t b, size_t lo, size_t hi,
                             uint32_t max_bits, uint32_t min_bits, double sum) {
  if (max_bits >= 0x7f800000u) {
    args.bad[b] = 1;
    return;
  }
  const size_t count = hi - lo;
  const int f_max = static_cast<int>(max_bits >> 23);
  const int f_min = std::max(static_cast<int>(min_bits >> 23), 1);
  const int log2_count = count <= 1 ? 0 : static_cast<int>(std::bit_width(count - 1));
  const float mean = f_max - f_min <= 29 - log2_count
                         ? static_cast<float>(sum / static_cast<double>(count))
                         : mean_abs(args.x, lo, hi);
  store_f32(args.scales + 4 * b, mean);
}

#ifdef GOSSIP_HAVE_X86_KERNELS

// Sign bits of x[0..8): bit i set when x[i] >= 0 (false for NaN, true for -0).
GOSSIP_TARGET_AVX2 inline uint32_t sign_byte_avx2(__m256 v) {
  return static_cast<uint32_t>(
      _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ)));
}

GOSSIP_TARGET_AVX2 void bits_avx2(const float* x, size_t n, std::byte* bits, size_t g0, size_t g1) {
  const size_t full = std::min(g1, n / 8);  // bytes with all 8 elements present
  size_t g = g0;
  for (; g < full; ++g)
    bits[g] = static_cast<std::byte>(sign_byte_avx2(_mm256_loadu_ps(x + 8 * g)));
  if (g < g1) bits_portable(x, n, bits, g, g1);
}

GOSSIP_TARGET_AVX2 inline uint32_t hmax_epu32(__m256i m) {
  __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m4));
}

GOSSIP_TARGET_AVX2 inline uint32_t hmin_epu32(__m256i m) {
  __m128i m4 = _mm_min_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  m4 = _mm_min_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
  m4 = _mm_min_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m4));
}

// Scales (and, with_bits, the sign bits: then block % 8 == 0, so every byte lies in
// one block) in one pass over x.
GOSSIP_TARGET_AVX2 void blocks_avx2(const EncodeArgs& args, size_t b0, size_t b1, bool with_bits) {
  const float* xs = args.x;
  std::byte* const bits = args.bits;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i all_ones = _mm256_set1_epi32(-1);
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * args.block, hi = std::min(args.n, lo + args.block);
    __m256i mx = _mm256_setzero_si256(),
            mn = all_ones;  // max |x|; min |x| - 1 (zeros wrap to the top)
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd(), s2 = _mm256_setzero_pd(),
            s3 = _mm256_setzero_pd();
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
      const __m256 v0 = _mm256_loadu_ps(xs + i), v1 = _mm256_loadu_ps(xs + i + 8);
      const __m256i a0 = _mm256_and_si256(_mm256_castps_si256(v0), abs_mask);
      const __m256i a1 = _mm256_and_si256(_mm256_castps_si256(v1), abs_mask);
      mx = _mm256_max_epu32(mx, _mm256_max_epu32(a0, a1));
      mn = _mm256_min_epu32(
          mn, _mm256_min_epu32(_mm256_add_epi32(a0, all_ones), _mm256_add_epi32(a1, all_ones)));
      const __m256 f0 = _mm256_castsi256_ps(a0), f1 = _mm256_castsi256_ps(a1);
      s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(f0)));
      s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1)));
      s2 = _mm256_add_pd(s2, _mm256_cvtps_pd(_mm256_castps256_ps128(f1)));
      s3 = _mm256_add_pd(s3, _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1)));
      if (with_bits) {
        const uint32_t two = sign_byte_avx2(v0) | (sign_byte_avx2(v1) << 8);
        store_le16(bits + i / 8, static_cast<uint16_t>(two));
      }
    }
    uint32_t max_bits = hmax_epu32(mx),
             min_bits = hmin_epu32(mn) + 1;  // min non-zero |x|, 0 if none
    double sum = 0;
    {
      const __m256d s = _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3));
      const __m128d s2x = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
      sum = _mm_cvtsd_f64(_mm_add_sd(s2x, _mm_unpackhi_pd(s2x, s2x)));
    }
    if (with_bits)
      bits_portable(xs, args.n, bits, i / 8, (hi + 7) / 8);  // i is a multiple of 8 here
    for (; i < hi; ++i) {
      const uint32_t a = std::bit_cast<uint32_t>(xs[i]) & 0x7fffffffu;
      max_bits = std::max(max_bits, a);
      min_bits = std::min(min_bits - 1, a - 1) + 1;
      sum += static_cast<double>(std::bit_cast<float>(a));
    }
    store_block_mean(args, b, lo, hi, max_bits, min_bits, sum);
  }
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip
// -Wmaybe-uninitialized (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// blocks_avx2 on 16 lanes: what one block's loop carries.
struct BlockStats512 {
  __m512i max_abs;     // max |x| as bits
  __m512i min_abs_m1;  // min (|x| bits - 1): zeros wrap to the top and drop out
  __m512d sum_lo, sum_hi;
};

// Adds 16 elements (masked-off lanes loaded as 0, which changes nothing) and returns
// their sign bits, bit i set when x[i] >= 0.
GOSSIP_TARGET_AVX512 inline uint32_t add16_avx512(BlockStats512& st, __m512 v) {
  const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  st.max_abs = _mm512_max_epu32(st.max_abs, a);
  st.min_abs_m1 = _mm512_min_epu32(st.min_abs_m1, _mm512_add_epi32(a, _mm512_set1_epi32(-1)));
  const __m512 f = _mm512_castsi512_ps(a);
  st.sum_lo = _mm512_add_pd(st.sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
  st.sum_hi = _mm512_add_pd(st.sum_hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1)));
  return _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
}

GOSSIP_TARGET_AVX512 void blocks_avx512(const EncodeArgs& args, size_t b0, size_t b1,
                                        bool with_bits) {
  const float* xs = args.x;
  std::byte* const bits = args.bits;
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * args.block, hi = std::min(args.n, lo + args.block);
    // Two sets of accumulators, so that consecutive vectors do not wait on each other.
    BlockStats512 s0{_mm512_setzero_si512(), _mm512_set1_epi32(-1), _mm512_setzero_pd(),
                     _mm512_setzero_pd()};
    BlockStats512 s1 = s0;
    size_t i = lo;
    for (; i + 32 <= hi; i += 32) {
      const uint32_t m = add16_avx512(s0, _mm512_loadu_ps(xs + i)) |
                         (add16_avx512(s1, _mm512_loadu_ps(xs + i + 16)) << 16);
      if (with_bits) store_le32(bits + i / 8, m);
    }
    for (; i < hi; i += 16) {  // i is a multiple of 8 here when with_bits
      const size_t left = std::min<size_t>(16, hi - i);
      const __mmask16 k = static_cast<__mmask16>((1u << left) - 1);
      const uint32_t m = add16_avx512(s0, _mm512_maskz_loadu_ps(k, xs + i)) & k;
      if (with_bits) {
        bits[i / 8] = static_cast<std::byte>(m);
        if (left > 8) bits[i / 8 + 1] = static_cast<std::byte>(m >> 8);
      }
    }
    const uint32_t max_bits = _mm512_reduce_max_epu32(_mm512_max_epu32(s0.max_abs, s1.max_abs));
    const uint32_t min_bits =
        _mm512_reduce_min_epu32(_mm512_min_epu32(s0.min_abs_m1, s1.min_abs_m1)) + 1;
    const double sum = _mm512_reduce_add_pd(
        _mm512_add_pd(_mm512_add_pd(s0.sum_lo, s0.sum_hi), _mm512_add_pd(s1.sum_lo, s1.sum_hi)));
    store_block_mean(args, b, lo, hi, max_bits, min_bits, sum);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// 8 elements from one byte of sign bits: +-s, the sign taken from the bit.
GOSSIP_TARGET_AVX2 inline __m256 unpack_signs_avx2(uint32_t byte, __m256i s_bits) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i clear =
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(byte)), lane_bit),
                         _mm256_setzero_si256());
  return _mm256_castsi256_ps(_mm256_or_si256(s_bits, _mm256_slli_epi32(clear, 31)));
}

GOSSIP_TARGET_AVX2 void decode_sign_blocks_avx2(const std::byte* scales, const std::byte* bits,
                                                float* y, size_t n, size_t block, size_t b0,
                                                size_t b1) {
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * block, hi = std::min(n, lo + block);
    const uint32_t s_bits = std::bit_cast<uint32_t>(load_f32(scales + 4 * b));
    const __m256i sv = _mm256_set1_epi32(static_cast<int>(s_bits));
    size_t i = lo;
    // Element by element up to a byte boundary, whole bytes, then the rest.
    const size_t aligned = std::min(hi, (lo + 7) & ~size_t{7});
    decode_span_portable(bits, s_bits, y, i, aligned);
    for (i = aligned; i + 8 <= hi; i += 8)
      _mm256_storeu_ps(y + i, unpack_signs_avx2(std::to_integer<uint32_t>(bits[i / 8]), sv));
    decode_span_portable(bits, s_bits, y, i, hi);
  }
}

#endif  // GOSSIP_HAVE_X86_KERNELS

class SignCodec final : public Codec {
 public:
  explicit SignCodec(uint32_t block) : block_(block) {}

  proto::CodecId id() const override { return proto::CodecId::kSign; }
  std::string spec() const override { return fmt::format("sign:{}", block_); }
  bool biased() const override { return true; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return payload_bytes(n); }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    const size_t n = x.size();
    const size_t nb = blocks(n);
    out.assign(payload_bytes(n), std::byte{0});
    std::vector<uint8_t> bad(nb, 0);  // one writer per block
    const EncodeArgs args{x.data(), n, block_, out.data(), out.data() + 4 * nb, bad.data()};
    const Isa isa = active_isa();
    // With AVX2 and whole bytes per block, the sign bits come out of the same pass.
    const bool bits_done = isa >= Isa::kAvx2 && block_ % 8 == 0;
    parallel_for(ctx.pool, nb, block_grain(), [&args, isa, bits_done](size_t b0, size_t b1) {
#ifdef GOSSIP_HAVE_X86_KERNELS
      if (isa >= Isa::kAvx512) return blocks_avx512(args, b0, b1, bits_done);
      if (isa >= Isa::kAvx2) return blocks_avx2(args, b0, b1, bits_done);
#endif
      (void)isa, (void)bits_done;
      scales_portable(args, b0, b1);
    });
    auto first_bad = std::find(bad.begin(), bad.end(), 1);
    if (first_bad != bad.end()) {
      size_t i = static_cast<size_t>(first_bad - bad.begin()) * block_;
      while (std::isfinite(x[i])) ++i;
      out.clear();
      return Status::invalid(
          fmt::format("sign:{}: cannot encode non-finite element {} ({})", block_, i, x[i]));
    }
    if (bits_done) return Status::ok();
    // Bytes rather than blocks are the unit here: a block need not be a multiple of
    // eight, and two threads must never write the same byte.
    parallel_for(ctx.pool, (n + 7) / 8, kParallelGrain / 8, [&args, isa](size_t g0, size_t g1) {
#ifdef GOSSIP_HAVE_X86_KERNELS
      if (isa >= Isa::kAvx2) return bits_avx2(args.x, args.n, args.bits, g0, g1);
#endif
      (void)isa;
      bits_portable(args.x, args.n, args.bits, g0, g1);
    });
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    const size_t n = y.size();
    const size_t nb = blocks(n);
    if (in.size() != payload_bytes(n))
      return Status::protocol(fmt::format("sign:{}: payload is {} bytes, {} elements need {}",
                                          block_, in.size(), n, payload_bytes(n)));
    const std::byte* scales = in.data();
    const std::byte* bits = in.data() + 4 * nb;
    for (size_t b = 0; b < nb; ++b) {
      const float s = load_f32(scales + 4 * b);
      if (!std::isfinite(s) || std::signbit(s))
        return Status::protocol(
            fmt::format("sign:{}: block {} has invalid scale {}", block_, b, s));
    }
    if (n % 8 != 0 && (std::to_integer<uint32_t>(bits[n / 8]) >> (n % 8)) != 0)
      return Status::protocol(
          fmt::format("sign:{}: padding bits of the last byte are not zero", block_));
    float* dst = y.data();
    const size_t block = block_;
    const Isa isa = active_isa();
    parallel_for(ctx.pool, nb, block_grain(), [=](size_t b0, size_t b1) {
#ifdef GOSSIP_HAVE_X86_KERNELS
      if (isa >= Isa::kAvx2) return decode_sign_blocks_avx2(scales, bits, dst, n, block, b0, b1);
#endif
      (void)isa;
      decode_sign_blocks_portable(scales, bits, dst, n, block, b0, b1);
    });
    return Status::ok();
  }

 private:
  uint64_t blocks(uint64_t n) const { return (n + block_ - 1) / block_; }
  uint64_t payload_bytes(uint64_t n) const { return 4 * blocks(n) + (n + 7) / 8; }
  size_t block_grain() const { return std::max<size_t>(1, kParallelGrain / block_); }

  uint32_t block_;
};

}  // namespace

std::unique_ptr<Codec> make_sign(uint32_t block) {
  return std::make_unique<SignCodec>(std::max<uint32_t>(block, 1));
}

}  // namespace gossip::compression

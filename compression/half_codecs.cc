// fp16 and bf16: each element as one 16-bit float, round to nearest even (half.h).
// Payload: n little-endian u16, exactly 2n bytes. inf and NaN pass through (the
// daemon refuses NaN updates before they get here); values beyond fp16's range
// become inf, as an IEEE conversion does.
//
// Each direction has a portable loop over half.h's conversions and, on x86-64, an
// AVX2 + F16C one chosen at run time (isa.h) that writes the same bits.

#include <fmt/format.h>

#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "base/isa.h"
#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/half.h"
#include "compression/half_arrays.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

// Local pointers in every loop: a store through std::byte* may alias anything in
// memory, a closure included, and GCC would reload the pointers and not vectorize.

template <uint16_t (*ToHalf)(float)>
void encode_portable(const float* src, std::byte* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) store_le16(dst + 2 * i, ToHalf(src[i]));
}

template <float (*FromHalf)(uint16_t)>
void decode_portable(const std::byte* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FromHalf(load_le16(src + 2 * i));
}

#ifdef GOSSIP_HAVE_X86_KERNELS

// vcvtps2ph with rounding 0 (nearest even, whatever MXCSR says) is IEEE's
// conversion, which float_to_fp16 is too: denormal results, overflow to inf, and NaN
// made quiet (bit 9 set) with its sign and top 9 mantissa bits kept. Checked against
// float_to_fp16 over all 2^32 floats (dense_codecs_test, disabled by default).
GOSSIP_TARGET_AVX2 void fp16_encode_avx2(const float* src, std::byte* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    const __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_set_m128i(b, a));
  }
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  encode_portable<float_to_fp16>(src + i, dst + 2 * i, n - i);
}

// vcvtph2ps is exact, but it makes a signalling NaN quiet (sets float bit 22) where
// fp16_to_float keeps the payload as it is: clear that bit again for halves whose
// exponent is all ones and whose quiet bit (9) is clear (infinities have it clear
// already).
GOSSIP_TARGET_AVX2 inline __m256 fp16_to_float_avx2(__m128i h) {
  const __m256i h32 = _mm256_cvtepu16_epi32(h);
  const __m256i signalling = _mm256_cmpeq_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x7e00)),
                                                _mm256_set1_epi32(0x7c00));
  const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
  return _mm256_castsi256_ps(
      _mm256_andnot_si256(_mm256_and_si256(signalling, _mm256_set1_epi32(0x00400000)), f));
}

GOSSIP_TARGET_AVX2 void fp16_decode_avx2(const std::byte* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, fp16_to_float_avx2(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(dst + i + 8, fp16_to_float_avx2(_mm256_extracti128_si256(h, 1)));
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, fp16_to_float_avx2(
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  decode_portable<fp16_to_float>(src + 2 * i, dst + i, n - i);
}

// float_to_bf16 on 8 lanes, as 32-bit results.
GOSSIP_TARGET_AVX2 inline __m256i bf16_bits_avx2(__m256i u) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                                         _mm256_and_si256(_mm256_srli_epi32(u, 16), one)),
                        16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  // |u| > inf as signed 32-bit integers: both sides are below 2^31.
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

GOSSIP_TARGET_AVX2 void bf16_encode_avx2(const float* src, std::byte* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_bits_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b =
        bf16_bits_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // Every lane is below 2^16, so the saturating pack is a plain narrowing; it works
    // per 128-bit lane, and the permute puts the four quarters back in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), packed);
  }
  encode_portable<float_to_bf16>(src + i, dst + 2 * i, n - i);
}

#endif  // GOSSIP_HAVE_X86_KERNELS

// The loops of one 16-bit format: portable, and the AVX2 ones where there are any.
struct Fp16 {
  static constexpr proto::CodecId kId = proto::CodecId::kFp16;
  static constexpr const char* kName = "fp16";
  static void encode(Isa isa, const float* src, std::byte* dst, size_t n) {
#ifdef GOSSIP_HAVE_X86_KERNELS
    if (isa >= Isa::kAvx2) return fp16_encode_avx2(src, dst, n);
#endif
    (void)isa;
    encode_portable<float_to_fp16>(src, dst, n);
  }
  static void decode(Isa isa, const std::byte* src, float* dst, size_t n) {
#ifdef GOSSIP_HAVE_X86_KERNELS
    if (isa >= Isa::kAvx2) return fp16_decode_avx2(src, dst, n);
#endif
    (void)isa;
    decode_portable<fp16_to_float>(src, dst, n);
  }
};

struct Bf16 {
  static constexpr proto::CodecId kId = proto::CodecId::kBf16;
  static constexpr const char* kName = "bf16";
  static void encode(Isa isa, const float* src, std::byte* dst, size_t n) {
#ifdef GOSSIP_HAVE_X86_KERNELS
    if (isa >= Isa::kAvx2) return bf16_encode_avx2(src, dst, n);
#endif
    (void)isa;
    encode_portable<float_to_bf16>(src, dst, n);
  }
  // A shift per element: the portable loop already runs at memory speed.
  static void decode(Isa, const std::byte* src, float* dst, size_t n) {
    decode_portable<bf16_to_float>(src, dst, n);
  }
};

template <typename Format>
class HalfCodec final : public Codec {
 public:
  proto::CodecId id() const override { return Format::kId; }
  std::string spec() const override { return Format::kName; }
  bool biased() const override { return false; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return 2 * n; }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    out.resize(2 * x.size());
    const float* src = x.data();
    std::byte* dst = out.data();
    const Isa isa = active_isa();
    parallel_for(ctx.pool, x.size(), kParallelGrain, [src, dst, isa](size_t begin, size_t end) {
      Format::encode(isa, src + begin, dst + 2 * begin, end - begin);
    });
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    if (in.size() != 2 * static_cast<uint64_t>(y.size()))
      return Status::protocol(fmt::format("{}: payload is {} bytes, {} elements need {}",
                                          Format::kName, in.size(), y.size(), 2 * y.size()));
    const std::byte* src = in.data();
    float* dst = y.data();
    const Isa isa = active_isa();
    parallel_for(ctx.pool, y.size(), kParallelGrain, [src, dst, isa](size_t begin, size_t end) {
      Format::decode(isa, src + 2 * begin, dst + begin, end - begin);
    });
    return Status::ok();
  }
};

}  // namespace

std::unique_ptr<Codec> make_fp16() { return std::make_unique<HalfCodec<Fp16>>(); }

std::unique_ptr<Codec> make_bf16() { return std::make_unique<HalfCodec<Bf16>>(); }

void fp32_to_fp16(std::span<const float> src, std::byte* dst) {
  Fp16::encode(active_isa(), src.data(), dst, src.size());
}
void fp16_to_fp32(const std::byte* src, std::span<float> dst) {
  Fp16::decode(active_isa(), src, dst.data(), dst.size());
}
void fp32_to_bf16(std::span<const float> src, std::byte* dst) {
  Bf16::encode(active_isa(), src.data(), dst, src.size());
}
void bf16_to_fp32(const std::byte* src, std::span<float> dst) {
  Bf16::decode(active_isa(), src, dst.data(), dst.size());
}

}  // namespace gossip::compression

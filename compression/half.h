#pragma once
// fp32 <-> fp16 (IEEE binary16) and bf16 conversions, round to nearest even, with
// inf, NaN (kept quiet, sign kept) and denormals handled exactly. Plain integer
// arithmetic so that loops over them vectorize and every platform agrees bit for bit.

#include <cstdint>
#include <cstring>

namespace gossip::compression {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflows correctly to inf
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_fp16(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf (or is inf)
  if (a < 0x38800000u) {
    // fp16 denormal (or zero): value = m * 2^-24. Shift the full mantissa into place
    // and round to nearest even on the bits shifted out.
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest denormal
    uint32_t exp = a >> 23;
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14..24 for exp in [102, 112]
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  uint32_t r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // denormal: mant * 2^-24, exact in fp32
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return bits_float(sign | float_bits(v));
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace gossip::compression

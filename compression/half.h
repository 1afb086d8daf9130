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

// Every case is computed and the right one selected, without branches, so that
// loops over these functions vectorize.

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest even; overflows to inf
  uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_fp16(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest
  // even; a carry out of the mantissa gives the next exponent, or inf past 65504.
  uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14 (fp16 denormals): adding 0.5f puts the value's 2^-24 units in the
  // low mantissa bits, rounded to nearest even by the FPU itself.
  uint32_t denormal = float_bits(bits_float(a) + 0.5f) - 0x3f000000u;
  uint32_t quiet_nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t r = a < 0x38800000u ? denormal : normal;
  r = a >= 0x47800000u ? 0x7c00u : r;  // 65536 and above, inf
  r = a > 0x7f800000u ? quiet_nan : r;
  return static_cast<uint16_t>(sign | r);
}

inline float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t normal = ((exp + 112) << 23) | (mant << 13);
  uint32_t inf_nan = 0x7f800000u | (mant << 13);
  uint32_t denormal =
      float_bits(static_cast<float>(mant) * 5.9604644775390625e-8f);  // mant * 2^-24
  uint32_t r = exp == 0 ? denormal : (exp == 0x1f ? inf_nan : normal);
  return bits_float(sign | r);
}

}  // namespace gossip::compression

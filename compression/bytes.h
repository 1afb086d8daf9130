#pragma once
// Little-endian loads and stores of payload fields. Payload offsets are rarely
// aligned, so everything goes through memcpy (never a pointer cast); on the
// little-endian machines we build for the byte swap compiles away.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gossip::compression {

namespace bytes_detail {
inline uint16_t to_le(uint16_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap16(v);
  return v;
}
inline uint32_t to_le(uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap32(v);
  return v;
}
}  // namespace bytes_detail

inline void store_le16(std::byte* p, uint16_t v) {
  v = bytes_detail::to_le(v);
  std::memcpy(p, &v, 2);
}

inline uint16_t load_le16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return bytes_detail::to_le(v);
}

inline void store_le32(std::byte* p, uint32_t v) {
  v = bytes_detail::to_le(v);
  std::memcpy(p, &v, 4);
}

inline uint32_t load_le32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return bytes_detail::to_le(v);
}

inline void store_f32(std::byte* p, float f) { store_le32(p, std::bit_cast<uint32_t>(f)); }
inline float load_f32(const std::byte* p) { return std::bit_cast<float>(load_le32(p)); }

// True for inf and NaN; integer test, so that loops using it vectorize.
inline bool non_finite_bits(uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u; }

}  // namespace gossip::compression

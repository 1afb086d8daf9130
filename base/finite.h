#pragma once
// Whether a block of fp32 holds NaN or ±Inf: the sender's guard (daemon/nonfinite.h)
// and the receiver's check of every chunk (sgd/overlay/neighbor_exchange.h) both ask.

#include <bit>
#include <cstdint>
#include <span>

namespace gossip {

// Exponent bits all set: NaN or ±Inf. An integer OR over the bits, with no early
// exit, vectorizes where a floating-point test with a branch would not.
inline bool any_nonfinite(std::span<const float> x) {
  uint32_t bad = 0;
  for (float v : x) bad |= (std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u;
  return bad != 0;
}

}  // namespace gossip

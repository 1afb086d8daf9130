#pragma once
// What a block of fp32 holds: NaN or ±Inf, which the sender's guard
// (daemon/nonfinite.h) and the receiver's check of every chunk
// (sgd/overlay/neighbor_exchange.h) both ask; its L2 norm, which the divergence watch
// (daemon/divergence.h) and the elastic ring's check of a result
// (sgd/membership/peer_ring.h) take.

#include <bit>
#include <cmath>
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

// In double: a model of a billion parameters sums without losing its small values.
inline double l2_norm(std::span<const float> x) {
  double sum = 0;
  for (const float v : x) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

}  // namespace gossip

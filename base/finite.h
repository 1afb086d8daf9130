#pragma once
// What a block of fp32 holds: NaN or ±Inf, which the sender's guard
// (daemon/nonfinite.h) and the receiver's check of every chunk
// (sgd/overlay/neighbor_exchange.h) both ask; its L2 norm, which the divergence watch
// (daemon/divergence.h) and the elastic ring's check of a result
// (sgd/membership/peer_ring.h) take.
//
// The scan runs over every neighbor's chunk in every gossip round (2 billion elements
// a round in a 1,000-node simulation), so it has an AVX2 version chosen at run time
// (base/isa.h), as the gossip mix has (base/mix.h).

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/isa.h"

namespace gossip {

namespace finite_detail {
// Exponent bits all set: NaN or ±Inf. An integer OR over the bits, with no early
// exit, vectorizes where a floating-point test with a branch would not. Inlined into
// each version and compiled there for its target.
[[gnu::always_inline]] inline bool scan(const float* x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    bad |= (std::bit_cast<uint32_t>(x[i]) & 0x7f800000u) == 0x7f800000u;
  return bad != 0;
}
inline bool any_nonfinite_portable(const float* x, size_t n) { return scan(x, n); }
#ifdef GOSSIP_HAVE_X86_KERNELS
// AVX-512 gained nothing over AVX2 in a loop of the simulation's shape (base/mix.h).
GOSSIP_TARGET_AVX2 inline bool any_nonfinite_avx2(const float* x, size_t n) { return scan(x, n); }
#endif
}  // namespace finite_detail

inline bool any_nonfinite(std::span<const float> x) {
#ifdef GOSSIP_HAVE_X86_KERNELS
  if (active_isa() != Isa::kPortable) return finite_detail::any_nonfinite_avx2(x.data(), x.size());
#endif
  return finite_detail::any_nonfinite_portable(x.data(), x.size());
}

// In double: a model of a billion parameters sums without losing its small values.
inline double l2_norm(std::span<const float> x) {
  double sum = 0;
  for (const float v : x) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

}  // namespace gossip

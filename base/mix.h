#pragma once
// The gossip mix's step, acc[e] += w (v[e] - x[e]): a neighbor's share of a round,
// where x is this node's model and v the neighbor's (D-PSGD, async gossip, CHOCO-SGD).
//
// It runs once per neighbor and element in every gossip round (2 billion times a
// round in a 1,000-node simulation with 100k parameters), so it has an AVX2 version
// chosen at run time (base/isa.h). Not AVX-512: with it GCC fuses the multiply and
// the add (other bits), and it was slower than AVX2 in a loop of the simulation's shape
// (0.67 s a round against 0.57; SSE2 0.76). The loop is element-wise, and the AVX2
// target adds no FMA to what the file is compiled with, so both versions round alike:
// separately where FMA is off (every build of this project), fused in both where a
// file is compiled with it (-march=native).

#include <cassert>
#include <cstddef>
#include <span>

#include "base/isa.h"

namespace gossip {

namespace mix_detail {
// The loop, inlined into each version and compiled there for its target.
[[gnu::always_inline]] inline void loop(float* acc, const float* v, const float* x, float w,
                                        size_t n) {
  for (size_t e = 0; e < n; ++e) acc[e] += w * (v[e] - x[e]);
}
inline void portable(float* acc, const float* v, const float* x, float w, size_t n) {
  loop(acc, v, x, w, n);
}
#ifdef GOSSIP_HAVE_X86_KERNELS
GOSSIP_TARGET_AVX2 inline void avx2(float* acc, const float* v, const float* x, float w, size_t n) {
  loop(acc, v, x, w, n);
}
#endif
}  // namespace mix_detail

// v and x hold at least acc's size.
inline void add_weighted_difference(std::span<float> acc, std::span<const float> v,
                                    std::span<const float> x, float w) {
  assert(v.size() >= acc.size() && x.size() >= acc.size());
#ifdef GOSSIP_HAVE_X86_KERNELS
  if (active_isa() != Isa::kPortable)
    return mix_detail::avx2(acc.data(), v.data(), x.data(), w, acc.size());
#endif
  mix_detail::portable(acc.data(), v.data(), x.data(), w, acc.size());
}

}  // namespace gossip

#pragma once
// The all-reduces' inner loops (the ring's and sgd/collectives/'): plain loops over
// restrict pointers, so that the compiler vectorizes them (a span's elements may alias
// anything). The files that use them are built with -O3 (sgd/CMakeLists.txt); GCC 12
// vectorizes at -O2 only with the dynamic cost model that the top CMakeLists.txt sets.

#include <cstddef>

namespace gossip::sgd {

inline void add_into(float* __restrict dst, const float* __restrict in, size_t n) {
  for (size_t k = 0; k < n; ++k) dst[k] += in[k];
}

inline void divide(float* __restrict x, size_t count, float n) {
  for (size_t k = 0; k < count; ++k)
    x[k] /= n;  // a division, not * (1/n): the exact mean's rounding
}

}  // namespace gossip::sgd

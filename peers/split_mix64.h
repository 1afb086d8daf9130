#pragma once
// SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014; constants of Vigna's reference splitmix64.c). Used where every node
// must draw the same numbers from a shared seed without talking to anyone: each step
// is fixed 64-bit arithmetic, unlike std::uniform_int_distribution, whose algorithm
// differs between standard libraries.
//
// (compression/rng.h has the same mixer, but peers/ may not depend on compression/.)

#include <cassert>
#include <cstdint>

namespace gossip::peers {

// SplitMix64's finalizer: a bijective 64-bit mixer.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  static constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;

  explicit constexpr SplitMix64(uint64_t state) : state_(state) {}

  // A generator for the stream named by (seed, a, b), e.g. (shared seed, round, attempt):
  // counter based, so stream (s, r, k) does not depend on which streams were used before.
  static constexpr SplitMix64 keyed(uint64_t seed, uint64_t a, uint64_t b) {
    return SplitMix64(mix64(mix64(mix64(seed + kGamma) + a * kGamma) + b * kGamma));
  }

  constexpr uint64_t next() {
    state_ += kGamma;
    return mix64(state_);
  }

  // Uniform in [0, bound), bound > 0. Rejection instead of a bare modulo so that there is
  // no bias: 2^64 - threshold values remain, a multiple of bound.
  constexpr uint64_t below(uint64_t bound) {
    assert(bound > 0);
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (true) {
      const uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace gossip::peers

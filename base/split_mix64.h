#pragma once
// SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014; constants of Vigna's reference splitmix64.c): the one mixer behind every
// random number the nodes must agree on without talking (topologies, codec seeds,
// stochastic rounding, random-k indices) and the trainer's seeds. Each step is fixed
// 64-bit arithmetic, unlike std::uniform_int_distribution, whose algorithm differs
// between standard libraries. (compression/cuda/device_math.h repeats mix64 for device
// code; tests/compression/device_math_test.cc holds the two equal.)

#include <cassert>
#include <cstdint>

namespace gossip {

// SplitMix64's finalizer: a bijective 64-bit mixer that passes BigCrush when applied
// to a Weyl sequence.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The Weyl sequence's increment, 2^64 / φ.
inline constexpr uint64_t kWeyl = 0x9e3779b97f4a7c15ull;

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t state) : state_(state) {}

  // A generator for the stream named by (seed, a, b), e.g. (shared seed, round, attempt):
  // counter based, so stream (s, r, k) does not depend on which streams were used before.
  static constexpr SplitMix64 keyed(uint64_t seed, uint64_t a, uint64_t b) {
    return SplitMix64(mix64(mix64(mix64(seed + kWeyl) + a * kWeyl) + b * kWeyl));
  }

  constexpr uint64_t next() {
    state_ += kWeyl;
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

// Counter-based draws for stochastic codecs: the draw for element i depends only on
// (seed, i), never on which thread computed it or in which order, so a payload is
// identical whatever the thread split.

// The key of a stream: the seed mixed once, so that nearby seeds (0, 1, 2...) start
// far apart on the Weyl sequence.
constexpr uint64_t stream_key(uint64_t seed) { return mix64(seed ^ 0x6a09e667f3bcc909ull); }

// The i-th 64 random bits of the stream: element i of SplitMix64 started at key.
constexpr uint64_t counter_bits(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * kWeyl); }

// A uniform double in [0, 1) with 53 random bits (exact in double).
constexpr double counter_uniform(uint64_t key, uint64_t i) {
  return static_cast<double>(counter_bits(key, i) >> 11) * 0x1p-53;
}

}  // namespace gossip

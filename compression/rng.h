#pragma once
// Counter-based randomness for stochastic codecs: the draw for element i depends
// only on (seed, i), never on which thread computed it or in which order, so a
// payload is identical whatever the thread split.

#include <cstdint>

namespace gossip::compression {

// SplitMix64's finalizer (Steele, Lea & Flood 2014): a bijective 64-bit mixer
// that passes BigCrush when applied to a Weyl sequence.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline constexpr uint64_t kWeyl = 0x9e3779b97f4a7c15ull;

// The key of a stream: the seed mixed once, so that nearby seeds (0, 1, 2...)
// start far apart on the Weyl sequence.
inline uint64_t stream_key(uint64_t seed) { return mix64(seed ^ 0x6a09e667f3bcc909ull); }

// The i-th 64 random bits of the stream: element i of SplitMix64 started at key.
inline uint64_t counter_bits(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * kWeyl); }

// A uniform double in [0, 1) with 53 random bits.
inline double counter_uniform(uint64_t key, uint64_t i) {
  return static_cast<double>(counter_bits(key, i) >> 11) * 0x1p-53;
}

}  // namespace gossip::compression

#pragma once
// The rand-k positions for (seed, n, k), mirrored from randk_codec.cc (whose
// function is private to it); the derivation is part of the wire format, and
// tests/compression/device_math_test.cc checks this copy against the CPU codec.
//
// It runs on the host even for device buffers: Floyd's algorithm is a chain of k
// dependent steps (each draw advances one xoshiro256** state, whose rejection
// sampling consumes a data-dependent number of outputs, and each pick depends on
// the set so far), so a GPU could only run it in one thread, far slower than the
// CPU. The host sends the k indices to the device instead (8k bytes).

#include <bit>
#include <cstdint>
#include <vector>

namespace gossip::compression::cuda {

namespace randk_detail {

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman & Vigna 2018), seeded by four splitmix64 outputs.
class Xoshiro256ss {
 public:
  explicit Xoshiro256ss(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, bound), bound > 0, exact (Lemire 2019).
  uint64_t below(uint64_t bound) {
    auto m = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t floor = (0 - bound) % bound;
      while (low < floor) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t s_[4];
};

}  // namespace randk_detail

// The k kept positions among n, ascending: Floyd's algorithm over an n-bit bitmap.
inline std::vector<uint64_t> randk_indices(uint64_t seed, uint64_t n, uint64_t k) {
  std::vector<uint64_t> out;
  if (k == 0 || n == 0) return out;
  randk_detail::Xoshiro256ss rng(seed ^ (n * 0x9e3779b97f4a7c15ull) ^ 0x72616e646b5f7631ull);
  std::vector<uint64_t> bits((n + 63) / 64, 0);
  for (uint64_t j = n - k; j < n; ++j) {
    const uint64_t t = rng.below(j + 1);
    const uint64_t pick = (bits[t / 64] >> (t % 64)) & 1 ? j : t;
    bits[pick / 64] |= uint64_t{1} << (pick % 64);
  }
  out.reserve(k);
  for (uint64_t w = 0; w < bits.size(); ++w) {
    uint64_t word = bits[w];
    while (word) {
      out.push_back(w * 64 + static_cast<uint64_t>(std::countr_zero(word)));
      word &= word - 1;
    }
  }
  return out;
}

}  // namespace gossip::compression::cuda

#pragma once
// A seeded random source whose every distribution is written out here, so the same
// seed gives the same numbers with any standard library (std::uniform_int_distribution,
// std::shuffle and std::gamma_distribution are implementation-defined): every node must
// compute the same data split and the same initial model.

#include <cstdint>
#include <random>
#include <span>

namespace gossip::trainer {

// SplitMix64 finalizer: mixes a seed with a stream tag so that the streams used for
// different purposes (init, split, sampling per node) are unrelated.
uint64_t mix_seed(uint64_t seed, uint64_t stream);

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t next_u64() { return engine_(); }
  // Uniform in [0, 1), 53 bits.
  double uniform();
  // Uniform in [0, n), unbiased; n > 0.
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller).
  double normal();
  // Gamma(shape, 1), shape > 0 (Marsaglia & Tsang 2000; shape < 1 by boosting).
  double gamma(double shape);

  // Fisher-Yates.
  template <typename T>
  void shuffle(std::span<T> values) {
    for (size_t i = values.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(below(i));
      std::swap(values[i - 1], values[j]);
    }
  }

 private:
  std::mt19937_64 engine_;  // its output sequence is fixed by the standard
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

}  // namespace gossip::trainer

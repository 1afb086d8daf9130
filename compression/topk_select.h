#pragma once
// Top-k selection, as the top-k codec does it (topk_codec.cc describes both paths),
// for the codecs that build on it (composed_codec.cc).

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace gossip::compression {

class ThreadPool;

// The k entries of x of largest |x|, ties to the lower index: their indices,
// ascending, and values. approximate: Deep Gradient Compression's sampled threshold
// (seeded by `seed`), which keeps between k - topk_approx_slack(k) and k of them,
// always the largest. Fails on a non-finite x, naming the first such index.
Status select_topk(std::span<const float> x, uint64_t k, bool approximate, uint64_t seed,
                   ThreadPool* pool, std::vector<uint64_t>& indices, std::vector<float>& values);

// The shortfall an approximate selection may have: floor(k / 10).
inline uint64_t topk_approx_slack(uint64_t k) { return k / 10; }

}  // namespace gossip::compression

#pragma once
// The positions rand-k keeps for (seed, n, k): part of rand-k's wire format (the
// receiver derives them instead of reading them; randk_codec.cc describes the
// derivation). Shared by the CPU codec and the CUDA one, whose host side computes
// them too (device_codecs.h says why).

#include <cstdint>
#include <vector>

namespace gossip::compression {

// The k kept positions among n, ascending.
std::vector<uint64_t> randk_indices(uint64_t seed, uint64_t n, uint64_t k);

}  // namespace gossip::compression

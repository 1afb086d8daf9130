#pragma once
// Random D-regular graphs that every node derives identically from (seed, round).
//
// What is guaranteed, for 1 <= D < n with n*D even:
//   - the graph is simple (no self loops, no multi-edges) and every node has degree D;
//   - for D >= 2 it is connected: it is built around a random Hamiltonian cycle;
//     D = 1 is a random perfect matching (connected only for n = 2, but a new matching
//     every round mixes over rounds);
//   - the same (n, D, seed, round) gives the same graph on every platform: only
//     SplitMix64 and integer arithmetic decide, never a standard-library distribution.
// What is not: uniformity over all D-regular graphs (the cycle biases it). Random
// regular graphs are wanted here for their expansion, which this keeps.
//
// Construction: a random Hamiltonian cycle (degree 2), then the remaining D - 2 stubs
// per node paired at random, refusing pairs that would make a loop or a multi-edge (as
// in Steger & Wormald, "Generating random regular graphs quickly", 1999). When no
// valid pair is left the attempt restarts on a new stream; after max_attempts a random
// relabeling of the circulant graph with offsets 1..D/2 (and n/2 when D is odd) is
// returned, which is also simple, D-regular and connected.

#include <cstdint>
#include <vector>

namespace gossip::peers {

inline constexpr uint32_t kRandomRegularAttempts = 64;

// adjacency[i] = the neighbors of node i, sorted. Requires 1 <= degree < n, n*degree even.
std::vector<std::vector<uint32_t>> random_regular_graph(
    uint32_t n, uint32_t degree, uint64_t seed, uint64_t round,
    uint32_t max_attempts = kRandomRegularAttempts);

}  // namespace gossip::peers

#pragma once
// The all-reduce algorithms a node can run over its ring transport, and the choice
// between them (--allreduce-algorithm):
//  - ring: reduce-scatter + all-gather around the ring (sgd/collectives/ring_all_reduce.h),
//    bandwidth-optimal, 2(n - 1) latencies;
//  - tree: a pipelined binary tree, reduce up and broadcast down (2 log2 n latencies);
//  - butterfly: recursive halving and doubling (Rabenseifner), or whole-vector
//    recursive doubling for small buffers; log2 n steps each way;
//  - master: every node to rank 0 and back (the textbook's master-worker baseline).
// The ring talks to its two neighbors over one RingChannel; the others ("mesh"
// algorithms) get one channel per partner from RingTransport::connect_mesh.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "peers/ring_channel.h"
#include "sgd/collectives/ring_all_reduce.h"

namespace gossip::sgd {

enum class Algorithm : uint8_t { kRing = 0, kTree = 1, kButterfly = 2, kMaster = 3 };
inline constexpr Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree,
                                            Algorithm::kButterfly, Algorithm::kMaster};

std::string_view algorithm_name(Algorithm a);
std::optional<Algorithm> parse_algorithm(std::string_view name);

// The ranks that `rank` of n exchanges messages with under a mesh algorithm (tree,
// butterfly, master), ascending. The relation is symmetric: r is a partner of q
// exactly when q is a partner of r, so both ask for their link at once.
std::vector<uint32_t> mesh_partners(Algorithm a, uint32_t n, uint32_t rank);

// A mesh algorithm; one instance per node keeps its buffers between calls.
class MeshAllReduce {
 public:
  virtual ~MeshAllReduce() = default;
  // In place: data <- (1/n) sum over the n = o.size ranks, every rank ending with the
  // same bits. links[q] is the channel to rank q for every partner q of o.rank
  // (mesh_partners), null elsewhere. Every rank calls it with the same size, round
  // and options. On failure data is unchanged (o.restore_on_failure) and the channels
  // must not be used again.
  Status mean(std::span<peers::RingChannel* const> links, std::span<float> data,
              const RingOptions& o);

 protected:
  virtual Status run(std::span<peers::RingChannel* const> links, std::span<float> data,
                     const RingOptions& o) = 0;
  virtual Algorithm algorithm() const = 0;

 private:
  std::vector<float> backup_;
};

std::unique_ptr<MeshAllReduce> make_mesh_all_reduce(Algorithm a);  // not the ring

}  // namespace gossip::sgd

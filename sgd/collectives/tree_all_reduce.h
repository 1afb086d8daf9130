#pragma once
// Reduce up a rooted tree and broadcast down, pipelined chunk by chunk: a node adds
// its children's chunk c to its own and sends the sum to its parent; the root
// divides and sends the mean back down, each node forwarding it to its children. The
// broadcast of chunk c - depth runs while chunk c is reduced, so both directions of
// every link carry data at once.
//
// Two shapes:
//  - binary: a binary tree in heap order (rank r's parent is (r - 1) / 2): about
//    2 log2 n latencies, the algorithm for middle sizes where the ring's 2(n - 1)
//    latencies dominate;
//  - star: every rank's parent is rank 0, the master-worker baseline of the textbooks
//    (rank 0 receives and sends (n - 1) times the buffer).
//
// Codecs: fp16, bf16 and int8 compress every hop; the root encodes the mean once and
// keeps the decoded values itself, and the nodes below forward those bytes unchanged.
// The other codecs (and nothing else) travel as whole contributions, gathered up the
// tree and broadcast down (sgd/collectives/contributions.h).

#include <cstdint>
#include <span>
#include <vector>

#include "sgd/collectives/algorithm.h"
#include "sgd/collectives/contributions.h"

namespace gossip::sgd {

enum class TreeShape { kBinary, kStar };

// A rooted tree over ranks 0..n-1, rooted at 0.
class RootedTree {
 public:
  RootedTree(TreeShape shape, uint32_t n) : shape_(shape), n_(n) {}
  bool is_root(uint32_t r) const { return r == 0; }
  uint32_t parent(uint32_t r) const { return shape_ == TreeShape::kStar ? 0 : (r - 1) / 2; }
  std::vector<uint32_t> children(uint32_t r) const;
  std::vector<uint32_t> subtree(uint32_t r) const;  // r and its descendants, ascending
  std::vector<uint32_t> outside(uint32_t r) const;  // every rank not in subtree(r), ascending

 private:
  TreeShape shape_;
  uint32_t n_;
};

class TreeAllReduce final : public MeshAllReduce {
 public:
  explicit TreeAllReduce(TreeShape shape) : shape_(shape) {}

 protected:
  Status run(std::span<peers::RingChannel* const> links, std::span<float> data,
             const RingOptions& o) override;
  Algorithm algorithm() const override {
    return shape_ == TreeShape::kStar ? Algorithm::kMaster : Algorithm::kTree;
  }

 private:
  Status hops(mesh::Links& links, const RootedTree& tree, std::span<float> data,
              const RingOptions& o, const mesh::Coder& coder);
  Status gather(mesh::Links& links, const RootedTree& tree, std::span<float> data,
                const RingOptions& o, const mesh::Coder& coder);

  TreeShape shape_;
  std::vector<std::vector<float>> rx_;        // a child's chunk (float-aligned)
  std::vector<std::vector<std::byte>> tx_;    // encoded sums, alive until sent
  std::vector<std::vector<std::byte>> down_;  // the root's encoded mean, by chunk
  std::vector<float> scratch_;
  mesh::Contributions contributions_;
};

}  // namespace gossip::sgd

#pragma once
// How the training set is split across nodes.
//
//  iid           a seeded permutation cut into `nodes` shards whose sizes differ by at
//                most one; together they cover the set exactly once.
//  dirichlet:A   label skew (Hsu et al. 2019, "Measuring the effects of non-identical
//                data distribution"): for each class, proportions p ~ Dir(A, ..., A)
//                over the nodes and the class's samples dealt out by p. Small A (0.1)
//                gives each node few classes; large A (100) approaches iid.
//
// The split depends only on the labels, the partition, `nodes` and the seed, so every
// node computes the same split and takes its own shard.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::trainer {

struct Partition {
  enum class Kind { kIid, kDirichlet };
  Kind kind = Kind::kIid;
  double alpha = 0.0;  // kDirichlet only; > 0

  std::string to_string() const;
};

// Parses "iid" or "dirichlet:ALPHA" (ALPHA a positive finite number); the error lists
// the valid forms.
Result<Partition> parse_partition(std::string_view text);

// Every node's shard: indices into `labels`, sorted, each shard non-empty, shards
// disjoint and together covering all samples. Fails if nodes == 0, a label is not below
// num_classes, or there are fewer samples than nodes.
Result<std::vector<std::vector<uint32_t>>> make_shards(std::span<const uint8_t> labels,
                                                       size_t num_classes,
                                                       const Partition& partition, uint32_t nodes,
                                                       uint64_t seed);

}  // namespace gossip::trainer

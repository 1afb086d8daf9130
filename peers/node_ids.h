#pragma once
// Node ids of a gossip overlay. The topologies address nodes as 0..n-1 and every node
// derives the graph on its own, so all nodes must hold the same peer list, and that
// list must name each of 0..n-1 exactly once: a missing or doubled id would make the
// nodes disagree about who talks to whom.

#include <cstdint>
#include <span>

#include "base/status.h"

namespace gossip::peers {

// OK when `ids` (the peer list, this node included, in any order) is exactly
// {0, ..., ids.size()-1} and `self` is one of them. Otherwise invalid, with a message
// naming the duplicated ids, the missing ones and those out of range, or self.
Status check_node_ids(std::span<const uint32_t> ids, uint32_t self);

}  // namespace gossip::peers

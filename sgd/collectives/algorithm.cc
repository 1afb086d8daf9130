#include "sgd/collectives/algorithm.h"

#include <fmt/format.h>

#include <algorithm>

#include "sgd/collectives/butterfly_all_reduce.h"
#include "sgd/collectives/tree_all_reduce.h"

namespace gossip::sgd {

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kButterfly:
      return "butterfly";
    case Algorithm::kMaster:
      return "master";
  }
  return "?";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) {
  for (Algorithm a : kAlgorithms)
    if (algorithm_name(a) == name) return a;
  return std::nullopt;
}

std::vector<uint32_t> mesh_partners(Algorithm a, uint32_t n, uint32_t rank) {
  std::vector<uint32_t> out;
  switch (a) {
    case Algorithm::kRing:
      break;
    case Algorithm::kTree:
    case Algorithm::kMaster: {
      const RootedTree tree(a == Algorithm::kTree ? TreeShape::kBinary : TreeShape::kStar, n);
      out = tree.children(rank);
      if (!tree.is_root(rank)) out.push_back(tree.parent(rank));
      break;
    }
    case Algorithm::kButterfly:
      if (n > 1) out = Butterfly(n).partners(rank);
      break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status MeshAllReduce::mean(std::span<peers::RingChannel* const> links, std::span<float> data,
                           const RingOptions& o) {
  if (o.size == 0 || o.size > RingSchedule::kMaxRanks || o.rank >= o.size)
    return Status::invalid(fmt::format("all-reduce: rank {} of {} (at most {} nodes)", o.rank,
                                       o.size, RingSchedule::kMaxRanks));
  if (o.chunk_elems == 0 || o.depth == 0)
    return Status::invalid("all-reduce: chunk size and receive depth must be at least 1");
  if (links.size() != o.size)
    return Status::invalid(
        fmt::format("all-reduce: {} links for {} ranks (one slot per rank)", links.size(), o.size));
  if (o.size == 1 || data.empty()) return Status::ok();
  if (o.restore_on_failure) backup_.assign(data.begin(), data.end());
  Status st = run(links, data, o);
  if (!st.is_ok() && o.restore_on_failure) std::copy(backup_.begin(), backup_.end(), data.begin());
  return st;
}

std::unique_ptr<MeshAllReduce> make_mesh_all_reduce(Algorithm a) {
  switch (a) {
    case Algorithm::kTree:
      return std::make_unique<TreeAllReduce>(TreeShape::kBinary);
    case Algorithm::kMaster:
      return std::make_unique<TreeAllReduce>(TreeShape::kStar);
    case Algorithm::kButterfly:
      return std::make_unique<ButterflyAllReduce>();
    case Algorithm::kRing:
      break;
  }
  return nullptr;
}

}  // namespace gossip::sgd

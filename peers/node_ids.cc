#include "peers/node_ids.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace gossip::peers {

namespace {

// "3", "3 and 5", "3, 5 and 9", at most kShown of them, then "and 12 more".
std::string id_list(const std::vector<uint64_t>& ids) {
  constexpr size_t kShown = 8;
  std::string s;
  const size_t shown = std::min(ids.size(), kShown);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) s += (i + 1 == shown && ids.size() <= kShown) ? " and " : ", ";
    s += std::to_string(ids[i]);
  }
  if (ids.size() > kShown) s += fmt::format(" and {} more", ids.size() - kShown);
  return s;
}

const char* plural(const std::vector<uint64_t>& ids, const char* one, const char* many) {
  return ids.size() == 1 ? one : many;
}

}  // namespace

Status check_node_ids(std::span<const uint32_t> ids, uint32_t self) {
  const uint64_t n = ids.size();
  if (n == 0)
    return Status::invalid("the peer list is empty: it must name every node, this one included");

  std::vector<uint32_t> count(n, 0);
  std::vector<uint64_t> out_of_range, duplicated;
  for (uint32_t id : ids) {
    if (id >= n) {
      out_of_range.push_back(id);
    } else if (++count[id] == 2) {
      duplicated.push_back(id);
    }
  }
  if (!duplicated.empty())
    return Status::invalid(
        fmt::format("node {} {} {} more than once in the peer list; each node "
                    "must appear exactly once",
                    plural(duplicated, "id", "ids"), id_list(duplicated),
                    plural(duplicated, "appears", "appear")));
  std::vector<uint64_t> missing;
  for (uint64_t id = 0; id < n; ++id)
    if (count[id] == 0) missing.push_back(id);
  if (!missing.empty()) {
    std::sort(out_of_range.begin(), out_of_range.end());
    return Status::invalid(fmt::format(
        "the peer list has {} nodes, so their ids must be 0..{}: {} {} {} missing ({} {} out "
        "of range)",
        n, n - 1, plural(missing, "node", "nodes"), id_list(missing), plural(missing, "is", "are"),
        id_list(out_of_range), plural(out_of_range, "is", "are")));
  }
  if (self >= n)
    return Status::invalid(fmt::format(
        "this node's id {} is not in the peer list (ids 0..{}); every node must list itself", self,
        n - 1));
  return Status::ok();
}

}  // namespace gossip::peers

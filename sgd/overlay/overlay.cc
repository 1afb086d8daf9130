#include "sgd/overlay/overlay.h"

#include <fmt/format.h>

#include <algorithm>

namespace gossip::sgd {

Overlay::Overlay(std::string spec, uint64_t seed, std::unique_ptr<peers::Topology> first)
    : spec_(std::move(spec)), seed_(seed) {
  epochs_.push_back({0, std::move(first)});
}

const peers::Topology& Overlay::at(uint64_t round) const {
  auto it = std::upper_bound(epochs_.begin(), epochs_.end(), round,
                             [](uint64_t r, const Epoch& e) { return r < e.from; });
  return *std::prev(it)->topology;
}

std::vector<std::pair<uint64_t, const peers::Topology*>> Overlay::from(uint64_t round) const {
  std::vector<std::pair<uint64_t, const peers::Topology*>> out;
  for (size_t i = 0; i < epochs_.size(); ++i)
    if (i + 1 == epochs_.size() || epochs_[i + 1].from > round)
      out.emplace_back(std::max(round, epochs_[i].from), epochs_[i].topology.get());
  return out;
}

Result<std::unique_ptr<peers::Topology>> Overlay::make(uint32_t nodes) const {
  if (nodes - latest().size() > kMaxGrowth)
    return Status::invalid(fmt::format("node {} is more than {} ids past the overlay's {} nodes",
                                       nodes - 1, kMaxGrowth, latest().size()));
  auto t = peers::make_topology(spec_, nodes, seed_);
  if (!t)
    return t.status().with_context(
        fmt::format("the overlay '{}' cannot take a member {}", spec_, nodes - 1));
  return t;
}

Status Overlay::check_grow(uint32_t nodes) const {
  return nodes <= latest().size() ? Status::ok() : make(nodes).status();
}

Status Overlay::grow(uint32_t nodes, uint64_t round) {
  if (nodes <= latest().size()) return Status::ok();
  auto t = make(nodes);
  if (!t) return t.status();
  // Two joins for one round give two epochs from it: at() takes the later.
  epochs_.push_back({std::max(round, latest_from()), std::move(t).value()});
  return Status::ok();
}

}  // namespace gossip::sgd

#include "experiments/trainer/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "experiments/trainer/rng.h"

namespace gossip::trainer {
namespace {

constexpr uint64_t kSplitStream = 0x5350'4c49'54ULL;  // "SPLIT"

// Below this many samples per node a Dirichlet draw is redrawn (as in Hsu et al.'s
// and FedLab's code), so that a node's shard is never a handful of images.
constexpr size_t kMinDirichletShard = 10;
constexpr int kMaxDirichletDraws = 100;

std::vector<std::vector<uint32_t>> iid_shards(size_t n, uint32_t nodes, Rng& rng) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  rng.shuffle(std::span<uint32_t>(order));
  std::vector<std::vector<uint32_t>> shards(nodes);
  size_t begin = 0;
  for (uint32_t k = 0; k < nodes; ++k) {
    const size_t len = n / nodes + (k < n % nodes ? 1 : 0);
    shards[k].assign(order.begin() + static_cast<ptrdiff_t>(begin),
                     order.begin() + static_cast<ptrdiff_t>(begin + len));
    begin += len;
  }
  return shards;
}

std::vector<std::vector<uint32_t>> dirichlet_draw(
    const std::vector<std::vector<uint32_t>>& by_class, uint32_t nodes, double alpha, Rng& rng) {
  std::vector<std::vector<uint32_t>> shards(nodes);
  std::vector<double> p(nodes);
  for (const auto& members : by_class) {
    double sum = 0;
    for (auto& x : p) sum += (x = rng.gamma(alpha));
    if (!(sum > 0)) {  // every draw underflowed: fall back to an even split
      std::fill(p.begin(), p.end(), 1.0);
      sum = nodes;
    }
    // Deal the class out by cumulative proportions, so the counts add up exactly.
    double cumulative = 0;
    size_t begin = 0;
    for (uint32_t k = 0; k < nodes; ++k) {
      cumulative += p[k];
      const size_t end =
          k + 1 == nodes ? members.size()
                         : std::min(members.size(),
                                    static_cast<size_t>(std::llround(
                                        cumulative / sum * static_cast<double>(members.size()))));
      for (size_t i = begin; i < end; ++i) shards[k].push_back(members[i]);
      begin = std::max(begin, end);
    }
  }
  return shards;
}

size_t smallest(const std::vector<std::vector<uint32_t>>& shards) {
  size_t m = SIZE_MAX;
  for (const auto& s : shards) m = std::min(m, s.size());
  return m;
}

}  // namespace

std::string Partition::to_string() const {
  return kind == Kind::kIid ? "iid" : fmt::format("dirichlet:{}", alpha);
}

Result<Partition> parse_partition(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::invalid(fmt::format(
        "--partition '{}': {}; valid forms: iid, dirichlet:ALPHA (ALPHA > 0, e.g. dirichlet:0.1)",
        text, why));
  };
  if (text == "iid") return Partition{};
  constexpr std::string_view kPrefix = "dirichlet:";
  if (!text.starts_with(kPrefix)) return bad("unknown partition");
  const std::string_view number = text.substr(kPrefix.size());
  double alpha = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), alpha);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size()) {
    return bad("ALPHA is not a number");
  }
  if (!std::isfinite(alpha) || alpha <= 0) return bad("ALPHA must be a positive number");
  return Partition{Partition::Kind::kDirichlet, alpha};
}

Result<std::vector<std::vector<uint32_t>>> make_shards(std::span<const uint8_t> labels,
                                                       size_t num_classes,
                                                       const Partition& partition, uint32_t nodes,
                                                       uint64_t seed) {
  if (nodes == 0) return Status::invalid("cannot split the training set into 0 shards");
  if (labels.size() < nodes) {
    return Status::invalid(
        fmt::format("cannot split {} samples into {} non-empty shards", labels.size(), nodes));
  }
  if (labels.size() > UINT32_MAX) return Status::invalid("training set too large to shard");
  Rng rng(mix_seed(seed, kSplitStream));
  std::vector<std::vector<uint32_t>> shards;

  if (partition.kind == Partition::Kind::kIid) {
    shards = iid_shards(labels.size(), nodes, rng);
  } else {
    if (!(partition.alpha > 0) || !std::isfinite(partition.alpha)) {
      return Status::invalid(fmt::format("dirichlet alpha must be > 0, got {}", partition.alpha));
    }
    std::vector<std::vector<uint32_t>> by_class(num_classes);
    for (size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] >= num_classes) {
        return Status::invalid(
            fmt::format("label {} of sample {} is not below {}", labels[i], i, num_classes));
      }
      by_class[labels[i]].push_back(static_cast<uint32_t>(i));
    }
    for (auto& members : by_class) rng.shuffle(std::span<uint32_t>(members));

    const size_t min_size = std::min(kMinDirichletShard, labels.size() / nodes);
    for (int draw = 0; draw < kMaxDirichletDraws; ++draw) {
      shards = dirichlet_draw(by_class, nodes, partition.alpha, rng);
      if (smallest(shards) >= min_size) break;
    }
    // Still too small after many draws (many nodes, tiny alpha): move samples from the
    // largest shard, which keeps the skew of every other shard intact.
    for (auto& shard : shards) {
      while (shard.size() < min_size) {
        auto largest =
            std::max_element(shards.begin(), shards.end(),
                             [](const auto& a, const auto& b) { return a.size() < b.size(); });
        shard.push_back(largest->back());
        largest->pop_back();
      }
    }
  }
  for (auto& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

}  // namespace gossip::trainer

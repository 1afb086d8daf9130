#include "peers/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <optional>
#include <utility>

#include "peers/topologies.h"

namespace gossip::peers {

const char* topology_forms() {
  return "ring, torus[:RxC], exponential, one-peer-exponential, random-regular:D, complete";
}

std::vector<uint32_t> Topology::in_neighbors(uint32_t node, uint64_t round) const {
  assert(!directed());  // directed topologies override this
  return out_neighbors(node, round);
}

MixingWeights Topology::mixing_row(uint32_t node, uint64_t round) const {
  MixingWeights row;
  if (!directed()) {
    // Metropolis-Hastings: symmetric, and W_ii = 1/(1+d_i) or more, never negative.
    const std::vector<uint32_t> nbrs = out_neighbors(node, round);
    double sum = 0;
    for (uint32_t j : nbrs) {
      const size_t d = std::max(nbrs.size(), out_neighbors(j, round).size());
      const double w = 1.0 / static_cast<double>(1 + d);
      row.peers.push_back({j, w});
      sum += w;
    }
    row.self = 1.0 - sum;
    return row;
  }
  // Push weights: node j gives 1/(d_out(j)+1) to each out-neighbor, node i among them.
  for (uint32_t j : in_neighbors(node, round)) {
    const double w = 1.0 / static_cast<double>(1 + out_neighbors(j, round).size());
    row.peers.push_back({j, w});
  }
  row.self = 1.0 / static_cast<double>(1 + out_neighbors(node, round).size());
  return row;
}

MixingWeights Topology::mixing_column(uint32_t node, uint64_t round) const {
  if (!directed()) return mixing_row(node, round);  // W is symmetric
  MixingWeights column;
  const std::vector<uint32_t> outs = out_neighbors(node, round);
  const double w = 1.0 / static_cast<double>(1 + outs.size());
  for (uint32_t j : outs) column.peers.push_back({j, w});
  column.self = w;
  return column;
}

namespace {

Status bad(std::string_view spec, uint32_t n, const std::string& why) {
  return Status::invalid(
      fmt::format("topology '{}' on {} node{}: {}", spec, n, n == 1 ? "" : "s", why));
}

Result<uint32_t> parse_u32(std::string_view text) {
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return Status::invalid(fmt::format("'{}' is not a whole number", text));
  return v;
}

// The most square factorization rows x cols = n with 2 <= rows <= cols, or none.
std::optional<std::pair<uint32_t, uint32_t>> square_factors(uint32_t n) {
  for (auto r = static_cast<uint32_t>(std::sqrt(static_cast<double>(n))) + 1; r >= 2; --r)
    if (uint64_t{r} * r <= n && n % r == 0) return std::pair{r, n / r};
  return std::nullopt;
}

Result<std::unique_ptr<Topology>> make_torus(std::string_view spec, std::string_view arg,
                                             uint32_t n) {
  if (arg.empty()) {
    auto f = square_factors(n);
    if (!f)
      return bad(spec, n,
                 fmt::format("a torus needs n = rows x cols with rows, cols >= 2, and {} has no "
                             "such factorization{}; use ring, or a node count like 8 (2x4) or 9 "
                             "(3x3)",
                             n, n > 1 ? " (it is prime)" : ""));
    return std::unique_ptr<Topology>(std::make_unique<Torus>(f->first, f->second));
  }
  const size_t x = arg.find('x');
  if (x == std::string_view::npos)
    return bad(spec, n,
               fmt::format("torus dimensions must read RxC (e.g. torus:3x4), got '{}'", arg));
  auto rows = parse_u32(arg.substr(0, x));
  auto cols = parse_u32(arg.substr(x + 1));
  if (!rows || !cols)
    return bad(spec, n,
               fmt::format("torus dimensions must read RxC (e.g. torus:3x4): {}",
                           (!rows ? rows.status() : cols.status()).message()));
  if (*rows < 2 || *cols < 2)
    return bad(
        spec, n,
        fmt::format("both torus sides must be at least 2, got {}x{} (use ring)", *rows, *cols));
  if (uint64_t{*rows} * *cols != n)
    return bad(spec, n,
               fmt::format("a {}x{} torus has {} nodes, not {}", *rows, *cols,
                           uint64_t{*rows} * *cols, n));
  return std::unique_ptr<Topology>(std::make_unique<Torus>(*rows, *cols));
}

Result<std::unique_ptr<Topology>> make_random_regular(std::string_view spec, std::string_view arg,
                                                      uint32_t n, uint64_t seed) {
  if (arg.empty())
    return bad(spec, n, "random-regular needs a degree: random-regular:D, e.g. random-regular:4");
  auto d = parse_u32(arg);
  if (!d) return bad(spec, n, "the degree D " + d.status().message());
  if (*d < 1 || *d >= n)
    return bad(spec, n,
               n == 1 ? std::string("a single node has no one to be regular with; use ring")
                      : fmt::format("the degree must be in [1, {}] (at least one neighbor, and "
                                    "fewer than n), got {}",
                                    n - 1, *d));
  if ((uint64_t{n} * *d) % 2 != 0)
    return bad(spec, n,
               fmt::format("n*D must be even (every edge has two ends): {} nodes cannot all have "
                           "odd degree {}; use an even degree or an even node count",
                           n, *d));
  return std::unique_ptr<Topology>(std::make_unique<RandomRegular>(n, *d, seed));
}

// Whether every node can reach every other over the edges of one period (for the
// time-varying graphs whose period is known); random graphs are connected by
// construction (random_regular.h). A failure here is a bug in a topology.
bool connected_over_period(const Topology& t) {
  const uint32_t n = t.size();
  std::vector<char> seen(n, 0);
  std::vector<uint32_t> frontier = {0};
  seen[0] = 1;
  uint32_t reached = 1;
  while (!frontier.empty()) {
    const uint32_t v = frontier.back();
    frontier.pop_back();
    for (uint64_t r = 0; r < t.period(); ++r)
      for (uint32_t w : t.out_neighbors(v, r))
        if (!seen[w]) {
          seen[w] = 1;
          ++reached;
          frontier.push_back(w);
        }
  }
  return reached == n;
}

Result<std::unique_ptr<Topology>> build(std::string_view spec, uint32_t n, uint64_t seed) {
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const bool has_arg = colon != std::string_view::npos;
  const std::string_view arg = has_arg ? spec.substr(colon + 1) : "";
  if (has_arg && arg.empty())
    return bad(spec, n, fmt::format("nothing after ':' (valid forms: {})", topology_forms()));
  if (name == "torus") return make_torus(spec, arg, n);
  if (name == "random-regular") return make_random_regular(spec, arg, n, seed);

  std::unique_ptr<Topology> t;
  if (name == "ring") t = std::make_unique<Ring>(n);
  if (name == "exponential") t = std::make_unique<Exponential>(n);
  if (name == "one-peer-exponential") t = std::make_unique<OnePeerExponential>(n);
  if (name == "complete") t = std::make_unique<Complete>(n);
  if (!t)
    return Status::invalid(
        fmt::format("unknown topology '{}' (valid forms: {})", name, topology_forms()));
  if (has_arg)
    return bad(spec, n,
               fmt::format("'{}' takes no parameter (valid forms: {})", name, topology_forms()));
  return t;
}

}  // namespace

Result<std::unique_ptr<Topology>> make_topology(std::string_view spec, uint32_t n, uint64_t seed) {
  if (n == 0) return bad(spec, n, "a topology needs at least one node");
  auto made = build(spec, n, seed);
  if (made && (*made)->period() != 0 && !connected_over_period(**made))
    return bad(spec, n, "the graph is not connected over one period (a bug in the topology)");
  return made;
}

}  // namespace gossip::peers

#include "peers/random_regular.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <numeric>
#include <utility>

#include "base/split_mix64.h"
#include "peers/topologies.h"

namespace gossip::peers {

namespace {

using Adjacency = std::vector<std::vector<uint32_t>>;

// Streams of one (seed, round): attempts 0..max-1, then the fallback's relabeling.
constexpr uint64_t kFallbackStream = ~uint64_t{0};

bool adjacent(const Adjacency& adj, uint32_t u, uint32_t v) {
  return std::find(adj[u].begin(), adj[u].end(), v) != adj[u].end();
}

void connect(Adjacency& adj, uint32_t u, uint32_t v) {
  adj[u].push_back(v);
  adj[v].push_back(u);
}

// Fisher-Yates with our own uniform draw (std::shuffle's use of the generator is
// implementation defined).
std::vector<uint32_t> random_permutation(uint32_t n, SplitMix64& rng) {
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0u);
  for (uint32_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.below(i)]);
  return p;
}

void remove_stub(std::vector<uint32_t>& stubs, size_t i) {
  stubs[i] = stubs.back();
  stubs.pop_back();
}

// Pairs the stubs at random into edges that keep the graph simple. Random tries are
// cheap while most pairs are valid; after `patience` failures in a row the valid pairs
// are enumerated, and if there are none this attempt is stuck (returns false).
bool pair_stubs(std::vector<uint32_t> stubs, Adjacency& adj, SplitMix64& rng) {
  const uint32_t patience = 64;
  uint32_t failures = 0;
  while (!stubs.empty()) {
    size_t i = rng.below(stubs.size());
    size_t j = rng.below(stubs.size() - 1);
    if (j >= i) ++j;
    const uint32_t u = stubs[i], v = stubs[j];
    if (u != v && !adjacent(adj, u, v)) {
      connect(adj, u, v);
      remove_stub(stubs, std::max(i, j));  // the larger first: it may be the last one
      remove_stub(stubs, std::min(i, j));
      failures = 0;
      continue;
    }
    if (++failures < patience) continue;

    std::vector<uint32_t> nodes = stubs;
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    std::vector<std::pair<uint32_t, uint32_t>> valid;
    for (size_t a = 0; a < nodes.size(); ++a)
      for (size_t b = a + 1; b < nodes.size(); ++b)
        if (!adjacent(adj, nodes[a], nodes[b])) valid.emplace_back(nodes[a], nodes[b]);
    if (valid.empty()) return false;
    const auto [a, b] = valid[rng.below(valid.size())];
    connect(adj, a, b);
    remove_stub(stubs,
                static_cast<size_t>(std::find(stubs.begin(), stubs.end(), a) - stubs.begin()));
    remove_stub(stubs,
                static_cast<size_t>(std::find(stubs.begin(), stubs.end(), b) - stubs.begin()));
    failures = 0;
  }
  return true;
}

bool try_draw(uint32_t n, uint32_t degree, SplitMix64& rng, Adjacency& adj) {
  adj.assign(n, {});
  const std::vector<uint32_t> perm = random_permutation(n, rng);
  if (degree == 1) {  // n is even: a random perfect matching
    for (uint32_t k = 0; k + 1 < n; k += 2) connect(adj, perm[k], perm[k + 1]);
    return true;
  }
  // degree >= 2 implies n >= 3, so the cycle is simple.
  for (uint32_t k = 0; k < n; ++k) connect(adj, perm[k], perm[(k + 1) % n]);
  std::vector<uint32_t> stubs;
  stubs.reserve(size_t{n} * (degree - 2));
  for (uint32_t v = 0; v < n; ++v) stubs.insert(stubs.end(), degree - 2, v);
  return pair_stubs(std::move(stubs), adj, rng);
}

// Offsets 1..D/2 (plus n/2 when D is odd, n then even) are distinct and below n/2, so
// the circulant graph is simple and D-regular; offset 1 connects it.
Adjacency relabeled_circulant(uint32_t n, uint32_t degree, SplitMix64& rng) {
  Adjacency adj(n);
  const std::vector<uint32_t> perm = random_permutation(n, rng);
  for (uint32_t s = 1; s <= degree / 2; ++s)
    for (uint32_t i = 0; i < n; ++i) connect(adj, perm[i], perm[(i + s) % n]);
  if (degree % 2 == 1)
    for (uint32_t i = 0; i < n / 2; ++i) connect(adj, perm[i], perm[i + n / 2]);
  return adj;
}

}  // namespace

std::vector<std::vector<uint32_t>> random_regular_graph(uint32_t n, uint32_t degree, uint64_t seed,
                                                        uint64_t round, uint32_t max_attempts) {
  assert(degree >= 1 && degree < n && (uint64_t{n} * degree) % 2 == 0);
  Adjacency adj;
  bool drawn = false;
  for (uint32_t attempt = 0; attempt < max_attempts && !drawn; ++attempt) {
    SplitMix64 rng = SplitMix64::keyed(seed, round, attempt);
    drawn = try_draw(n, degree, rng, adj);
  }
  if (!drawn) {
    SplitMix64 rng = SplitMix64::keyed(seed, round, kFallbackStream);
    adj = relabeled_circulant(n, degree, rng);
  }
  for (auto& list : adj) std::sort(list.begin(), list.end());
  return adj;
}

RandomRegular::RandomRegular(uint32_t n, uint32_t degree, uint64_t seed)
    : Topology(n), degree_(degree), seed_(seed) {
  assert(degree >= 1 && degree < n && (uint64_t{n} * degree) % 2 == 0);
}

std::string RandomRegular::spec() const { return fmt::format("random-regular:{}", degree_); }

std::string RandomRegular::describe() const {
  const std::string shape =
      degree_ == 1 ? "a random perfect matching: disconnected within a round for n > 2, "
                     "mixing only across rounds"
                   : "simple and connected (built around a random Hamiltonian cycle)";
  return fmt::format(
      "random {}-regular graph on {} nodes, re-drawn every round from the shared seed {}: {}",
      degree_, size(), seed_, shape);
}

std::vector<uint32_t> RandomRegular::out_neighbors(uint32_t node, uint64_t round) const {
  assert(node < size());
  return (*graph(round))[node];
}

std::shared_ptr<const RandomRegular::Adjacency> RandomRegular::graph(uint64_t round) const {
  {
    std::lock_guard lock(mu_);
    if (cached_ && cached_round_ == round) return cached_;
  }
  // Drawn outside the lock: two threads may both draw a round, and get the same graph.
  auto fresh =
      std::make_shared<const Adjacency>(random_regular_graph(size(), degree_, seed_, round));
  std::lock_guard lock(mu_);
  cached_round_ = round;
  cached_ = fresh;
  return fresh;
}

}  // namespace gossip::peers

#pragma once
// The gossip overlay: which nodes exchange models in which round, and with which
// weights. Pure logic, no I/O: every node derives the same graph for the same round
// from (spec, n, seed) alone, without talking to anyone.
//
// Spec strings, as users write them on the command line and in configs:
//   ring | torus[:RxC] | exponential | one-peer-exponential | random-regular:D | complete
//
// Mixing weights (x_i <- W_ii x_i + sum_j W_ij x_j):
//   - undirected graphs: Metropolis-Hastings, W_ij = 1 / (1 + max(d_i, d_j)) for
//     neighbors and W_ii = 1 - sum_j W_ij. W is symmetric and doubly stochastic
//     (Xiao & Boyd, "Fast linear iterations for distributed averaging", 2004).
//   - directed graphs: uniform push weights, node j keeps 1 / (d_out(j) + 1) of what it
//     holds and sends as much to each out-neighbor. W is column stochastic, which is
//     what push-sum needs (Kempe, Dobra & Gehrke 2003; SGP, Assran et al. 2019).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::peers {

struct WeightedPeer {
  uint32_t node = 0;
  double weight = 0;
};

// One node's share of the mixing matrix W for one round. As a row (mixing_row): W_ii and
// W_ij for each in-neighbor j, what node i multiplies what it receives by. As a column
// (mixing_column): W_ii and W_ji for each out-neighbor j, what node i keeps and what it
// sends to whom. Peers are sorted by node id.
struct MixingWeights {
  double self = 1;
  std::vector<WeightedPeer> peers;
};

// Every method is const and safe to call from several threads at once.
class Topology {
 public:
  virtual ~Topology() = default;

  uint32_t size() const { return n_; }

  // The canonical spec: make_topology(spec(), size(), seed) builds the same topology.
  // Choices made for the user are spelled out ("torus" on 12 nodes is "torus:3x4").
  virtual std::string spec() const = 0;
  // One line for the start-up log: the graph, the degree, and what happens for this n.
  virtual std::string describe() const = 0;

  // Directed: out_neighbors and in_neighbors differ, weights are push weights.
  virtual bool directed() const = 0;
  // Rounds after which the graph repeats: 1 for a static graph, 0 when it never
  // repeats (re-drawn at random every round).
  virtual uint64_t period() const { return 1; }
  bool time_varying() const { return period() != 1; }

  // Whom `node` sends to / receives from in `round`, sorted, without `node` itself.
  // Requires node < size().
  virtual std::vector<uint32_t> out_neighbors(uint32_t node, uint64_t round) const = 0;
  virtual std::vector<uint32_t> in_neighbors(uint32_t node, uint64_t round) const;

  MixingWeights mixing_row(uint32_t node, uint64_t round) const;
  MixingWeights mixing_column(uint32_t node, uint64_t round) const;

 protected:
  explicit Topology(uint32_t n) : n_(n) {}

 private:
  uint32_t n_;
};

// Builds the topology named by `spec` on nodes 0..n-1. `seed` matters only for
// random-regular, and must be the same on every node. Fails with a message that names
// the problem and, for an unknown name, lists the valid forms: n = 0, a torus on a
// prime n, random-regular:D with D outside [1, n-1] or n*D odd.
Result<std::unique_ptr<Topology>> make_topology(std::string_view spec, uint32_t n,
                                                uint64_t seed = 0);

// The valid forms, for error messages and --help.
const char* topology_forms();

}  // namespace gossip::peers

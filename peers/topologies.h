#pragma once
// The concrete topologies behind make_topology(). Constructors take parameters that
// make_topology has already validated; they assert (a bug) rather than fail.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "peers/topology.h"

namespace gossip::peers {

// i <-> i +- 1 (mod n). Degree 2 (1 for n = 2, 0 for n = 1).
class Ring final : public Topology {
 public:
  explicit Ring(uint32_t n) : Topology(n) {}
  std::string spec() const override { return "ring"; }
  std::string describe() const override;
  bool directed() const override { return false; }
  std::vector<uint32_t> out_neighbors(uint32_t node, uint64_t round) const override;
};

// rows x cols grid with wrap-around, node = row * cols + col; i <-> its four grid
// neighbors. A side of length 2 gives one neighbor along it (up = down), so the degree
// is 4, or 3 for 2xC, or 2 for 2x2.
class Torus final : public Topology {
 public:
  Torus(uint32_t rows, uint32_t cols);
  std::string spec() const override;
  std::string describe() const override;
  bool directed() const override { return false; }
  std::vector<uint32_t> out_neighbors(uint32_t node, uint64_t round) const override;

  uint32_t rows() const { return rows_; }
  uint32_t cols() const { return cols_; }

 private:
  uint32_t rows_, cols_;
};

// Static exponential graph: i <-> i +- 2^k (mod n) for every 2^k < n (Ying et al.,
// "Exponential graph is provably efficient for decentralized deep training", NeurIPS
// 2021, symmetrized). A circulant graph for any n, so every node has the same degree:
// 2 log2(n) - 1 when n is a power of 2 (i + n/2 = i - n/2); otherwise at most
// 2 ceil(log2 n), fewer where offsets coincide mod n (n = 12: +8 = -4, so degree 6).
class Exponential final : public Topology {
 public:
  explicit Exponential(uint32_t n) : Topology(n) {}
  std::string spec() const override { return "exponential"; }
  std::string describe() const override;
  bool directed() const override { return false; }
  std::vector<uint32_t> out_neighbors(uint32_t node, uint64_t round) const override;
};

// One-peer exponential graph: in round t node i sends to i + 2^(t mod tau) and receives
// from i - 2^(t mod tau), tau = ceil(log2 n) (SGP, Assran et al. 2019; Ying et al. 2021).
// Directed, but every node has in-degree 1 too, so the push weights (1/2, 1/2) make W
// doubly stochastic and push-sum weights stay 1. When n is a power of 2 the product of
// tau consecutive rounds is exactly J/n (exact average); otherwise the offsets 2^k < n
// still connect the graph but averaging is only geometric.
class OnePeerExponential final : public Topology {
 public:
  explicit OnePeerExponential(uint32_t n);
  std::string spec() const override { return "one-peer-exponential"; }
  std::string describe() const override;
  bool directed() const override { return true; }
  uint64_t period() const override { return tau_ == 0 ? 1 : tau_; }
  std::vector<uint32_t> out_neighbors(uint32_t node, uint64_t round) const override;
  std::vector<uint32_t> in_neighbors(uint32_t node, uint64_t round) const override;

 private:
  uint64_t offset(uint64_t round) const { return uint64_t{1} << (round % tau_); }
  uint32_t tau_;  // number of offsets 2^k < n
};

// Every node <-> every other: W = J/n, exact average in one round.
class Complete final : public Topology {
 public:
  explicit Complete(uint32_t n) : Topology(n) {}
  std::string spec() const override { return "complete"; }
  std::string describe() const override;
  bool directed() const override { return false; }
  std::vector<uint32_t> out_neighbors(uint32_t node, uint64_t round) const override;
};

// A fresh simple D-regular graph every round, drawn from (seed, round) by
// random_regular_graph() (random_regular.h).
class RandomRegular final : public Topology {
 public:
  RandomRegular(uint32_t n, uint32_t degree, uint64_t seed);
  std::string spec() const override;
  std::string describe() const override;
  bool directed() const override { return false; }
  uint64_t period() const override { return 0; }
  std::vector<uint32_t> out_neighbors(uint32_t node, uint64_t round) const override;

  uint32_t degree() const { return degree_; }

 private:
  using Adjacency = std::vector<std::vector<uint32_t>>;
  // The graph of one round. The last one is cached: the weights of a node need the
  // degrees of its neighbors, and building W asks for every node of the same round.
  std::shared_ptr<const Adjacency> graph(uint64_t round) const;

  uint32_t degree_;
  uint64_t seed_;
  mutable std::mutex mu_;  // guards the cache: a Topology may be shared between threads
  mutable uint64_t cached_round_ = 0;
  mutable std::shared_ptr<const Adjacency> cached_;
};

}  // namespace gossip::peers

#include "peers/topologies.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cassert>

namespace gossip::peers {

namespace {

bool power_of_two(uint32_t n) { return std::has_single_bit(n); }

// Number of offsets 2^k < n: ceil(log2 n) for n >= 2, 0 for n = 1.
uint32_t offset_count(uint32_t n) { return n <= 1 ? 0 : std::bit_width(n - 1); }

// i +- s (mod n) for each offset s, without i and without repeats, sorted.
std::vector<uint32_t> circulant_neighbors(uint32_t i, uint32_t n,
                                          const std::vector<uint64_t>& offsets) {
  std::vector<uint32_t> out;
  out.reserve(2 * offsets.size());
  for (uint64_t s : offsets) {
    out.push_back(static_cast<uint32_t>((i + s) % n));
    out.push_back(static_cast<uint32_t>((i + n - s % n) % n));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::erase(out, i);
  return out;
}

std::vector<uint64_t> power_of_two_offsets(uint32_t n) {
  std::vector<uint64_t> offsets;
  for (uint32_t k = 0; k < offset_count(n); ++k) offsets.push_back(uint64_t{1} << k);
  return offsets;
}

}  // namespace

// --- ring ---------------------------------------------------------------------------

std::string Ring::describe() const {
  return fmt::format("ring of {} nodes: i <-> i+-1 (mod {}), degree {}", size(), size(),
                     out_neighbors(0, 0).size());
}

std::vector<uint32_t> Ring::out_neighbors(uint32_t node, uint64_t) const {
  assert(node < size());
  return circulant_neighbors(node, size(), {1});
}

// --- torus --------------------------------------------------------------------------

Torus::Torus(uint32_t rows, uint32_t cols) : Topology(rows * cols), rows_(rows), cols_(cols) {
  assert(rows >= 2 && cols >= 2);
}

std::string Torus::spec() const { return fmt::format("torus:{}x{}", rows_, cols_); }

std::string Torus::describe() const {
  return fmt::format(
      "2-D torus of {} nodes as {} rows x {} columns (node = row*{} + column): each node "
      "<-> its 4 grid neighbors with wrap-around, degree {}{}",
      size(), rows_, cols_, cols_, out_neighbors(0, 0).size(),
      rows_ == 2 || cols_ == 2 ? " (a side of 2 gives one neighbor along it)" : "");
}

std::vector<uint32_t> Torus::out_neighbors(uint32_t node, uint64_t) const {
  assert(node < size());
  const uint32_t r = node / cols_, c = node % cols_;
  std::vector<uint32_t> out = {
      ((r + 1) % rows_) * cols_ + c,
      ((r + rows_ - 1) % rows_) * cols_ + c,
      r * cols_ + (c + 1) % cols_,
      r * cols_ + (c + cols_ - 1) % cols_,
  };
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// --- static exponential -------------------------------------------------------------

std::string Exponential::describe() const {
  const uint32_t n = size();
  const std::string note = power_of_two(n)
                               ? ""
                               : fmt::format(
                                     "; {} is not a power of 2, so some offsets coincide mod n "
                                     "and the degree is lower (still a regular circulant graph)",
                                     n);
  return fmt::format(
      "static exponential graph of {} nodes: i <-> i+-2^k (mod {}) for 2^k < {} "
      "(k = 0..{}), degree {}{}",
      n, n, n, offset_count(n) == 0 ? 0 : offset_count(n) - 1, out_neighbors(0, 0).size(), note);
}

std::vector<uint32_t> Exponential::out_neighbors(uint32_t node, uint64_t) const {
  assert(node < size());
  return circulant_neighbors(node, size(), power_of_two_offsets(size()));
}

// --- one-peer exponential -----------------------------------------------------------

OnePeerExponential::OnePeerExponential(uint32_t n) : Topology(n), tau_(offset_count(n)) {}

std::string OnePeerExponential::describe() const {
  const uint32_t n = size();
  if (n == 1) return "one-peer exponential graph of 1 node: nothing to exchange";
  const std::string outcome =
      power_of_two(n) ? fmt::format("every {} consecutive rounds average exactly", tau_)
                      : fmt::format(
                            "{} is not a power of 2, so the offsets 2^k < {} connect the nodes but "
                            "{} rounds do not average exactly (geometric convergence only)",
                            n, n, tau_);
  return fmt::format(
      "one-peer exponential graph of {} nodes: in round t node i sends to i+2^(t mod {}) and "
      "receives from i-2^(t mod {}) (mod {}), push weights 1/2; {}",
      n, tau_, tau_, n, outcome);
}

std::vector<uint32_t> OnePeerExponential::out_neighbors(uint32_t node, uint64_t round) const {
  assert(node < size());
  if (tau_ == 0) return {};
  return {static_cast<uint32_t>((node + offset(round)) % size())};
}

std::vector<uint32_t> OnePeerExponential::in_neighbors(uint32_t node, uint64_t round) const {
  assert(node < size());
  if (tau_ == 0) return {};
  return {static_cast<uint32_t>((node + size() - offset(round)) % size())};
}

// --- complete -----------------------------------------------------------------------

std::string Complete::describe() const {
  return fmt::format(
      "complete graph of {} nodes: every node <-> all {} others (W = J/n: exact "
      "average every round, n-1 messages per node)",
      size(), size() - 1);
}

std::vector<uint32_t> Complete::out_neighbors(uint32_t node, uint64_t) const {
  assert(node < size());
  std::vector<uint32_t> out;
  out.reserve(size() - 1);
  for (uint32_t j = 0; j < size(); ++j)
    if (j != node) out.push_back(j);
  return out;
}

}  // namespace gossip::peers

#include "peers/mixing_matrix.h"

#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <complex>
#include <map>
#include <numbers>
#include <optional>
#include <vector>

#include "base/split_mix64.h"
#include "peers/topologies.h"

namespace gossip::peers {

Eigen::MatrixXd mixing_matrix(const Topology& topology, uint64_t round) {
  const auto n = static_cast<Eigen::Index>(topology.size());
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(n, n);
  for (uint32_t i = 0; i < topology.size(); ++i) {
    const MixingWeights row = topology.mixing_row(i, round);
    w(i, i) += row.self;
    for (const WeightedPeer& p : row.peers) w(i, p.node) += p.weight;
  }
  return w;
}

namespace {

// The first of `sums` (a matrix's row or column sums) that is not 1 within tolerance.
Status check_sums(const Eigen::VectorXd& sums, const char* what, double tolerance) {
  for (Eigen::Index i = 0; i < sums.size(); ++i)
    if (!(std::abs(sums(i) - 1.0) <= tolerance))  // also catches NaN
      return Status::invalid(
          fmt::format("{} {} of the mixing matrix sums to {:.17g}, not 1 "
                      "(tolerance {:g})",
                      what, i, sums(i), tolerance));
  return Status::ok();
}

}  // namespace

Status check_stochastic(const Eigen::MatrixXd& w, Stochastic kind, double tolerance) {
  if (w.rows() != w.cols())
    return Status::invalid(
        fmt::format("the mixing matrix is {}x{}, not square", w.rows(), w.cols()));
  for (Eigen::Index j = 0; j < w.cols(); ++j)
    for (Eigen::Index i = 0; i < w.rows(); ++i)
      if (w(i, j) < -tolerance)
        return Status::invalid(
            fmt::format("entry ({}, {}) of the mixing matrix is negative: {}", i, j, w(i, j)));
  if (kind != Stochastic::kColumns)
    GOSSIP_RETURN_IF_ERROR(check_sums(w.rowwise().sum(), "row", tolerance));
  if (kind != Stochastic::kRows)
    GOSSIP_RETURN_IF_ERROR(check_sums(w.colwise().sum().transpose(), "column", tolerance));
  return Status::ok();
}

namespace {

// A single round's product falling this far below its input is rounding noise around
// an exact zero (the one-peer exponential graph's last round of a period, W = J/n).
constexpr double kExactConsensus = 1e-12;

// sigma_max(A) = sqrt(lambda_max(A^T A)). Squaring costs accuracy only in the small
// singular values, and only the largest is wanted; one symmetric solver instead of an SVD
// (Eigen's BDCSVD alone made this the slowest file of the build to compile).
double largest_singular_value(const Eigen::MatrixXd& a) {
  const Eigen::MatrixXd gram = a.transpose() * a;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram, Eigen::EigenvaluesOnly);
  return std::sqrt(std::max(eig.eigenvalues().maxCoeff(), 0.0));
}

bool symmetric(const Eigen::MatrixXd& w) {
  return (w - w.transpose()).cwiseAbs().maxCoeff() <= 1e-15;
}

// ||W restricted to 1-perp||_2 = sigma_max(W (I - J/n)); W (J/n) has row i equal to
// rowsum_i / n. For symmetric doubly stochastic W this is symmetric and its eigenvalues
// are 0 and lambda_2..lambda_n, so the norm is max(|lambda_2|, |lambda_n|).
double restricted_norm(const Eigen::MatrixXd& w) {
  const Eigen::VectorXd row_means = w.rowwise().sum() / static_cast<double>(w.cols());
  const Eigen::MatrixXd p = w.colwise() - row_means;
  if (symmetric(w)) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(p, Eigen::EigenvaluesOnly);
    return eig.eigenvalues().cwiseAbs().maxCoeff();
  }
  return largest_singular_value(p);
}

// The group whose translations a topology's W may commute with: node i is (i / cols,
// i % cols) in Z_rows x Z_cols. The torus is a circulant on its grid; the ring and the
// exponential graphs on Z_n (one column).
struct Grid {
  uint32_t rows = 1, cols = 1;
};

Grid grid_of(const Topology& topology) {
  if (const auto* torus = dynamic_cast<const Torus*>(&topology))
    return {torus->rows(), torus->cols()};
  return {topology.size(), 1};
}

// W's first row as (offset, weight) pairs, the offset as a node of the grid, when every
// row is the first one translated by the row's node (W(i, j) = c[j - i] on the grid: a
// circulant, as the ring, the exponential graphs and the torus are); nullopt otherwise.
std::optional<std::map<uint32_t, double>> circulant_row(const Topology& topology, Grid g,
                                                        uint64_t round) {
  const uint32_t n = topology.size();
  const auto offset = [&](uint32_t from, uint32_t to) {
    const uint32_t dr = (to / g.cols + g.rows - from / g.cols) % g.rows;
    const uint32_t dc = (to % g.cols + g.cols - from % g.cols) % g.cols;
    return dr * g.cols + dc;
  };
  std::map<uint32_t, double> first;
  for (uint32_t i = 0; i < n; ++i) {
    const MixingWeights w = topology.mixing_row(i, round);
    std::map<uint32_t, double> row;
    row[0] += w.self;
    for (const WeightedPeer& p : w.peers) row[offset(i, p.node)] += p.weight;
    if (i == 0) {
      first = std::move(row);
      continue;
    }
    if (row.size() != first.size()) return std::nullopt;
    for (auto a = row.begin(), b = first.begin(); a != row.end(); ++a, ++b)
      if (a->first != b->first || std::abs(a->second - b->second) > 1e-15) return std::nullopt;
  }
  return first;
}

// Circulants on one grid share its Fourier basis: the product of a window's W has the
// eigenvalues prod_r sum_o c_r[o] e^{2 pi i (o_row k_row / rows + o_col k_col / cols)},
// and, being normal, its norm on 1-perp is the largest |eigenvalue| for k != 0.
// O(n x degree) a round, so any n the topologies take.
std::optional<SpectralGap> circulant_gap(const Topology& topology, uint64_t first,
                                         uint64_t window) {
  const uint32_t n = topology.size();
  const Grid g = grid_of(topology);
  std::vector<std::complex<double>> product(n, 1.0);
  double sum_round_gap = 0;
  for (uint64_t r = first; r < first + window; ++r) {
    const auto row = circulant_row(topology, g, r);
    if (!row) return std::nullopt;
    double rho = 0;
    for (uint32_t k = 1; k < n; ++k) {
      const uint64_t kr = k / g.cols, kc = k % g.cols;
      std::complex<double> lambda = 0;
      for (const auto& [offset, weight] : *row) {
        const uint64_t orow = offset / g.cols, ocol = offset % g.cols;
        // Each phase reduced to a fraction of a turn before the sum: exact integers.
        const double turns = static_cast<double>((orow * kr) % g.rows) / g.rows +
                             static_cast<double>((ocol * kc) % g.cols) / g.cols;
        lambda += weight * std::polar(1.0, 2 * std::numbers::pi * turns);
      }
      product[k] *= lambda;
      rho = std::max(rho, std::abs(lambda));
    }
    sum_round_gap += 1 - std::min(rho, 1.0);
  }
  double rho = 0;
  for (uint32_t k = 1; k < n; ++k) rho = std::max(rho, std::abs(product[k]));
  SpectralGap gap;
  gap.period = topology.period();
  gap.window = window;
  gap.mean_round_gap = sum_round_gap / static_cast<double>(window);
  const double rate = std::pow(rho, 1.0 / static_cast<double>(window));
  gap.gap = rho < kExactConsensus ? 1 : 1 - std::min(rate, 1.0);
  gap.method = window == 1 ? "eigenvalues of the circulant W (the DFT of its row)"
                           : fmt::format(
                                 "eigenvalues of the product of one period ({} rounds) of "
                                 "circulant W (the DFTs of their rows)",
                                 window);
  return gap;
}

// Past the dense limit, a graph that is no circulant (the random-regular ones): the
// same rates as below, with each product's norm found by power iteration on P^T P, P
// applied through the nodes' rows. O(n x degree) a round and an iteration, so a
// random-regular graph of 4,096 nodes takes a tenth of a second where the dense
// products would take hours.
class SparseRounds {
 public:
  SparseRounds(const Topology& topology, uint64_t first, uint64_t rounds)
      : n_(topology.size()), first_(first) {
    rows_.reserve(rounds);
    for (uint64_t k = 0; k < rounds; ++k) {
      std::vector<MixingWeights> w(n_);
      for (uint32_t i = 0; i < n_; ++i) w[i] = topology.mixing_row(i, first + k);
      rows_.push_back(std::move(w));
    }
  }

  // As check_stochastic for round k's W: its row and column sums.
  Status check(uint64_t k, Stochastic kind, double tolerance) const {
    Eigen::VectorXd row_sums = Eigen::VectorXd::Zero(n_), column_sums = row_sums;
    for (uint32_t i = 0; i < n_; ++i) {
      const MixingWeights& w = rows_[k][i];
      if (w.self < -tolerance)
        return Status::invalid(
            fmt::format("entry ({}, {}) of the mixing matrix is negative: {}", i, i, w.self));
      row_sums(i) += w.self;
      column_sums(i) += w.self;
      for (const WeightedPeer& p : w.peers) {
        if (p.weight < -tolerance || p.node >= n_)
          return Status::invalid(
              fmt::format("entry ({}, {}) of the mixing matrix is {}", i, p.node, p.weight));
        row_sums(i) += p.weight;
        column_sums(p.node) += p.weight;
      }
    }
    if (kind != Stochastic::kColumns)
      GOSSIP_RETURN_IF_ERROR(check_sums(row_sums, "row", tolerance));
    if (kind != Stochastic::kRows)
      GOSSIP_RETURN_IF_ERROR(check_sums(column_sums, "column", tolerance));
    return Status::ok();
  }

  // v <- W_k v (transposed: v <- W_k^T v).
  void apply(uint64_t k, Eigen::VectorXd& v, bool transposed) const {
    Eigen::VectorXd out(n_);
    for (uint32_t i = 0; i < n_; ++i) out(i) = rows_[k][i].self * v(i);
    for (uint32_t i = 0; i < n_; ++i)
      for (const WeightedPeer& p : rows_[k][i].peers) {
        if (transposed) {
          out(p.node) += p.weight * v(i);
        } else {
          out(i) += p.weight * v(p.node);
        }
      }
    v = std::move(out);
  }

  // log ||W_{begin+m-1} ... W_begin (I - J/n)||_2 (begin, m counted from the first round
  // sampled), or nullopt when the product collapses to J/n (then *exact_at is the count
  // of its rounds that did not). The norm's direction is renormalized each round so that
  // long products of contractions neither underflow nor lose the 1-perp projection.
  std::optional<double> log_norm(uint64_t begin, uint64_t m, uint64_t* exact_at) const {
    constexpr int kIterations = 60;
    SplitMix64 rng(0x5eed ^ (first_ + begin) ^ (m << 32));
    Eigen::VectorXd u(n_);
    for (uint32_t i = 0; i < n_; ++i)
      u(i) = static_cast<double>(rng.next() >> 11) * 0x1p-53 * 2 - 1;
    double log_norm = 0;
    for (int it = 0; it < kIterations; ++it) {
      u.array() -= u.mean();
      u /= u.norm();
      // Forward: P u, its log length.
      Eigen::VectorXd v = u;
      double log_length = 0;
      for (uint64_t k = begin; k < begin + m; ++k) {
        apply(k, v, false);
        v.array() -= v.mean();  // a column stochastic W keeps 1-perp: drop rounding's drift
        const double s = v.norm();
        if (!(s >= kExactConsensus)) {
          *exact_at = k - begin;
          return std::nullopt;
        }
        log_length += std::log(s);
        v /= s;
      }
      log_norm = log_length;  // ||P u||, u a unit vector: rises to the norm
      // Backward: P^T P u, its direction the next u.
      for (uint64_t k = begin + m; k-- > begin;) {
        apply(k, v, true);
        v /= v.norm();
      }
      u = std::move(v);
    }
    return log_norm;
  }

 private:
  uint32_t n_;
  uint64_t first_;
  std::vector<std::vector<MixingWeights>> rows_;
};

Result<SpectralGap> sparse_gap(const Topology& topology, const SpectralGapOptions& options) {
  const uint32_t n = topology.size();
  SpectralGap g;
  g.period = topology.period();
  const bool periodic = g.period != 0;
  g.window = periodic ? g.period : std::max<uint32_t>(options.sampled_rounds, 1);
  const uint64_t first = periodic ? 0 : options.first_round;
  const uint64_t rounds = periodic ? g.window : 2 * g.window;
  const SparseRounds w(topology, first, rounds);
  double sum_round_gap = 0;
  bool doubly = true;
  for (uint64_t k = 0; k < rounds; ++k) {
    const Stochastic kind = topology.directed() ? Stochastic::kColumns : Stochastic::kDoubly;
    GOSSIP_RETURN_IF_ERROR(w.check(k, kind, 1e-12)
                               .with_context(fmt::format("topology '{}' on {} nodes, round {}",
                                                         topology.spec(), n, first + k)));
    const bool doubly_now =
        kind == Stochastic::kDoubly || w.check(k, Stochastic::kDoubly, 1e-12).is_ok();
    doubly = doubly && doubly_now;
    // Each round's norm from 60 iterations, a little below it where a round's top
    // singular values crowd (a large random graph's): mean_round_gap, a diagnostic, can
    // read a little high.
    uint64_t exact_at = 0;
    const auto one = w.log_norm(k, 1, &exact_at);
    const double rho = one ? std::exp(*one) : 0;
    sum_round_gap += 1 - (doubly_now ? std::min(rho, 1.0) : rho);
  }
  g.mean_round_gap = sum_round_gap / static_cast<double>(rounds);
  const std::string how = fmt::format(
      "norms by power iteration over the nodes' rows: {} nodes, above the dense "
      "limit of {}",
      n, options.max_nodes);
  uint64_t exact_at = 0;
  const auto whole = w.log_norm(0, rounds, &exact_at);
  double rho = 0;
  if (!whole) {
    if (exact_at == 0 || periodic) {  // a period that averages exactly: rate 0, as dense
      g.gap = 1;
      g.method = periodic ? fmt::format(
                                "the product of one period ({} rounds) is J/n: exact "
                                "average ({})",
                                g.window, how)
                          : fmt::format("round {} alone averages exactly ({})", first, how);
      return g;
    }
    // As the dense path: the rounds before the one that averaged exactly.
    // (Another start vector can find those rounds collapsing too, at the rounding's
    // edge: then rate 0.)
    uint64_t at = 0;
    const auto before = w.log_norm(0, exact_at, &at);
    rho = before ? std::exp(*before / static_cast<double>(exact_at)) : 0;
    g.method = fmt::format(
        "per-round rate of the product of rounds {}..{} on 1-perp (round {} then averaged "
        "exactly; {})",
        first, first + exact_at - 1, first + exact_at, how);
  } else if (periodic) {
    rho = std::exp(*whole / static_cast<double>(rounds));
    g.method = fmt::format("per-round rate of the product of one period ({} rounds) on 1-perp ({})",
                           g.window, how);
  } else {
    // The growth from w to 2w rounds, as the dense path measures it.
    uint64_t unused = 0;
    const auto half = w.log_norm(0, g.window, &unused);
    rho = half ? std::exp((*whole - *half) / static_cast<double>(g.window)) : 0;
    g.method = fmt::format(
        "per-round rate of the product of rounds {}..{} on 1-perp, its norm's growth over the "
        "last {} (sampled: the graph never repeats; {})",
        first, first + rounds - 1, g.window, how);
  }
  g.gap = 1 - (doubly ? std::min(rho, 1.0) : rho);
  return g;
}

}  // namespace

Result<SpectralGap> spectral_gap(const Topology& topology, const SpectralGapOptions& options) {
  const uint32_t n = topology.size();
  if (n > options.max_nodes && n > 1) {
    // Past the dense limit, graphs whose every round is a circulant have a closed form;
    // the others (random-regular) are estimated from their rows.
    if (topology.period() != 0)
      if (auto g = circulant_gap(topology, 0, topology.period())) return *g;
    return sparse_gap(topology, options);
  }
  SpectralGap g;
  g.period = topology.period();
  if (n == 1) {
    g.gap = g.mean_round_gap = 1;
    g.method = "a single node is its own average";
    return g;
  }
  const bool periodic = g.period != 0;
  g.window = periodic ? g.period : std::max<uint32_t>(options.sampled_rounds, 1);
  const uint64_t first = periodic ? 0 : options.first_round;
  // A graph that never repeats: its rate is the growth of the product's norm from w to
  // 2w rounds. The norm after w rounds is the worst vector's, larger than a typical
  // vector's by a factor that does not grow with the rounds; over w rounds alone it
  // made the rate look slower than the replicas' by 12-18 % (in the logarithm) at 16 to
  // 256 nodes of random-regular:4. Over the second w it cancels.
  const uint64_t rounds = periodic ? g.window : 2 * uint64_t{g.window};
  double log_norm_at_window = 0;
  bool have_window_norm = false;

  // The product of the window's matrices applied to the projector I - J/n, renormalized
  // every round (the scale kept in log_scale) so that a long product of contractions
  // neither underflows nor drowns in the rounding of entries near 1/n.
  const auto dim = static_cast<Eigen::Index>(n);
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(dim, dim) -
                      Eigen::MatrixXd::Constant(dim, dim, 1.0 / static_cast<double>(n));
  double log_scale = 0, sum_round_gap = 0, rho_last = 0;
  bool symmetric_last = false, doubly = true;
  uint64_t measured = 0;  // rounds in the product m
  bool exact = false;     // the next round made the product J/n, to rounding
  for (uint64_t k = 0; k < rounds; ++k) {
    const uint64_t round = first + k;
    const Eigen::MatrixXd w = mixing_matrix(topology, round);
    const Stochastic kind = topology.directed() ? Stochastic::kColumns : Stochastic::kDoubly;
    GOSSIP_RETURN_IF_ERROR(check_stochastic(w, kind, 1e-12)
                               .with_context(fmt::format("topology '{}' on {} nodes, round {}",
                                                         topology.spec(), n, round)));
    // A doubly stochastic W cannot expand 1-perp; a norm a hair above 1 is rounding.
    const bool doubly_now = check_stochastic(w, Stochastic::kDoubly, 1e-12).is_ok();
    doubly = doubly && doubly_now;
    rho_last = doubly_now ? std::min(restricted_norm(w), 1.0) : restricted_norm(w);
    symmetric_last = symmetric(w);
    sum_round_gap += 1 - rho_last;
    if (exact || g.window == 1) continue;
    Eigen::MatrixXd next = w * m;
    next.rowwise() -= next.colwise().mean();  // stay in 1-perp: drop the drift rounding adds
    const double s = next.norm();
    if (s < kExactConsensus * m.norm()) {
      exact = true;
      continue;
    }
    log_scale += std::log(s);
    m = next / s;
    ++measured;
    if (!periodic && measured == g.window) {
      log_norm_at_window = log_scale + std::log(largest_singular_value(m));
      have_window_norm = true;
    }
  }
  g.mean_round_gap = sum_round_gap / static_cast<double>(rounds);
  if (g.window == 1) {
    g.gap = 1 - rho_last;
    g.method = symmetric_last ? "eigenvalues of the symmetric W: 1 - max(|lambda_2|, |lambda_n|)"
                              : "largest singular value of W on the zero-sum subspace";
    return g;
  }
  if (exact && (periodic || measured == 0)) {
    // A period that averages exactly is a guarantee: rate 0.
    g.gap = 1;
    g.method = periodic ? fmt::format(
                              "the product of one period ({} rounds) is J/n: exact "
                              "average",
                              g.window)
                        : fmt::format("round {} alone averages exactly", first);
    return g;
  }
  // A random graph that happens to average exactly within the window (random matchings
  // on a power of 2 can) says little about other rounds; the rounds before it do.
  const double log_norm = log_scale + std::log(largest_singular_value(m));
  const bool growth = !periodic && have_window_norm && measured == 2 * uint64_t{g.window};
  const double rho = growth
                         ? std::exp((log_norm - log_norm_at_window) / static_cast<double>(g.window))
                         : std::exp(log_norm / static_cast<double>(measured));
  g.gap = 1 - (doubly ? std::min(rho, 1.0) : rho);
  if (periodic) {
    g.method =
        fmt::format("per-round rate of the product of one period ({} rounds) on 1-perp", g.window);
  } else {
    g.method = fmt::format(
        "per-round rate of the product of rounds {}..{} on 1-perp{} (sampled: the graph never "
        "repeats){}",
        first, first + measured - 1,
        growth ? fmt::format(", its norm's growth over the last {}", g.window) : "",
        exact ? fmt::format("; round {} then averaged exactly", first + measured) : "");
  }
  return g;
}

double predicted_consensus_factor(const SpectralGap& gap, uint64_t rounds) {
  const double rho = 1 - gap.gap;
  if (gap.period == 0) return std::pow(rho, static_cast<double>(rounds));
  const uint64_t covered = gap.period * (rounds / gap.period);
  return std::pow(rho, static_cast<double>(covered));
}

}  // namespace gossip::peers

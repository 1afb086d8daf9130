#pragma once
// The mixing matrix W of a topology (x <- W x, W(i, j) the weight node i gives to x_j),
// and its spectral gap: how fast gossip drives the nodes to consensus.
//
// For a doubly stochastic W the disagreement e = x - x̄1 stays orthogonal to 1 and
// ||e_{t+1}|| <= rho ||e_t||, rho = ||W restricted to 1-perp||_2 (Boyd, Ghosh, Prabhakar
// & Shah, "Randomized gossip algorithms", 2006; Xiao & Boyd 2004). For a symmetric W,
// rho = max(|lambda_2|, |lambda_n|). The gap is 1 - rho.
//
// Dense, O(n^3) per round measured: meant for the start-up log and tests. Measured on
// one core: a static ring of 512 nodes takes 60 ms; a time-varying topology, whose
// window of rounds each needs an eigen- or singular value decomposition, 0.25 s at
// n = 256 and 1.7 s at n = 512 (9 s at 1024, hence the default limit).

#include <Eigen/Core>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "peers/topology.h"

namespace gossip::peers {

// W for one round, built from the nodes' mixing rows.
Eigen::MatrixXd mixing_matrix(const Topology& topology, uint64_t round);

enum class Stochastic { kRows, kColumns, kDoubly };

// OK when no entry is below -tolerance and the rows, columns or both sum to 1 within
// tolerance; otherwise the message names the first row or column off and its sum.
Status check_stochastic(const Eigen::MatrixXd& w, Stochastic kind, double tolerance = 1e-12);

struct SpectralGapOptions {
  // For topologies that never repeat (random-regular): the rounds sampled are
  // first_round .. first_round + 2 sampled_rounds - 1, the rate measured on the second half.
  uint64_t first_round = 0;
  uint32_t sampled_rounds = 16;
  // Dense (O(n^3) per round) up to this many nodes. Above it, circulant topologies (the
  // ring, the exponential graphs, and the torus on its grid) by their eigenvalues, the
  // DFT of their rows; the others (random-regular) by power iteration over the nodes'
  // rows, O(n x degree) a round: the same rates, the norms found iteratively.
  uint32_t max_nodes = 512;
};

struct SpectralGap {
  // 1 - rho, rho the per-round contraction of ||x - x̄|| measured over `window` rounds:
  // rho = ||(W_{t+w-1} ... W_t) restricted to 1-perp||_2^(1/w). Static: w = 1, the
  // classic gap. Periodic: w = the period, so the one-peer exponential graph on a power
  // of 2 has gap 1 (exact average after each period). Random: an estimate of the rate of
  // the product (its Lyapunov exponent), which a new graph every round makes faster than
  // any single round's: rho = (||P_2w|| / ||P_w||)^(1/w) for the products of the first w
  // and 2w sampled rounds, so that the worst vector's head start over a typical one
  // cancels. Should the sampled product average exactly (random matchings on a power of 2
  // can), the rounds before that are measured instead (||P_k||^(1/k)), since other rounds
  // need not be so lucky.
  double gap = 0;
  // The mean over the window of each round's own gap 1 - ||W_t restricted to 1-perp||.
  // Equal to gap for a static topology; far below it for the one-peer exponential graph,
  // whose single rounds barely mix but whose periods average exactly.
  double mean_round_gap = 0;
  uint64_t period = 1;  // the topology's: 0 when it never repeats
  uint64_t window = 1;  // 1 static, the period, or sampled_rounds (2x as many sampled)
  std::string method;   // how it was measured, for the log
};

// Fails when a round's W is not column stochastic (a bug in the topology). For directed W
// (push-sum), 1-perp is the set of zero-sum vectors, which a column stochastic W maps into itself:
// rho is how fast push-sum's numerators and weights approach their stationary profile. Every
// topology here has in-degree = out-degree, so its W is doubly stochastic and this is also the rate
// of x - x̄.
Result<SpectralGap> spectral_gap(const Topology& topology, const SpectralGapOptions& options = {});

// The bound ||x_t - x̄|| <= factor ||x_0 - x̄|| after `rounds` rounds of x <- W x:
// (1 - gap)^(w floor(t/w)) with w the period, a guarantee for rounds starting at a
// multiple of the period (at any round for the circulant graphs here, whose matrices
// commute). For a topology that never repeats, (1 - gap)^t: an estimate, not a bound.
double predicted_consensus_factor(const SpectralGap& gap, uint64_t rounds);

}  // namespace gossip::peers

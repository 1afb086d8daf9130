#pragma once
// What went wrong in this process, by cause: the counts behind
// gossipd_failures_total{cause}. Process-wide, as base/refusals.h and for the same
// reason: the code that sees a failure sits in layers that do not know the metrics.

#include <array>
#include <atomic>
#include <cstdint>

namespace gossip {

enum class Failure : uint8_t {
  kRoundTimeout,     // a round that ran past its deadline
  kRoundError,       // a round that failed otherwise (a peer's bye, a refused chunk, ...)
  kPeerAbsent,       // a neighbor that missed a gossip round (not waited for again until heard)
  kPeerLeftOut,      // a member an elastic ring re-formed without
  kNonFiniteUpdate,  // an update of this node's trainers with NaN or Inf, repaired
  kNonFiniteResult,  // a round's result with NaN or Inf from a peer, replaced
  kDiverged,         // the node's model diverged (daemon/divergence.h)
  kCount,
};

inline const char* failure_name(Failure f) {
  switch (f) {
    case Failure::kRoundTimeout:
      return "round-timeout";
    case Failure::kRoundError:
      return "round-error";
    case Failure::kPeerAbsent:
      return "peer-absent";
    case Failure::kPeerLeftOut:
      return "peer-left-out";
    case Failure::kNonFiniteUpdate:
      return "nonfinite-update";
    case Failure::kNonFiniteResult:
      return "nonfinite-result";
    case Failure::kDiverged:
      return "diverged";
    case Failure::kCount:
      break;
  }
  return "?";
}

inline std::array<std::atomic<uint64_t>, static_cast<size_t>(Failure::kCount)>& failure_counts() {
  static std::array<std::atomic<uint64_t>, static_cast<size_t>(Failure::kCount)> counts{};
  return counts;
}

inline void count_failure(Failure f, uint64_t n = 1) {
  failure_counts()[static_cast<size_t>(f)].fetch_add(n, std::memory_order_relaxed);
}

inline uint64_t failures(Failure f) {
  return failure_counts()[static_cast<size_t>(f)].load(std::memory_order_relaxed);
}

}  // namespace gossip

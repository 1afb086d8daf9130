#pragma once
// What this process refused from outside, by kind: the counts behind
// gossipd_refused_total{kind}. Process-wide, because the refusing code sits in
// layers (transports, strategies) that do not know the daemon's metrics, and a
// refusal is rare enough that one relaxed atomic add costs nothing.

#include <array>
#include <atomic>
#include <cstdint>

namespace gossip {

enum class Refusal : uint8_t {
  kRingNoHello,     // a connection to the ring's port that said no hello in time
  kRingBadHello,    // a hello of another node, session or version
  kBadWeight,       // a push-sum weight that is not finite, below 1e-30 or above the node count
  kNonFinite,       // a peer's contribution with NaN or Inf
  kClipped,         // a contribution pulled back to the clipping radius
                    // (sgd/strategies/push_sum/centered_clip.h), or a ring chunk to
                    // its contributors' norms (sgd/collectives/ring_all_reduce.h)
  kFarRound,        // a round too far ahead to buffer, or to skip ahead to on one peer's word
  kMalformed,       // a neighbor's chunk that does not fit the round, left out (robust mixing)
  kEndlessMessage,  // a connection cut for holding more than a message's worth of parts
  kForged,          // a sealed ring message that did not open with its link's key
  kWrongResult,     // an elastic ring's result from a member the rule does not name, or
                    // out of scale with this node's model (sgd/membership/peer_ring.h)
  kCount,
};

inline const char* refusal_name(Refusal r) {
  switch (r) {
    case Refusal::kRingNoHello:
      return "ring-no-hello";
    case Refusal::kRingBadHello:
      return "ring-bad-hello";
    case Refusal::kBadWeight:
      return "bad-weight";
    case Refusal::kNonFinite:
      return "non-finite";
    case Refusal::kClipped:
      return "clipped";
    case Refusal::kFarRound:
      return "far-round";
    case Refusal::kMalformed:
      return "malformed";
    case Refusal::kEndlessMessage:
      return "endless-message";
    case Refusal::kForged:
      return "forged";
    case Refusal::kWrongResult:
      return "wrong-result";
    case Refusal::kCount:
      break;
  }
  return "?";
}

inline std::array<std::atomic<uint64_t>, static_cast<size_t>(Refusal::kCount)>& refusal_counts() {
  static std::array<std::atomic<uint64_t>, static_cast<size_t>(Refusal::kCount)> counts{};
  return counts;
}

inline void count_refusal(Refusal r) {
  refusal_counts()[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
}

inline uint64_t refusals(Refusal r) {
  return refusal_counts()[static_cast<size_t>(r)].load(std::memory_order_relaxed);
}

}  // namespace gossip

#pragma once
// --dead-after-factor: how long a peer may be silent before it is presumed dead,
// from its own silences. A fixed --dead-after is wrong both ways: short, it declares
// a live peer dead on a slow or busy link (a heartbeat queued behind a large chunk,
// a trainer that evaluates); long, a dead peer stalls its neighbors on a fast one.
// With a factor, the bound is the longest silence between two of the peer's
// messages over the last one to two minutes (peers/traffic.h) times the factor, at
// least the floor and at most the ceiling (the round timeout). A silence that ended
// in a hello or a join was a restart and is not learnt from. Until kWarmUp silences
// were measured, and with factor 0, it is --dead-after.
//
// Never less than two heartbeat periods: a live peer that waits (for its trainer,
// for another neighbor) sends nothing but a heartbeat a period, so a shorter silence
// says nothing about it. The learnt bound fell to the 0.5 s floor when the first
// gaps measured were a fast round's, under the 1 s heartbeat; a peer still waiting
// was taken for dead, dropped from a round it then sent, and the mean moved
// (GossipConsensus.ATrainerPausingLongerThanAHeartbeatIsNotTakenForDead).

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "peers/traffic.h"

namespace gossip::peers {

struct DeadAfter {
  DeadAfter() = default;
  // A fixed bound, as --dead-after alone sets it.
  DeadAfter(std::chrono::milliseconds f) : fixed(f) {}  // NOLINT(google-explicit-constructor)

  std::chrono::milliseconds fixed{3000};  // --dead-after
  double factor = 0;                      // --dead-after-factor; 0: always `fixed`
  std::chrono::milliseconds floor{500};   // --dead-after-floor
  std::chrono::milliseconds ceiling{60000};
  std::chrono::milliseconds heartbeat{0};  // --heartbeat: the bound is at least two of them
  static constexpr uint64_t kWarmUp = 8;

  std::chrono::milliseconds for_peer(const TrafficCounters& traffic, uint32_t peer) const {
    if (factor <= 0 || traffic.gaps(peer) < kWarmUp) return std::max(fixed, 2 * heartbeat);
    // Clamped as a double: factor times a gap may not fit an integer.
    const double low = static_cast<double>(std::max(floor, 2 * heartbeat).count());
    const double bound = std::clamp(factor * static_cast<double>(traffic.longest_gap_ms(peer)), low,
                                    std::max(low, static_cast<double>(ceiling.count())));
    return std::chrono::milliseconds(static_cast<int64_t>(bound));
  }
  // Whether a peer silent for `silent_ms` (TrafficCounters::silent_ms) is presumed dead.
  bool dead(const TrafficCounters& traffic, uint32_t peer, uint64_t silent_ms) const {
    return silent_ms != proto::ipc::kNeverHeard &&
           silent_ms > static_cast<uint64_t>(for_peer(traffic, peer).count());
  }
};

}  // namespace gossip::peers

#pragma once
// Where a node's time goes: how long its trainers wait for the daemon (a sync, a
// start, the answer to a step's last gradient bucket) against how long they are
// attached, and how long each round takes, with how much of it the trainers spent
// training instead of waiting (the overlap). Kept by the main loop; snapshot() is
// what /metrics and gossipctl status show, open intervals counted up to `now`.

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace gossip::daemon {

class TimeAccounts {
 public:
  using Clock = std::chrono::steady_clock;
  // Upper bounds of the round-duration histogram's buckets, in seconds (+Inf after).
  static constexpr std::array<double, 14> kRoundBuckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

  struct Snapshot {
    double trainer_wait_seconds = 0;                                 // summed over trainers
    double trainer_attached_seconds = 0;                             // summed over trainers
    uint64_t rounds = 0;                                             // rounds timed
    double round_seconds = 0;                                        // their sum
    std::array<uint64_t, kRoundBuckets.size() + 1> round_buckets{};  // not cumulative
    double last_round_seconds = 0;
    uint64_t last_round_payload_bytes = 0;  // sent by this node in its last round
    double last_round_overlap = 0;          // in [0, 1]: 1 - trainers' wait / their time
  };

  explicit TimeAccounts(uint32_t slots) : slots_(slots) {}

  void attached(uint32_t slot, Clock::time_point now);
  void detached(uint32_t slot, Clock::time_point now);
  // A trainer blocks on the daemon, and is answered. Idempotent.
  void wait_begins(uint32_t slot, Clock::time_point now);
  void wait_ends(uint32_t slot, Clock::time_point now);
  // A round of `participants` trainers starts (this node has sent `payload_sent` bytes
  // so far) and ends.
  void round_begins(Clock::time_point now, uint32_t participants, uint64_t payload_sent);
  void round_ends(Clock::time_point now, uint64_t payload_sent);

  Snapshot snapshot(Clock::time_point now) const;

 private:
  struct Slot {
    bool attached = false, waiting = false;
    Clock::time_point attached_at, wait_since;
  };
  double open_wait(Clock::time_point now) const;

  std::vector<Slot> slots_;
  double closed_wait_ = 0, closed_attached_ = 0;
  bool in_round_ = false;
  Clock::time_point round_start_;
  uint32_t round_participants_ = 0;
  uint64_t round_payload_start_ = 0;
  double round_wait_start_ = 0;
  Snapshot rounds_;  // the round fields of the snapshot
};

}  // namespace gossip::daemon

#pragma once
// --round-timeout-factor: a round's deadline that follows the measured rounds. Fixed
// timeouts are wrong both ways: long enough for a slow network, they take a minute to
// notice a hung peer on a fast one; short enough for a fast one, they declare live
// peers dead on a slow one. Here the deadline is the longest of the last rounds times
// the factor, at least the floor and at most --round-timeout (the ceiling). The longest
// rather than a percentile: a round that waits for a peer's trainer evaluating the test
// set comes once in tens of rounds, and must not fail. Until enough rounds were timed
// (the first waits for every node to start) the ceiling holds. The daemon's sync worker
// and the simulation (sim/world.h) time their rounds with it.
//
// The gossip exchange's patience (--patience-factor, sgd/overlay/neighbor_exchange.h)
// follows a quantile of the waits instead: giving up on a neighbor costs only its part
// of one round's mix, and the longest wait of the last rounds is the one a death or a
// neighbor's pause made, which would hold the patience up for the next death.

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>

namespace gossip::sgd {

class RoundDeadline {
 public:
  using Duration = std::chrono::duration<double>;
  // factor 0: always the ceiling. quantile: of the window's durations, which the factor
  // multiplies (1: the longest).
  RoundDeadline(Duration ceiling, double factor, Duration floor, double quantile = 1.0)
      : ceiling_(ceiling), factor_(factor), floor_(floor), quantile_(quantile) {}

  static constexpr size_t kWindow = 64;  // rounds remembered
  static constexpr size_t kWarmUp = 8;   // rounds timed before the deadline adapts
  // --round-timeout-factor auto for the gossip family, whose round goes on without a
  // late peer (0, the fixed deadline, for the others).
  static constexpr double kGossipFamilyFactor = 3.0;

  // How long the next round may take.
  Duration next() const;
  // A completed round's duration; failed rounds are not fed (their time is the deadline's).
  void completed(Duration d);
  bool adapting() const { return factor_ > 0 && window_.size() >= kWarmUp; }
  // What a failed round's error adds while the deadline adapts: the deadline it had.
  static std::string failure_context(Duration allowed);

 private:
  Duration ceiling_;
  double factor_;
  Duration floor_;
  double quantile_;
  std::deque<Duration> window_;
};

}  // namespace gossip::sgd

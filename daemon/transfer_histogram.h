#pragma once
// How long state transfers take (a joining or restarted node fetching the members'
// model and state): the gossipd_state_transfer_duration_seconds histogram. Written by
// the sync thread, read by the metrics thread, so every count is an atomic.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

namespace gossip::daemon {

class TransferHistogram {
 public:
  // Upper bounds of the buckets, in seconds (+Inf after): a small model on loopback to a
  // 100M-parameter model over a slow link.
  static constexpr std::array<double, 13> kBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                                      5,    10,   30,  60,   120, 600};
  struct Snapshot {
    std::array<uint64_t, kBuckets.size() + 1> counts{};  // per bucket, not cumulative
    uint64_t count = 0;
    double sum_seconds = 0;
  };

  void record(double seconds) {
    const auto b = std::lower_bound(kBuckets.begin(), kBuckets.end(), seconds) - kBuckets.begin();
    counts_[static_cast<size_t>(b)].fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(static_cast<uint64_t>(std::max(seconds, 0.0) * 1e6),
                      std::memory_order_relaxed);
  }
  Snapshot snapshot() const {
    Snapshot s;
    for (size_t b = 0; b < counts_.size(); ++b) {
      s.counts[b] = counts_[b].load(std::memory_order_relaxed);
      s.count += s.counts[b];
    }
    s.sum_seconds = static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1e6;
    return s;
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets.size() + 1> counts_{};
  std::atomic<uint64_t> sum_us_{0};
};

}  // namespace gossip::daemon

#pragma once
// What the benchmarks share: the median wall time of a call, and a comma list.

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

namespace gossip::bench {

// Runs fn `warmup` times untimed, then `reps` times; the median of those, in seconds.
template <typename F>
double median_seconds(int warmup, int reps, F&& fn) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  t.reserve(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    const auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  const size_t m = t.size() / 2;
  return t.size() % 2 ? t[m] : 0.5 * (t[m - 1] + t[m]);
}

// "a,,b" -> {"a", "b"}.
inline std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace gossip::bench

#pragma once
// The measuring loop shared by ring_bench, mpi_bench and gloo_bench, so the three
// differ only in the all-reduce they call. Header-only and free of gossipd code:
// mpi_bench and gloo_bench are built by bench/allreduce.sh with mpicxx / g++ alone.
//
// For each size: one checked call (every rank holds rank + 1, so the result is
// known), then the buffer is zeroed (sums of zeros stay zero: no overflow and no
// denormals however many calls follow), a barrier, `warmup` calls and `reps` timed
// calls back to back. Rank 0 prints one JSON line per size with the median call;
// bus bandwidth is 2(n-1)/n * bytes / time, as nccl-tests defines it.

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gossip::bench {

using Clock = std::chrono::steady_clock;

struct LoopOptions {
  int rank = 0;
  int size = 1;
  std::vector<uint64_t> sizes;  // bytes, multiples of 4
  std::vector<int> reps;        // one per size, or one for all
  std::vector<int> warmup;      // one per size, or one for all
  bool mean = false;            // the call computes the mean (ours), not the sum
};

// "4096,1048576" -> {4096, 1048576}; accepts K/M/G suffixes (powers of two).
inline std::vector<uint64_t> parse_sizes(const std::string& csv) {
  std::vector<uint64_t> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    uint64_t mult = 1;
    const char last = item.back();
    if (last == 'K' || last == 'k') mult = uint64_t{1} << 10;
    if (last == 'M' || last == 'm') mult = uint64_t{1} << 20;
    if (last == 'G' || last == 'g') mult = uint64_t{1} << 30;
    if (mult != 1) item.pop_back();
    out.push_back(std::stoull(item) * mult);
  }
  return out;
}

inline std::vector<int> parse_ints(const std::string& csv) {
  std::vector<int> out;
  for (uint64_t v : parse_sizes(csv)) out.push_back(static_cast<int>(v));
  return out;
}

// CPU time (user, system) in seconds of every thread of this process, by thread name.
inline std::map<std::string, std::pair<double, double>> thread_cpu() {
  std::map<std::string, std::pair<double, double>> out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    const auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::string name = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    std::vector<std::string> fields;
    while (rest >> field) fields.push_back(field);
    if (fields.size() < 13) continue;  // fields[11], [12] are utime, stime (stat fields 14, 15)
    auto& slot = out[name];
    slot.first += std::stod(fields[11]) / tick;
    slot.second += std::stod(fields[12]) / tick;
  }
  closedir(d);
  return out;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Where an implementation's calls spend their time, for the JSON line: `start()` before
// the timed calls, `report(reps, seconds)` after them returns fields to append (each
// starting with a comma). ring_bench reads its channels' counters (peers/ring_channel.h).
struct Probe {
  std::function<void()> start;
  std::function<std::string(int reps, double seconds)> report;
};

// Runs the loop. `allreduce(data)` reduces in place and returns false on failure
// (after printing why); `barrier()` likewise. `extra` is appended to each JSON line
// (e.g. ",\"chunk_bytes\":1048576"). Returns the process exit code.
inline int run_loop(const char* impl, const LoopOptions& o, const std::string& extra,
                    const std::function<bool(std::vector<float>&)>& allreduce,
                    const std::function<bool()>& barrier, const Probe& probe = {}) {
  const auto pick = [](const std::vector<int>& v, size_t i) {
    return v.empty() ? 1 : v[std::min(i, v.size() - 1)];
  };
  const double n = o.size;
  std::vector<float> data;
  for (size_t si = 0; si < o.sizes.size(); ++si) {
    const uint64_t bytes = o.sizes[si];
    const int reps = std::max(1, pick(o.reps, si));
    const int warmup = std::max(0, pick(o.warmup, si));
    data.assign(bytes / sizeof(float), static_cast<float>(o.rank + 1));

    // One checked call: sum of 1..n, or its mean.
    if (!barrier() || !allreduce(data)) return 1;
    const double want = o.mean ? (n + 1) / 2 : n * (n + 1) / 2;
    for (size_t i = 0; i < data.size(); i += std::max<size_t>(1, data.size() / 4096)) {
      if (std::fabs(data[i] - want) > 1e-5 * want) {
        std::fprintf(stderr, "%s rank %d: %llu bytes: element %zu is %g, want %g\n", impl, o.rank,
                     static_cast<unsigned long long>(bytes), i, data[i], want);
        return 1;
      }
    }

    std::fill(data.begin(), data.end(), 0.0f);
    if (!barrier()) return 1;
    for (int i = 0; i < warmup; ++i)
      if (!allreduce(data)) return 1;
    if (!barrier()) return 1;
    std::vector<double> times;
    times.reserve(static_cast<size_t>(reps));
    const auto cpu0 = thread_cpu();
    if (probe.start) probe.start();
    const auto loop0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      const auto t0 = Clock::now();
      if (!allreduce(data)) return 1;
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double loop_s = std::chrono::duration<double>(Clock::now() - loop0).count();
    const std::string probed = probe.report ? probe.report(reps, loop_s) : "";
    const auto cpu1 = thread_cpu();
    if (o.rank != 0) continue;

    const double med = median(times);
    const double busbw = 2.0 * (n - 1) / n * static_cast<double>(bytes) / med / 1e9;
    // CPU seconds per call of rank 0's threads, by name: where the time goes.
    std::string cpu = "{";
    for (const auto& [name, t1] : cpu1) {
      const auto it = cpu0.find(name);
      const double u = t1.first - (it == cpu0.end() ? 0 : it->second.first);
      const double s = t1.second - (it == cpu0.end() ? 0 : it->second.second);
      if (u + s <= 0) continue;
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s\"%s\":[%.6f,%.6f]", cpu.size() > 1 ? "," : "",
                    name.c_str(), u / reps, s / reps);
      cpu += buf;
    }
    cpu += "}";
    std::printf(
        "{\"impl\":\"%s\",\"ranks\":%d,\"bytes\":%llu,\"reps\":%d,\"median_s\":%.9f,"
        "\"min_s\":%.9f,\"mean_s\":%.9f,\"busbw_gbs\":%.4f,\"cpu_user_sys_per_call\":%s%s%s}\n",
        impl, o.size, static_cast<unsigned long long>(bytes), reps, med,
        *std::min_element(times.begin(), times.end()), loop_s / reps, busbw, cpu.c_str(),
        probed.c_str(), extra.c_str());
    std::fflush(stdout);
  }
  return barrier() ? 0 : 1;
}

}  // namespace gossip::bench

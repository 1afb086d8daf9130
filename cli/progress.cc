#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace gossip::cli {
namespace {
constexpr std::chrono::milliseconds kTtyInterval{250};
constexpr std::chrono::seconds kPlainInterval{5};
}  // namespace

ProgressSnapshot summarize_progress(std::span<const std::optional<TrainerCsvRow>> latest_rows) {
  ProgressSnapshot s;
  double acc_sum = 0;
  int acc_count = 0;
  bool first = true;
  for (const auto& row : latest_rows) {
    const int64_t step = row ? row->step : 0;
    s.min_step = first ? step : std::min(s.min_step, step);
    first = false;
    if (!row) continue;
    s.wire_sent += row->wire_sent;
    if (std::isfinite(row->test_accuracy)) {
      acc_sum += row->test_accuracy;
      ++acc_count;
    }
  }
  if (acc_count > 0) s.mean_accuracy = acc_sum / acc_count;
  return s;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1000) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes) / 1000.0;
  size_t unit = 0;
  while (v >= 999.95 && unit + 1 < std::size(kUnits)) {
    v /= 1000.0;
    ++unit;
  }
  return v < 9.995 ? fmt::format("{:.2f} {}", v, kUnits[unit])
                   : fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string format_progress(const ProgressSnapshot& snapshot, int64_t total_steps,
                            double elapsed_seconds) {
  const std::string acc =
      std::isfinite(snapshot.mean_accuracy) ? fmt::format("{:.3f}", snapshot.mean_accuracy) : "-";
  return fmt::format("step {}/{}  acc {}  sent {}  {:.1f} s", snapshot.min_step, total_steps, acc,
                     format_bytes(snapshot.wire_sent), elapsed_seconds);
}

bool ProgressLine::stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

void ProgressLine::update(const std::string& text) {
  const auto now = Clock::now();
  if (!last_) {
    // Off a terminal, the first line comes after one interval, so short runs stay quiet.
    if (!tty_) {
      last_ = now;
      return;
    }
  } else if (now - *last_ <
             (tty_ ? Clock::duration(kTtyInterval) : Clock::duration(kPlainInterval))) {
    return;
  }
  last_ = now;
  if (tty_) {
    std::fprintf(stderr, "\r%s\x1b[K", text.c_str());
    shown_ = true;
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void ProgressLine::clear() {
  if (tty_ && shown_) {
    std::fputs("\r\x1b[K", stderr);
    std::fflush(stderr);
    shown_ = false;
  }
}

void ProgressLine::finish(const std::string& text) {
  std::fprintf(stderr, tty_ ? "\r%s\x1b[K\n" : "%s\n", text.c_str());
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace gossip::cli

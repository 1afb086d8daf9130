#pragma once
// The one-line progress report gossipctl keeps on stderr while a cluster trains.

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "cli/run_files.h"

namespace gossip::cli {

struct ProgressSnapshot {
  int64_t min_step = 0;  // the slowest node's step (0 for a node without a row yet)
  double mean_accuracy =
      std::numeric_limits<double>::quiet_NaN();  // over the nodes' latest rows that have one; NaN
                                                 // if none has
  uint64_t wire_sent = 0;                        // summed over the nodes
};

ProgressSnapshot summarize_progress(std::span<const std::optional<TrainerCsvRow>> latest_rows);
// "step 240/600  acc 0.812  sent 12.3 MB  18.2 s"
std::string format_progress(const ProgressSnapshot& snapshot, int64_t total_steps,
                            double elapsed_seconds);
// Decimal units: "950 B", "12.3 kB", "12.3 MB", "1.23 GB".
std::string format_bytes(uint64_t bytes);

// Writes the progress line to stderr: redrawn in place (carriage return) at most a few
// times a second on a terminal, otherwise a plain line every few seconds.
class ProgressLine {
 public:
  explicit ProgressLine(bool tty) : tty_(tty) {}
  static bool stderr_is_tty();

  void update(const std::string& text);
  // Erases the line on a terminal, so other stderr output starts on a clean line.
  void clear();
  // Writes text as the last progress line, whatever the interval, ending it with a newline.
  void finish(const std::string& text);

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  bool shown_ = false;
  std::optional<Clock::time_point> last_;
};

}  // namespace gossip::cli

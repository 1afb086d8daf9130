#pragma once
// Reading what the cluster's processes leave in the run directory: the trainers' CSV
// (followed while it grows), their one-line JSON result, and the tail of a log.

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::cli {

// One row of a trainer's CSV
// (step,wall_seconds,loss,test_accuracy,payload_sent,payload_recv,wire_sent,wire_recv).
struct TrainerCsvRow {
  int64_t step = 0;
  double wall_seconds = std::numeric_limits<double>::quiet_NaN();
  double loss = std::numeric_limits<double>::quiet_NaN();
  double test_accuracy = std::numeric_limits<double>::quiet_NaN();  // NaN: not evaluated
  uint64_t payload_sent = 0;
  uint64_t payload_recv = 0;
  uint64_t wire_sent = 0;
  uint64_t wire_recv = 0;
};

// Parses a data row by the header's column names; "step" is required, a missing or
// empty other column keeps its default.
Result<TrainerCsvRow> parse_trainer_csv_row(std::span<const std::string> header,
                                            std::string_view line);

// Every data row of a finished trainer's CSV; the error names the file and line.
Result<std::vector<TrainerCsvRow>> read_trainer_csv(const std::string& path);

// Follows one trainer's CSV while the trainer appends to it.
class TrainerCsvTail {
 public:
  explicit TrainerCsvTail(std::string path) : path_(std::move(path)) {}
  // The last complete row so far; nothing while the file is absent or has no data row.
  // Reads only the end of the file, so it stays cheap for long runs.
  std::optional<TrainerCsvRow> latest();

 private:
  std::string path_;
  std::vector<std::string> header_;
  std::optional<TrainerCsvRow> last_;
};

// The trainer's result file: {"node":0,"steps":K,"accuracy_local":...,...}.
struct TrainerResult {
  int node = 0;
  int64_t steps = 0;
  double accuracy_local = 0;
  double accuracy_average = 0;
  double loss = 0;
  uint64_t payload_sent = 0;
  uint64_t payload_recv = 0;
  uint64_t wire_sent = 0;
  uint64_t wire_recv = 0;
  double wall_seconds = 0;
  // The daemon's account of its trainers' time (blocked on it, attached) and the
  // trainer's time evaluating; 0 from a trainer that does not write them.
  double wait_seconds = 0;
  double attached_seconds = 0;
  double eval_seconds = 0;
};

Result<TrainerResult> parse_trainer_result(std::string_view text);
// Errors name the file.
Result<TrainerResult> read_trainer_result(const std::string& path);

// The last n lines of a text file (reading at most its last max_bytes), without the
// newlines; empty when the file cannot be read.
std::vector<std::string> read_last_lines(const std::string& path, size_t n,
                                         size_t max_bytes = 16384);

}  // namespace gossip::cli

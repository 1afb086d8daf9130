#pragma once
// What a run writes for the experiment scripts: a CSV of evaluations and a one-line
// JSON result, whose field names are a contract with the scripts that read them.

#include <cstdint>
#include <fstream>
#include <string>

#include "base/status.h"

namespace gossip::trainer {

struct TrafficCounts {
  uint64_t payload_sent = 0, payload_recv = 0;
  uint64_t wire_sent = 0, wire_recv = 0;
};

struct CsvRow {
  uint64_t step = 0;
  double wall_seconds = 0;
  double loss = 0;  // mean training loss since the previous row
  double test_accuracy = 0;
  TrafficCounts traffic;
};

// Writes the header on open and flushes every row, so that a run can be followed
// (and a crashed run still leaves its rows).
class CsvLog {
 public:
  static Result<CsvLog> open(const std::string& path);
  Status write(const CsvRow& row);

 private:
  CsvLog(std::string path, std::ofstream out) : path_(std::move(path)), out_(std::move(out)) {}
  std::string path_;
  std::ofstream out_;
};

struct RunResult {
  uint32_t node = 0;
  uint64_t steps = 0;
  double accuracy_local = 0;
  double accuracy_average = 0;
  double loss = 0;       // mean training loss of the last evaluation window
  double test_loss = 0;  // of the average model
  TrafficCounts traffic;
  double wall_seconds = 0;
  // Where the time went from the first evaluation to the end: the daemon's account of
  // this node's trainers (blocked on it, and attached; gossipd_trainer_wait_seconds_total
  // and _attached_), and this trainer's time evaluating, which is neither training nor
  // waiting. 0 without a daemon, or without an evaluation before the end.
  double wait_seconds = 0;
  double attached_seconds = 0;
  double eval_seconds = 0;
};

// One line of JSON, e.g. {"node":0,"steps":2000,"accuracy_local":0.83,...}; a value
// that is not finite (a diverged run) is written as null.
std::string to_json(const RunResult& result);

// Writes `text` to path + ".tmp" and renames it over `path`, so a reader sees either
// no file or the whole of it.
Status write_file_atomically(const std::string& path, const std::string& text);

}  // namespace gossip::trainer

#pragma once
// A whole gossip-train run: load the data, attach to the node's daemon (or not, with
// --standalone), train, evaluate, report.

#include <cstdint>
#include <string>

#include "experiments/trainer/model.h"
#include "experiments/trainer/partition.h"
#include "experiments/trainer/sgd.h"

namespace gossip::trainer {

struct RunOptions {
  std::string endpoint;  // empty with standalone
  bool standalone = false;
  uint32_t node = 0;
  uint32_t nodes = 1;
  ModelKind model = ModelKind::kMlp;
  uint64_t steps = 2000;
  size_t batch = 64;
  SgdOptions sgd;
  LrSchedule lr_schedule = LrSchedule::kConstant;
  uint64_t seed = 0;
  Partition partition;
  uint64_t eval_every = 100;        // 0: only at the end
  std::string csv_path;             // empty: no CSV
  std::string result_path;          // empty: no result file
  std::string save_model_path;      // the final model's parameters (model_file.h)
  std::string snapshot_prefix;      // at every evaluation: PREFIX<step>.model (experiments)
  std::string evaluate_model_path;  // no training: evaluate this saved model and report
  std::string data_dir;
  std::string name;
  uint32_t local_rank = 0;
  double timeout_s = 120;
  double startup_timeout_s = 0;  // ClientOptions::startup_timeout
  double slowdown =
      1;  // >= 1: after each step, sleep (slowdown - 1) x the step's time (a straggler)
};

// Returns the process exit code: 0 on success, 1 on a runtime error (already printed
// to stderr).
int run(const RunOptions& options);

}  // namespace gossip::trainer

#pragma once
// A run's evaluations across its nodes, for experiment scripts (`gossipctl cluster
// --evaluations`): one row per evaluation step that every node reached, joined from
// the nodes' CSVs. The cluster fills in the consensus distance and the accuracy of
// the average model from the snapshots the trainers saved at that step.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cli/run_files.h"

namespace gossip::cli {

struct EvaluationRow {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  int64_t step = 0;
  double wall_seconds = kNaN;        // the slowest node's, since its trainer started
  uint64_t payload_sent = 0;         // all nodes together, since the start
  uint64_t wire_sent = 0;            // the same with framing
  double train_loss = kNaN;          // mean over the nodes of their window's mean loss
  double accuracy_nodes = kNaN;      // mean of the nodes' own test accuracies
  double accuracy_average = kNaN;    // the average model's
  double consensus_distance = kNaN;  // (1/n) sum_i |x_i - mean|^2
};

// Joins the nodes' rows by step, in step order, keeping the steps every node wrote.
std::vector<EvaluationRow> join_evaluations(const std::vector<std::vector<TrainerCsvRow>>& nodes);

// The CSV (header and rows) that `--evaluations` writes as evaluations.csv.
std::string evaluations_csv(const std::vector<EvaluationRow>& rows, int nodes);

}  // namespace gossip::cli

#include "cli/evaluations.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace gossip::cli {

std::vector<EvaluationRow> join_evaluations(const std::vector<std::vector<TrainerCsvRow>>& nodes) {
  std::map<int64_t, std::vector<const TrainerCsvRow*>> by_step;
  for (const auto& rows : nodes)
    for (const TrainerCsvRow& r : rows) by_step[r.step].push_back(&r);
  std::vector<EvaluationRow> out;
  for (const auto& [step, rows] : by_step) {
    if (rows.size() != nodes.size())
      continue;  // a node without this step (or twice) is not comparable
    EvaluationRow e;
    e.step = step;
    double loss = 0, accuracy = 0, wall = 0;
    for (const TrainerCsvRow* r : rows) {
      wall = std::max(wall, r->wall_seconds);
      e.payload_sent += r->payload_sent;
      e.wire_sent += r->wire_sent;
      loss += r->loss;
      accuracy += r->test_accuracy;
    }
    e.wall_seconds = wall;
    e.train_loss = loss / static_cast<double>(rows.size());
    e.accuracy_nodes = accuracy / static_cast<double>(rows.size());
    out.push_back(e);
  }
  return out;
}

std::string evaluations_csv(const std::vector<EvaluationRow>& rows, int nodes) {
  std::string out =
      "step,wall_seconds,payload_sent_total,payload_sent_per_node,wire_sent_total,train_loss,"
      "accuracy_nodes_mean,accuracy_average_model,consensus_distance\n";
  for (const EvaluationRow& r : rows) {
    out += fmt::format("{},{:.3f},{},{:.0f},{},{:.6g},{:.6f},{:.6f},{:.6g}\n", r.step,
                       r.wall_seconds, r.payload_sent,
                       static_cast<double>(r.payload_sent) / std::max(1, nodes), r.wire_sent,
                       r.train_loss, r.accuracy_nodes, r.accuracy_average, r.consensus_distance);
  }
  return out;
}

}  // namespace gossip::cli

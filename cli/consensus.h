#pragma once
// After a run: the nodes' final models (gossip-train --save-model files), their
// average and how far the nodes are from it. Gossip leaves every node with its own
// model; local SGD with one model (distance 0).

#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::cli {

struct Consensus {
  std::vector<float> average;  // x̄ = (1/n) Σ_i x_i
  double distance = 0;         // (1/n) Σ_i ‖x_i − x̄‖², the consensus distance
};

// Reads the models (flat fp32 files of one size) and averages them in fp64.
Result<Consensus> consensus_of(const std::vector<std::string>& model_paths);

// Writes flat fp32 values (the format gossip-train --evaluate reads).
Status write_model(const std::string& path, const std::vector<float>& values);

}  // namespace gossip::cli

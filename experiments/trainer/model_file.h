#pragma once
// A model's parameters on disk: the flat fp32 values of Mlp::layout(), in order,
// little-endian, nothing else. gossipctl averages the nodes' files to measure the
// consensus distance and the accuracy of the average model.

#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::trainer {

Status save_model(const std::string& path, const std::vector<std::span<float>>& tensors);
// Fails unless the file holds exactly `numel` values.
Result<std::vector<float>> load_model(const std::string& path, size_t numel);

}  // namespace gossip::trainer

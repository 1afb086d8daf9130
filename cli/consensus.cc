#include "cli/consensus.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

namespace gossip::cli {

namespace {

Result<std::vector<float>> read_model(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status::not_found(fmt::format("model file {}: {}", path, ec.message()));
  if (size == 0 || size % sizeof(float) != 0)
    return Status::mismatch(
        fmt::format("model file {} has {} bytes, not a positive multiple of 4", path, size));
  std::vector<float> values(size / sizeof(float));
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(size)))
    return Status::io_error(fmt::format("model file {}: read failed", path));
  return values;
}

}  // namespace

Result<Consensus> consensus_of(const std::vector<std::string>& model_paths) {
  if (model_paths.empty()) return Status::invalid("no models to average");
  std::vector<std::vector<float>> models;
  for (const auto& path : model_paths) {
    auto m = read_model(path);
    if (!m) return m.status();
    if (!models.empty() && m->size() != models.front().size())
      return Status::mismatch(fmt::format("model file {} has {} values, {} has {}", path, m->size(),
                                          model_paths.front(), models.front().size()));
    models.push_back(std::move(*m));
  }
  const size_t numel = models.front().size();
  const double inv_n = 1.0 / static_cast<double>(models.size());
  std::vector<double> mean(numel, 0.0);
  for (const auto& m : models)
    for (size_t e = 0; e < numel; ++e) mean[e] += m[e];
  for (double& v : mean) v *= inv_n;
  Consensus c;
  c.average.resize(numel);
  for (size_t e = 0; e < numel; ++e) c.average[e] = static_cast<float>(mean[e]);
  for (const auto& m : models) {
    double d = 0;
    for (size_t e = 0; e < numel; ++e) {
      const double diff = m[e] - mean[e];
      d += diff * diff;
    }
    c.distance += d * inv_n;
  }
  return c;
}

Status write_model(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::io_error(fmt::format("{}: cannot open for writing", path));
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) return Status::io_error(fmt::format("{}: write failed", path));
  return Status::ok();
}

}  // namespace gossip::cli

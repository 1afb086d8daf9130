#include "experiments/trainer/model_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "experiments/trainer/report.h"

namespace gossip::trainer {

Status save_model(const std::string& path, const std::vector<std::span<float>>& tensors) {
  std::string bytes;
  for (const auto& t : tensors)
    bytes.append(reinterpret_cast<const char*>(t.data()), t.size_bytes());
  return write_file_atomically(path, bytes);
}

Result<std::vector<float>> load_model(const std::string& path, size_t numel) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status::not_found(fmt::format("model file {}: {}", path, ec.message()));
  if (size != numel * sizeof(float))
    return Status::mismatch(
        fmt::format("model file {} has {} bytes; this model has {} parameters "
                    "({} bytes)",
                    path, size, numel, numel * sizeof(float)));
  std::vector<float> values(numel);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(size)))
    return Status::io_error(fmt::format("model file {}: read failed", path));
  return values;
}

}  // namespace gossip::trainer

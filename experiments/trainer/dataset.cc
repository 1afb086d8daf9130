#include "experiments/trainer/dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cassert>

#include "experiments/trainer/idx_reader.h"

namespace gossip::trainer {
namespace {

Result<IdxArray> read_dataset_file(const std::string& path) {
  auto array = read_idx(path);
  if (!array && array.status().code() == Status::Code::kNotFound) {
    return Status::not_found(
        fmt::format("Fashion-MNIST not found at {}: install Debian's dataset-fashion-mnist "
                    "(scripts/install-deps.sh)",
                    path));
  }
  return array;
}

}  // namespace

void Dataset::gather(std::span<const uint32_t> indices, std::span<float> out,
                     std::span<uint8_t> out_labels) const {
  assert(out.size() == indices.size() * kImagePixels && out_labels.size() == indices.size());
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint8_t* src = &pixels[size_t{indices[i]} * kImagePixels];
    float* dst = &out[i * kImagePixels];
    for (size_t p = 0; p < kImagePixels; ++p) dst[p] = static_cast<float>(src[p]) * kScale;
    out_labels[i] = labels[indices[i]];
  }
}

void Dataset::gather_range(size_t begin, std::span<float> out,
                           std::span<uint8_t> out_labels) const {
  const size_t n = out_labels.size();
  assert(begin + n <= size() && out.size() == n * kImagePixels);
  constexpr float kScale = 1.0f / 255.0f;
  const uint8_t* src = &pixels[begin * kImagePixels];
  for (size_t p = 0; p < n * kImagePixels; ++p) out[p] = static_cast<float>(src[p]) * kScale;
  for (size_t i = 0; i < n; ++i) out_labels[i] = labels[begin + i];
}

Result<Dataset> load_fashion_mnist(const std::string& dir, Split split) {
  const char* prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = fmt::format("{}/{}-images-idx3-ubyte.gz", dir, prefix);
  const std::string labels_path = fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, prefix);

  auto images = read_dataset_file(images_path);
  if (!images) return images.status();
  if (images->dims.size() != 3 || images->dims[1] != kImageRows || images->dims[2] != kImageCols) {
    return Status::invalid(fmt::format("{}: expected images of shape [N, {}, {}], got [{}]",
                                       images_path, kImageRows, kImageCols,
                                       fmt::join(images->dims, ", ")));
  }
  auto labels = read_dataset_file(labels_path);
  if (!labels) return labels.status();
  if (labels->dims.size() != 1) {
    return Status::invalid(fmt::format("{}: expected labels of shape [N], got [{}]", labels_path,
                                       fmt::join(labels->dims, ", ")));
  }
  if (labels->dims[0] != images->dims[0]) {
    return Status::invalid(fmt::format("{} has {} labels but {} has {} images", labels_path,
                                       labels->dims[0], images_path, images->dims[0]));
  }
  for (size_t i = 0; i < labels->data.size(); ++i) {
    if (labels->data[i] >= kNumClasses) {
      return Status::invalid(fmt::format("{}: label {} of sample {} is not in 0..{}", labels_path,
                                         labels->data[i], i, kNumClasses - 1));
    }
  }
  Dataset dataset;
  dataset.pixels = std::move(images->data);
  dataset.labels = std::move(labels->data);
  return dataset;
}

}  // namespace gossip::trainer

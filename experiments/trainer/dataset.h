#pragma once
// Fashion-MNIST in memory: 28x28 grey images and labels 0..9.
//
// Pixels stay as bytes (47 MB for the training set instead of 188 MB as floats, which
// matters when one machine runs a trainer per node); gather() turns a batch into
// floats in [0, 1].

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::trainer {

inline constexpr size_t kImageRows = 28;
inline constexpr size_t kImageCols = 28;
inline constexpr size_t kImagePixels = kImageRows * kImageCols;
inline constexpr size_t kNumClasses = 10;

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  std::vector<uint8_t> pixels;  // size() * kImagePixels, row-major per image
  std::vector<uint8_t> labels;  // each < kNumClasses

  size_t size() const { return labels.size(); }

  // Writes the images `indices` as floats in [0, 1] into out (indices.size() *
  // kImagePixels) and their labels into out_labels (indices.size()).
  void gather(std::span<const uint32_t> indices, std::span<float> out,
              std::span<uint8_t> out_labels) const;
  // Same for the contiguous range [begin, begin + out_labels.size()).
  void gather_range(size_t begin, std::span<float> out, std::span<uint8_t> out_labels) const;
};

enum class Split { kTrain, kTest };

// Loads `dir`/train-*-ubyte.gz or `dir`/t10k-*-ubyte.gz. Checks 28x28 images, as many
// labels as images, labels 0..9. A missing file fails with kNotFound and a message
// that names it and says how to install the dataset.
Result<Dataset> load_fashion_mnist(const std::string& dir, Split split);

}  // namespace gossip::trainer

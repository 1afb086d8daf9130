#pragma once
// Reader for IDX files (LeCun's MNIST format), gzip-compressed (one member or several) or
// plain.
//
// Format: 2 zero bytes, a type byte (0x08 = unsigned byte, the only type read here),
// a byte with the number of dimensions, each dimension as a big-endian uint32, then
// the elements in row-major order and nothing after them.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::trainer {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // product(dims) elements, row-major
};

// Bounds what a corrupt header can make the reader allocate.
inline constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 31;
inline constexpr uint32_t kMaxIdxDims = 8;

// On success returns the array. Fails with kNotFound if the file does not exist and
// with kInvalid / kIoError if it is not a complete, well-formed unsigned-byte IDX file
// (bad magic, zero dimension, truncated data or gzip stream, bytes after the data);
// every message starts with the path. Bytes after a gzip stream that begin no further
// member are ignored, as gzip ignores them.
Result<IdxArray> read_idx(const std::string& path);

}  // namespace gossip::trainer

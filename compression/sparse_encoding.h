#pragma once
// The payload of the sparse codecs (top-k, rand-k): a vector of n elements of
// which k are carried, as (sorted distinct indices, values).
//
// Layout (all multi-byte fields little-endian; varint = unsigned LEB128, at most
// 10 bytes, the 10th byte at most 0x01):
//
//   u8      format version             kSparseFormatVersion (1)
//   u8      index encoding             0 varint, 1 bitmap, 2 implicit (IndexEncoding)
//   u8      value type                 0 fp32, 1 fp16 (ValueType)
//   varint  n                          element count of the dense vector
//   varint  k                          number of carried elements, k <= n
//   indices, by encoding:
//     varint:   k varints: the first index as is, then the gaps idx[i] - idx[i-1]
//               (each >= 1, since indices are strictly increasing; every index < n)
//     bitmap:   ceil(n / 8) bytes, element i is bit (i % 8) of byte i / 8 (LSB
//               first); the padding bits past n are zero and exactly k bits are set
//     implicit: nothing; sender and receiver derive the indices (rand-k)
//   values:   k values in index order, 4 bytes (fp32) or 2 bytes (fp16) each
//
// The encoder picks whichever of varint and bitmap is smaller for the indices at
// hand (sizes computed exactly; varint on a tie). The payload is exactly this long:
// a decoder rejects trailing bytes.
//
// fp16 values: finite values beyond the fp16 range saturate to +-65504 instead of
// becoming inf, so that error feedback keeps a finite residual; inf and NaN pass
// through as inf and NaN.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "compression/codec.h"
#include "compression/payload_reader.h"  // varint_bytes

namespace gossip::compression {

class ThreadPool;

inline constexpr uint8_t kSparseFormatVersion = 1;

enum class IndexEncoding : uint8_t { kVarint = 0, kBitmap = 1, kImplicit = 2 };

// The fixed part of a payload, as read by parse_sparse_header.
struct SparseHeader {
  IndexEncoding encoding = IndexEncoding::kVarint;
  ValueType values = ValueType::kF32;
  uint64_t n = 0;
  uint64_t k = 0;
  size_t bytes = 0;  // length of the header itself: the index section starts here
};

// A decoded payload.
struct SparseVector {
  IndexEncoding encoding = IndexEncoding::kVarint;
  ValueType value_type = ValueType::kF32;
  uint64_t n = 0;
  std::vector<uint64_t> indices;
  std::vector<float> values;
};

// Sizes, in bytes. Indices must be strictly increasing and < n for the results
// to mean anything (encode_sparse checks; these do not).
uint64_t varint_index_bytes(std::span<const uint64_t> indices);
inline uint64_t bitmap_index_bytes(uint64_t n) { return (n + 7) / 8; }
inline uint64_t value_bytes(ValueType t) { return t == ValueType::kF16 ? 2 : 4; }
uint64_t sparse_header_bytes(uint64_t n, uint64_t k);
// The encoding encode_sparse picks: the smaller of the two, varint on a tie.
IndexEncoding choose_index_encoding(uint64_t n, std::span<const uint64_t> indices);
// The exact length of encode_sparse's output (with `force` as in encode_sparse).
uint64_t sparse_encoded_size(uint64_t n, std::span<const uint64_t> indices, ValueType t,
                             std::optional<IndexEncoding> force = std::nullopt);
// An upper bound of sparse_encoded_size over every set of k indices below n.
uint64_t sparse_max_encoded_size(uint64_t n, uint64_t k, ValueType t);

// Replaces `out` with the payload of (n, indices, values). Fails (Status::invalid)
// when indices are not strictly increasing or not below n, or when there are not
// as many values as indices. `force` picks the index encoding (varint or bitmap)
// instead of the smaller one: for tests and measurements.
Status encode_sparse(uint64_t n, std::span<const uint64_t> indices, std::span<const float> values,
                     ValueType t, std::vector<std::byte>& out,
                     std::optional<IndexEncoding> force = std::nullopt);

// Parses and checks the header: known version, encoding and value type, canonical
// varints, n == expected_n and k <= n. `who` names the codec in error messages.
Result<SparseHeader> parse_sparse_header(std::span<const std::byte> in, uint64_t expected_n,
                                         std::string_view who);

// Decodes a varint- or bitmap-indexed payload for expected_n elements, with every
// check of the layout above (Status::protocol naming `who` and the problem).
Result<SparseVector> decode_sparse(std::span<const std::byte> in, uint64_t expected_n,
                                   std::string_view who);

// Validates the whole payload (for y.size() elements, with values of type
// `expected_values`) and only then zeroes y and scatters the values into it; on
// failure y is untouched. The zeroing runs on `pool` for large y.
Status decode_sparse_into(std::span<const std::byte> in, ValueType expected_values,
                          std::string_view who, ThreadPool* pool, std::span<float> y);

// The rand-k form: header with the implicit encoding, then the values only.
uint64_t sparse_values_encoded_size(uint64_t n, uint64_t k, ValueType t);
Status encode_sparse_values(uint64_t n, std::span<const float> values, ValueType t,
                            std::vector<std::byte>& out);
// Checks the payload describes expected_n elements, expected_k values of type
// expected_values and nothing more, then writes the k values to `values` (resized).
Status decode_sparse_values(std::span<const std::byte> in, uint64_t expected_n, uint64_t expected_k,
                            ValueType expected_values, std::string_view who,
                            std::vector<float>& values);

}  // namespace gossip::compression

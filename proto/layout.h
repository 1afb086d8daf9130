#pragma once
// A model's layout: the ordered list of tensors a trainer shares with its daemon.
// All trainers of a node and all nodes must agree on it exactly.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::proto {

// The element type of a trainer's replica in the arena. Peers exchange fp32 whatever
// it is: a 16-bit replica is averaged in fp32 and rounded back (daemon/arena.h).
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

const char* dtype_name(DType d);
Result<DType> parse_dtype(const std::string& s);
inline constexpr size_t dtype_size(DType d) { return d == DType::kF32 ? 4 : 2; }

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  uint64_t numel = 0;
  bool operator==(const TensorSpec&) const = default;
};

struct Layout {
  std::vector<TensorSpec> tensors;

  uint64_t total_numel() const;
  // Of its tensors, which validate_layout() requires to share one.
  DType dtype() const { return tensors.empty() ? DType::kF32 : tensors.front().dtype; }
  // FNV-1a over names, dtypes and sizes: equal layouts give equal fingerprints on
  // every node, so peers can compare layouts with one integer per message.
  uint64_t fingerprint() const;
  bool operator==(const Layout&) const = default;
};

// Limits that bound what a trainer or a peer can make the daemon allocate.
inline constexpr size_t kMaxTensors = 65536;
inline constexpr size_t kMaxTensorNameBytes = 256;
inline constexpr uint64_t kMaxModelNumel = uint64_t{1} << 34;  // 64 GiB of fp32

// Checks a layout on its own: non-empty, names unique and bounded, sizes > 0, one
// dtype for every tensor, limits.
Status validate_layout(const Layout& layout);

// nullopt when equal; otherwise a message naming the first differing tensor, e.g.
// "tensor 2 'fc2.weight': node has f32[32768], trainer has f32[16384]".
std::optional<std::string> first_difference(const Layout& node, const Layout& other,
                                            const char* node_word = "node",
                                            const char* other_word = "trainer");

// Offsets (in elements of the layout's dtype) of each tensor inside one flat
// replica. Every tensor starts on a 64-byte boundary so that vector loads never
// straddle two tensors.
std::vector<uint64_t> tensor_offsets(const Layout& layout);
// Elements in one flat replica, padding included.
uint64_t padded_numel(const Layout& layout);

}  // namespace gossip::proto

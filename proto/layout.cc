#include "proto/layout.h"

#include <fmt/format.h>

#include <set>

namespace gossip::proto {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
  }
  return "?";
}

Result<DType> parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "f16" || s == "float16") return DType::kF16;
  return Status::invalid(fmt::format("unsupported dtype '{}' (supported: f32, bf16, f16)", s));
}

uint64_t Layout::total_numel() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.numel;
  return n;
}

uint64_t Layout::fingerprint() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& t : tensors) {
    mix(t.name.data(), t.name.size());
    uint8_t d = static_cast<uint8_t>(t.dtype);
    mix(&d, 1);
    mix(&t.numel, sizeof t.numel);
  }
  return h;
}

Status validate_layout(const Layout& layout) {
  if (layout.tensors.empty()) return Status::invalid("layout has no tensors");
  if (layout.tensors.size() > kMaxTensors)
    return Status::invalid(
        fmt::format("layout has {} tensors, limit is {}", layout.tensors.size(), kMaxTensors));
  std::set<std::string> names;
  uint64_t total = 0;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const auto& t = layout.tensors[i];
    if (t.name.empty()) return Status::invalid(fmt::format("tensor {} has an empty name", i));
    if (t.name.size() > kMaxTensorNameBytes)
      return Status::invalid(fmt::format("tensor {} name is {} bytes, limit is {}", i,
                                         t.name.size(), kMaxTensorNameBytes));
    if (!names.insert(t.name).second)
      return Status::invalid(fmt::format("tensor {} '{}' appears twice", i, t.name));
    if (t.numel == 0)
      return Status::invalid(fmt::format("tensor {} '{}' has 0 elements", i, t.name));
    if (t.dtype != layout.tensors.front().dtype)
      return Status::invalid(fmt::format(
          "tensor {} '{}' is {} and tensor 0 '{}' {}: one dtype for the whole model (cast it)", i,
          t.name, dtype_name(t.dtype), layout.tensors.front().name,
          dtype_name(layout.tensors.front().dtype)));
    if (t.numel > kMaxModelNumel || total + t.numel > kMaxModelNumel)
      return Status::invalid(
          fmt::format("layout exceeds {} elements at tensor {} '{}'", kMaxModelNumel, i, t.name));
    total += t.numel;
  }
  return Status::ok();
}

std::optional<std::string> first_difference(const Layout& node, const Layout& other,
                                            const char* node_word, const char* other_word) {
  size_t n = std::min(node.tensors.size(), other.tensors.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& a = node.tensors[i];
    const auto& b = other.tensors[i];
    if (a == b) continue;
    if (a.name != b.name)
      return fmt::format("tensor {}: {} has '{}', {} has '{}'", i, node_word, a.name, other_word,
                         b.name);
    return fmt::format("tensor {} '{}': {} has {}[{}], {} has {}[{}]", i, a.name, node_word,
                       dtype_name(a.dtype), a.numel, other_word, dtype_name(b.dtype), b.numel);
  }
  if (node.tensors.size() != other.tensors.size()) {
    const auto& longer = node.tensors.size() > n ? node : other;
    return fmt::format("tensor {} '{}': {} has {} tensors, {} has {}", n, longer.tensors[n].name,
                       node_word, node.tensors.size(), other_word, other.tensors.size());
  }
  return std::nullopt;
}

std::vector<uint64_t> tensor_offsets(const Layout& layout) {
  const uint64_t align = 64 / dtype_size(layout.dtype());
  std::vector<uint64_t> offsets;
  offsets.reserve(layout.tensors.size());
  uint64_t off = 0;
  for (const auto& t : layout.tensors) {
    offsets.push_back(off);
    off += (t.numel + align - 1) / align * align;
  }
  return offsets;
}

uint64_t padded_numel(const Layout& layout) {
  const uint64_t align = 64 / dtype_size(layout.dtype());
  uint64_t off = 0;
  for (const auto& t : layout.tensors) off += (t.numel + align - 1) / align * align;
  return off;
}

}  // namespace gossip::proto

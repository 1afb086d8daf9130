#include "compression/codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gossip::compression {

uint64_t sparse_count(double ratio, uint64_t n) {
  if (n == 0) return 0;
  auto k = static_cast<uint64_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<uint64_t>(k, 1, n);
}

namespace {

// Raw little-endian fp32: what travels when nothing is compressed.
class NoneCodec final : public Codec {
 public:
  proto::CodecId id() const override { return proto::CodecId::kNone; }
  std::string spec() const override { return "none"; }
  bool biased() const override { return false; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return n * sizeof(float); }
  Status encode(std::span<const float> x, const CodecContext&,
                std::vector<std::byte>& out) const override {
    out.resize(x.size_bytes());
    if (!x.empty()) std::memcpy(out.data(), x.data(), x.size_bytes());
    return Status::ok();
  }
  Status decode(std::span<const std::byte> in, const CodecContext&,
                std::span<float> y) const override {
    if (in.size() != y.size_bytes())
      return Status::protocol(fmt::format("none: payload is {} bytes, {} elements need {}",
                                          in.size(), y.size(), y.size_bytes()));
    if (!y.empty()) std::memcpy(y.data(), in.data(), in.size());
    return Status::ok();
  }
};

}  // namespace

std::unique_ptr<Codec> make_none() { return std::make_unique<NoneCodec>(); }

}  // namespace gossip::compression

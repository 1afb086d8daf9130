// fp16 and bf16: each element as one 16-bit float, round to nearest even (half.h).
// Payload: n little-endian u16, exactly 2n bytes. inf and NaN pass through (the
// daemon refuses NaN updates before they get here); values beyond fp16's range
// become inf, as an IEEE conversion does.

#include <fmt/format.h>

#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/half.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

constexpr size_t kGrain = size_t{1} << 16;

template <uint16_t (*ToHalf)(float), float (*FromHalf)(uint16_t)>
class HalfCodec final : public Codec {
 public:
  HalfCodec(proto::CodecId id, const char* name) : id_(id), name_(name) {}

  proto::CodecId id() const override { return id_; }
  std::string spec() const override { return name_; }
  bool biased() const override { return false; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return 2 * n; }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    out.resize(2 * x.size());
    const float* src = x.data();
    std::byte* dst = out.data();
    parallel_for(ctx.pool, x.size(), kGrain, [src, dst](size_t begin, size_t end) {
      // Local copies: a store through std::byte* may alias anything in memory, the
      // closure included, and GCC would reload the pointers and not vectorize.
      const float* s = src;
      std::byte* d = dst;
      for (size_t i = begin; i < end; ++i) store_le16(d + 2 * i, ToHalf(s[i]));
    });
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    if (in.size() != 2 * static_cast<uint64_t>(y.size()))
      return Status::protocol(fmt::format("{}: payload is {} bytes, {} elements need {}", name_,
                                          in.size(), y.size(), 2 * y.size()));
    const std::byte* src = in.data();
    float* dst = y.data();
    parallel_for(ctx.pool, y.size(), kGrain, [src, dst](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) dst[i] = FromHalf(load_le16(src + 2 * i));
    });
    return Status::ok();
  }

 private:
  proto::CodecId id_;
  const char* name_;
};

}  // namespace

std::unique_ptr<Codec> make_fp16() {
  return std::make_unique<HalfCodec<float_to_fp16, fp16_to_float>>(proto::CodecId::kFp16, "fp16");
}

std::unique_ptr<Codec> make_bf16() {
  return std::make_unique<HalfCodec<float_to_bf16, bf16_to_float>>(proto::CodecId::kBf16, "bf16");
}

}  // namespace gossip::compression

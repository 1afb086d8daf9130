// int8: blockwise absmax quantization. Per block of `block` elements (the last one
// shorter), scale = max|x| / 127 as fp32 and q = round-to-nearest-even(x / scale)
// in [-127, 127], so |x - q * scale| <= scale / 2 (plus fp32 rounding).
//
// Payload (little-endian): the ceil(n / block) scales as f32, then the n values as
// int8; 4 * ceil(n / block) + n bytes, ~1.016 bytes per element at block 256.
// Keeping the values contiguous lets the element loops index x and the payload alike.
//
// Non-finite input is refused: encode() fails with Status::invalid naming the first
// inf or NaN, since one such value would poison its whole block's scale (the daemon
// refuses NaN updates anyway). The decoder accepts only what the encoder writes:
// non-negative scales with 127 * scale finite, and values in [-127, 127].

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

constexpr size_t kGrain = size_t{1} << 16;
constexpr float kQmax = 127.0f;
// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the
// nearest integer, ties to even, in the current (default) rounding mode: a
// vectorizable std::nearbyint for the range we need.
constexpr float kRoundMagic = 12582912.0f;

class Int8Codec final : public Codec {
 public:
  explicit Int8Codec(uint32_t block) : block_(block) {}

  proto::CodecId id() const override { return proto::CodecId::kInt8; }
  std::string spec() const override { return fmt::format("int8:{}", block_); }
  bool biased() const override { return false; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return 4 * blocks(n) + n; }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    const size_t n = x.size();
    const size_t nb = blocks(n);
    out.resize(4 * nb + n);
    std::byte* scales = out.data();
    std::byte* values = out.data() + 4 * nb;
    // One flag per block (each written by one thread only) rather than a shared
    // error, so the first bad element can be named without a race.
    std::vector<uint8_t> bad(nb, 0);
    parallel_for(ctx.pool, nb, block_grain(), [&](size_t b0, size_t b1) {
      // Local copies: stores through std::byte* may alias anything, the closure's
      // references included, and GCC would reload them each iteration and not vectorize.
      const float* xs = x.data();
      std::byte* const scale_out = scales;
      std::byte* const value_out = values;
      uint8_t* const bad_out = bad.data();
      const size_t block = block_, count = n;
      for (size_t b = b0; b < b1; ++b) {
        const size_t lo = b * block, hi = std::min(count, lo + block);
        // Max of |x| as integer bits: monotone for non-negative floats, and inf and
        // NaN compare above every finite value, so one reduction finds both.
        uint32_t max_bits = 0;
        for (size_t i = lo; i < hi; ++i)
          max_bits = std::max(max_bits, std::bit_cast<uint32_t>(xs[i]) & 0x7fffffffu);
        if (max_bits >= 0x7f800000u) {
          bad_out[b] = 1;
          continue;
        }
        const float absmax = std::bit_cast<float>(max_bits);
        float scale = absmax / kQmax;
        // A subnormal scale loses precision; round it up so that 127 * scale still
        // covers absmax and the clamp below never cuts more than half a step. (A
        // normal scale is within 2^-24 of exact, so clamping costs at most rounding.)
        if (scale < std::numeric_limits<float>::min() && scale * kQmax < absmax)
          scale = std::nextafter(scale, std::numeric_limits<float>::infinity());
        // Near fp32's max, absmax / 127 may round up so far that 127 * scale is inf:
        // round it down instead (the clamp then costs a few ulps of absmax).
        if (!(scale * kQmax <= std::numeric_limits<float>::max())) scale = std::nextafter(scale, 0.0f);
        store_f32(scale_out + 4 * b, scale);
        if (scale == 0.0f) {
          for (size_t i = lo; i < hi; ++i) value_out[i] = std::byte{0};
          continue;
        }
        for (size_t i = lo; i < hi; ++i) {
          float v = std::clamp(xs[i] / scale, -kQmax, kQmax);
          v = (v + kRoundMagic) - kRoundMagic;
          value_out[i] = static_cast<std::byte>(static_cast<int32_t>(v));  // two's complement
        }
      }
    });
    auto first_bad = std::find(bad.begin(), bad.end(), 1);
    if (first_bad != bad.end()) {
      const size_t lo = static_cast<size_t>(first_bad - bad.begin()) * block_;
      size_t i = lo;
      while (std::isfinite(x[i])) ++i;
      out.clear();
      return Status::invalid(fmt::format("int8: cannot encode non-finite element {} ({})", i, x[i]));
    }
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    const size_t n = y.size();
    const size_t nb = blocks(n);
    if (in.size() != 4 * nb + n)
      return Status::protocol(fmt::format("int8:{}: payload is {} bytes, {} elements need {}", block_,
                                          in.size(), n, 4 * nb + n));
    const std::byte* scales = in.data();
    const std::byte* q = in.data() + 4 * nb;
    // Validate everything before writing y, so a bad payload leaves y untouched.
    for (size_t b = 0; b < nb; ++b) {
      const float s = load_f32(scales + 4 * b);
      // Anything the encoder can write: non-negative, and 127 * scale still finite.
      if (std::signbit(s) || !(s * kQmax <= std::numeric_limits<float>::max()))
        return Status::protocol(fmt::format("int8:{}: block {} has invalid scale {}", block_, b, s));
    }
    uint8_t has_min = 0;
    for (size_t i = 0; i < n; ++i) has_min |= static_cast<uint8_t>(q[i] == std::byte{0x80});
    if (has_min) {
      const size_t i = static_cast<size_t>(std::find(q, q + n, std::byte{0x80}) - q);
      return Status::protocol(fmt::format("int8:{}: element {} is -128, outside [-127, 127]", block_, i));
    }
    float* dst = y.data();
    parallel_for(ctx.pool, nb, block_grain(), [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        const size_t lo = b * block_, hi = std::min(n, lo + block_);
        const float s = load_f32(scales + 4 * b);
        for (size_t i = lo; i < hi; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(q[i])) * s;
      }
    });
    return Status::ok();
  }

 private:
  uint64_t blocks(uint64_t n) const { return (n + block_ - 1) / block_; }
  size_t block_grain() const { return std::max<size_t>(1, kGrain / block_); }

  uint32_t block_;
};

}  // namespace

std::unique_ptr<Codec> make_int8(uint32_t block) {
  return std::make_unique<Int8Codec>(std::max<uint32_t>(block, 1));
}

}  // namespace gossip::compression

// sign: one bit per element plus one scale per block, the scaled sign compressor of
// EF-signSGD (Karimireddy et al. 2019): x' = +scale where x >= 0, else -scale, with
// scale = mean |x| over the block. Zeros (+0 and -0) count as non-negative and
// decode to +scale; an all-zero block has scale 0 and decodes to zeros. Biased:
// use it with error feedback.
//
// Payload (little-endian): the ceil(n / block) scales as f32, then ceil(n / 8) bytes
// of sign bits, element i at bit i % 8 of byte i / 8 (LSB first), bit set = x >= 0;
// the last byte's unused bits are zero. 0.141 bytes per element at block 256.
//
// Non-finite input fails encode() with Status::invalid naming the first inf or NaN
// (its block's mean would be inf or NaN). The decoder checks the size, that scales
// are finite and non-negative, and the padding bits.

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

constexpr size_t kGrain = size_t{1} << 16;

class SignCodec final : public Codec {
 public:
  explicit SignCodec(uint32_t block) : block_(block) {}

  proto::CodecId id() const override { return proto::CodecId::kSign; }
  std::string spec() const override { return fmt::format("sign:{}", block_); }
  bool biased() const override { return true; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return payload_bytes(n); }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    const size_t n = x.size();
    const size_t nb = blocks(n);
    out.assign(payload_bytes(n), std::byte{0});
    std::byte* scales = out.data();
    std::byte* bits = out.data() + 4 * nb;
    std::vector<uint8_t> bad(nb, 0);  // one writer per block
    parallel_for(ctx.pool, nb, block_grain(), [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        const size_t lo = b * block_, hi = std::min(n, lo + block_);
        // inf and NaN have the largest |x| bit patterns: one integer max finds them.
        uint32_t max_bits = 0;
        for (size_t i = lo; i < hi; ++i)
          max_bits = std::max(max_bits, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
        if (max_bits >= 0x7f800000u) {
          bad[b] = 1;
          continue;
        }
        // In double and in index order: no overflow near fp32's max, and the same
        // sum whatever the thread split. The mean of finite floats fits in fp32.
        double sum = 0;
        for (size_t i = lo; i < hi; ++i) sum += std::fabs(static_cast<double>(x[i]));
        store_f32(scales + 4 * b, static_cast<float>(sum / static_cast<double>(hi - lo)));
      }
    });
    auto first_bad = std::find(bad.begin(), bad.end(), 1);
    if (first_bad != bad.end()) {
      size_t i = static_cast<size_t>(first_bad - bad.begin()) * block_;
      while (std::isfinite(x[i])) ++i;
      out.clear();
      return Status::invalid(fmt::format("sign:{}: cannot encode non-finite element {} ({})", block_, i, x[i]));
    }
    // Bytes rather than blocks are the unit here: a block need not be a multiple of
    // eight, and two threads must never write the same byte.
    parallel_for(ctx.pool, (n + 7) / 8, kGrain / 8, [&](size_t g0, size_t g1) {
      for (size_t g = g0; g < g1; ++g) {
        const size_t lo = 8 * g, hi = std::min(n, lo + 8);
        uint32_t byte = 0;
        for (size_t i = lo; i < hi; ++i) byte |= static_cast<uint32_t>(x[i] >= 0.0f) << (i - lo);
        bits[g] = static_cast<std::byte>(byte);
      }
    });
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    const size_t n = y.size();
    const size_t nb = blocks(n);
    if (in.size() != payload_bytes(n))
      return Status::protocol(fmt::format("sign:{}: payload is {} bytes, {} elements need {}", block_,
                                          in.size(), n, payload_bytes(n)));
    const std::byte* scales = in.data();
    const std::byte* bits = in.data() + 4 * nb;
    for (size_t b = 0; b < nb; ++b) {
      const float s = load_f32(scales + 4 * b);
      if (!std::isfinite(s) || std::signbit(s))
        return Status::protocol(fmt::format("sign:{}: block {} has invalid scale {}", block_, b, s));
    }
    if (n % 8 != 0 && (std::to_integer<uint32_t>(bits[n / 8]) >> (n % 8)) != 0)
      return Status::protocol(fmt::format("sign:{}: padding bits of the last byte are not zero", block_));
    float* dst = y.data();
    parallel_for(ctx.pool, nb, block_grain(), [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        const size_t lo = b * block_, hi = std::min(n, lo + block_);
        const float s = load_f32(scales + 4 * b);
        // Branch-free: the sign bit of +-s comes straight from the packed bit.
        const uint32_t s_bits = std::bit_cast<uint32_t>(s);
        for (size_t i = lo; i < hi; ++i) {
          const uint32_t bit = (std::to_integer<uint32_t>(bits[i >> 3]) >> (i & 7)) & 1u;
          dst[i] = std::bit_cast<float>(s_bits | ((bit ^ 1u) << 31));
        }
      }
    });
    return Status::ok();
  }

 private:
  uint64_t blocks(uint64_t n) const { return (n + block_ - 1) / block_; }
  uint64_t payload_bytes(uint64_t n) const { return 4 * blocks(n) + (n + 7) / 8; }
  size_t block_grain() const { return std::max<size_t>(1, kGrain / block_); }

  uint32_t block_;
};

}  // namespace

std::unique_ptr<Codec> make_sign(uint32_t block) {
  return std::make_unique<SignCodec>(std::max<uint32_t>(block, 1));
}

}  // namespace gossip::compression

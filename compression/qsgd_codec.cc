// QSGD (Alistarh et al. 2017): per bucket of `bucket` elements, norm = ||x||_2 and
// each element becomes sign(x) * l / S * norm with l = floor(|x| / norm * S + u),
// u ~ U[0, 1), so E[l] = |x| / norm * S and the decoded value is unbiased, with
// variance at most (norm / S)^2 / 4 per element. u comes from a counter-based RNG
// keyed by (ctx.seed, element index): the payload does not depend on the threads.
//
// Payload (little-endian): the ceil(n / bucket) norms as f32, then n codes of
// b = bit_width(S) + 1 bits (= ceil(log2(S + 1)) + 1) as one LSB-first bit stream,
// code = level | negative << (b - 1); the last byte's unused bits are zero.
// 4 * ceil(n / bucket) + ceil(n * b / 8) bytes: 0.758 bytes per element for qsgd:16
// with bucket 512. Eight codes fill exactly b bytes, so groups of eight elements
// are packed independently and split across threads.
//
// Non-finite input, or a bucket whose norm exceeds fp32's range, fails encode()
// with Status::invalid. The decoder needs no seed; it checks the size, that norms
// are finite and non-negative, levels <= S and zero padding bits.

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>

#include "base/split_mix64.h"
#include "compression/bytes.h"
#include "compression/codec.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

// Lowers `target` to `v` when smaller, from any thread: the first bad index wins
// whatever the thread split, so error messages are reproducible.
void atomic_min(std::atomic<size_t>& target, size_t v) {
  size_t cur = target.load(std::memory_order_relaxed);
  while (v < cur && !target.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

class QsgdCodec final : public Codec {
 public:
  QsgdCodec(uint32_t levels, uint32_t bucket)
      : levels_(levels),
        bucket_(bucket),
        bits_(static_cast<uint32_t>(std::bit_width(levels)) + 1) {}

  proto::CodecId id() const override { return proto::CodecId::kQsgd; }
  // The bucket is not part of the spec grammar (make_codec fixes it).
  std::string spec() const override { return fmt::format("qsgd:{}", levels_); }
  bool biased() const override { return false; }
  uint64_t max_encoded_bytes(uint64_t n) const override { return payload_bytes(n); }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    const size_t n = x.size();
    const size_t nb = buckets(n);
    std::vector<float> norms(nb);
    // 0 ok, 1 non-finite element, 2 norm beyond fp32; one writer per bucket.
    std::vector<uint8_t> bad(nb, 0);
    parallel_for(ctx.pool, nb, bucket_grain(), [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        const size_t lo = b * bucket_, hi = std::min(n, lo + bucket_);
        // Squares of floats are exact in double and their sum cannot overflow, so
        // the sum is finite exactly when every element is; summed in index order
        // within the bucket, so the norm does not depend on the threads.
        double sum = 0;
        for (size_t i = lo; i < hi; ++i) sum += static_cast<double>(x[i]) * x[i];
        const double norm = std::sqrt(sum);
        if (!std::isfinite(norm)) {
          bad[b] = 1;
        } else if (norm > std::numeric_limits<float>::max()) {
          bad[b] = 2;
        } else {
          // Rounding is monotone and sum >= max x^2, so norms[b] >= max |x|: every
          // |x| / norm is <= 1 and every level <= S.
          norms[b] = static_cast<float>(norm);
        }
      }
    });
    auto first_bad = std::find_if(bad.begin(), bad.end(), [](uint8_t v) { return v != 0; });
    if (first_bad != bad.end()) {
      const size_t b = static_cast<size_t>(first_bad - bad.begin());
      out.clear();
      if (*first_bad == 2)
        return Status::invalid(
            fmt::format("qsgd:{}: bucket {} (elements {}..) has an L2 norm beyond fp32's range",
                        levels_, b, b * bucket_));
      size_t i = b * bucket_;
      while (std::isfinite(x[i])) ++i;
      return Status::invalid(
          fmt::format("qsgd:{}: cannot encode non-finite element {} ({})", levels_, i, x[i]));
    }

    out.assign(payload_bytes(n), std::byte{0});
    for (size_t b = 0; b < nb; ++b) store_f32(out.data() + 4 * b, norms[b]);
    std::byte* codes = out.data() + 4 * nb;
    const uint64_t key = stream_key(ctx.seed);
    const double s = levels_;
    const uint64_t sign_bit = uint64_t{1} << (bits_ - 1);
    parallel_for(ctx.pool, groups(n), group_grain(), [&](size_t g0, size_t g1) {
      for (size_t g = g0; g < g1; ++g) {
        std::byte* p = codes + g * bits_;  // eight codes fill exactly bits_ bytes
        uint64_t acc = 0;
        uint32_t nacc = 0;
        const size_t hi = std::min(n, 8 * g + 8);
        for (size_t i = 8 * g; i < hi; ++i) {
          const double norm = norms[i / bucket_];
          uint64_t code = 0;
          if (norm > 0) {
            const double r = std::fabs(static_cast<double>(x[i])) / norm * s;
            const double l = std::floor(r + counter_uniform(key, i));
            code = std::min(static_cast<uint64_t>(l), uint64_t{levels_});
            if (x[i] < 0) code |= sign_bit;
          }
          acc |= code << nacc;
          nacc += bits_;
          while (nacc >= 8) {
            *p++ = static_cast<std::byte>(acc & 0xff);
            acc >>= 8;
            nacc -= 8;
          }
        }
        if (nacc > 0) *p = static_cast<std::byte>(acc);  // only in the last group
      }
    });
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    const size_t n = y.size();
    const size_t nb = buckets(n);
    if (in.size() != payload_bytes(n))
      return Status::protocol(fmt::format("qsgd:{}: payload is {} bytes, {} elements need {}",
                                          levels_, in.size(), n, payload_bytes(n)));
    for (size_t b = 0; b < nb; ++b) {
      const float norm = load_f32(in.data() + 4 * b);
      if (!std::isfinite(norm) || std::signbit(norm))
        return Status::protocol(
            fmt::format("qsgd:{}: bucket {} has invalid norm {}", levels_, b, norm));
    }
    const std::byte* codes = in.data() + 4 * nb;
    const uint64_t used_bits = static_cast<uint64_t>(n) * bits_;
    if (used_bits % 8 != 0) {
      const auto last = std::to_integer<uint32_t>(codes[used_bits / 8]);
      if (last >> (used_bits % 8) != 0)
        return Status::protocol(
            fmt::format("qsgd:{}: padding bits of the last byte are not zero", levels_));
    }
    const uint64_t level_mask = (uint64_t{1} << (bits_ - 1)) - 1;

    // Check every level before writing y, so a bad payload leaves y untouched.
    std::atomic<size_t> first_bad{n};
    parallel_for(ctx.pool, groups(n), group_grain(), [&](size_t g0, size_t g1) {
      for (size_t g = g0; g < g1; ++g)
        for_each_code(codes, n, g, [&](size_t i, uint64_t code) {
          if ((code & level_mask) > levels_) atomic_min(first_bad, i);
        });
    });
    if (const size_t i = first_bad.load(); i < n) {
      uint64_t level = 0;
      for_each_code(codes, n, i / 8, [&](size_t j, uint64_t code) {
        if (j == i) level = code & level_mask;
      });
      return Status::protocol(
          fmt::format("qsgd:{}: element {} has level {} above {}", levels_, i, level, levels_));
    }

    float* dst = y.data();
    const double s = levels_;
    parallel_for(ctx.pool, groups(n), group_grain(), [&](size_t g0, size_t g1) {
      for (size_t g = g0; g < g1; ++g)
        for_each_code(codes, n, g, [&](size_t i, uint64_t code) {
          const double norm = load_f32(in.data() + 4 * (i / bucket_));
          // level <= S, so the product never exceeds the (finite) fp32 norm.
          const auto v = static_cast<float>(static_cast<double>(code & level_mask) * norm / s);
          dst[i] = (code >> (bits_ - 1)) ? -v : v;
        });
    });
    return Status::ok();
  }

 private:
  uint64_t buckets(uint64_t n) const { return (n + bucket_ - 1) / bucket_; }
  static uint64_t groups(uint64_t n) { return (n + 7) / 8; }
  uint64_t payload_bytes(uint64_t n) const { return 4 * buckets(n) + (n * bits_ + 7) / 8; }
  size_t bucket_grain() const { return std::max<size_t>(1, kParallelGrain / bucket_); }
  static size_t group_grain() { return kParallelGrain / 8; }

  // Calls fn(i, code) for the (up to) eight elements of group g, reading only the
  // bytes those codes occupy.
  template <typename Fn>
  void for_each_code(const std::byte* codes, size_t n, size_t g, Fn&& fn) const {
    const std::byte* p = codes + g * bits_;
    const uint64_t mask = (uint64_t{1} << bits_) - 1;
    uint64_t acc = 0;
    uint32_t nacc = 0;
    const size_t hi = std::min(n, 8 * g + 8);
    for (size_t i = 8 * g; i < hi; ++i) {
      while (nacc < bits_) {
        acc |= std::to_integer<uint64_t>(*p++) << nacc;
        nacc += 8;
      }
      fn(i, acc & mask);
      acc >>= bits_;
      nacc -= bits_;
    }
  }

  uint32_t levels_;
  uint32_t bucket_;
  uint32_t bits_;  // per code: level bits plus a sign bit
};

}  // namespace

std::unique_ptr<Codec> make_qsgd(uint32_t levels, uint32_t bucket) {
  return std::make_unique<QsgdCodec>(std::max<uint32_t>(levels, 1), std::max<uint32_t>(bucket, 1));
}

}  // namespace gossip::compression

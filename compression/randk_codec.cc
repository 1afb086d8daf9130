// Rand-k sparsification (Stich et al. 2018): keep k = sparse_count(R, n) entries at
// random positions, scaled by n/k so that the estimate is unbiased: each index is
// kept with probability k/n, so E[y_i] = (k/n) * (n/k) * x_i = x_i.
//
// The positions are a function of (ctx.seed, n) only, so the receiver derives the
// same set and the payload carries the values alone (IndexEncoding::kImplicit).
// The derivation is part of the wire format and uses integer arithmetic only, so
// every platform agrees:
//   - PRNG: xoshiro256** (Blackman & Vigna 2018), its four state words the first
//     four outputs of splitmix64 started at seed ^ (n * 0x9e3779b97f4a7c15) ^
//     0x72616e646b5f7631 ("randk_v1");
//   - uniform integers in [0, b]: Lemire's multiply-shift with rejection (2019),
//     exact, 128-bit product;
//   - the set: Floyd's algorithm (Bentley & Floyd 1987): for j = n-k .. n-1 draw t
//     uniform in [0, j]; keep t, or j when t is already kept. k draws, membership
//     in an n-bit bitmap, indices read out of the bitmap in ascending order.
// Values travel unscaled (the receiver scales by n/k, as fp32) so that fp16 values
// do not overflow by the scaling; non-finite values pass through as they are.

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "base/split_mix64.h"
#include "compression/codec.h"
#include "compression/randk_indices.h"
#include "compression/sparse_encoding.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

constexpr size_t kGatherGrain = size_t{1} << 18;

class Xoshiro256ss {
 public:
  explicit Xoshiro256ss(uint64_t seed) {
    SplitMix64 expand(seed);  // the seeding xoshiro's authors recommend
    for (auto& w : s_) w = expand.next();
  }
  uint64_t next() {
    uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, bound), bound > 0, without bias (Lemire 2019).
  uint64_t below(uint64_t bound) {
    auto m = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<uint64_t>(m);
    if (low < bound) {
      uint64_t floor = (0 - bound) % bound;
      while (low < floor) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t s_[4];
};

}  // namespace

// The kept positions, ascending (see the top of the file).
std::vector<uint64_t> randk_indices(uint64_t seed, uint64_t n, uint64_t k) {
  std::vector<uint64_t> out;
  if (k == 0 || n == 0) return out;
  Xoshiro256ss rng(seed ^ (n * kWeyl) ^ 0x72616e646b5f7631ull);
  std::vector<uint64_t> bits((n + 63) / 64, 0);
  for (uint64_t j = n - k; j < n; ++j) {
    uint64_t t = rng.below(j + 1);
    uint64_t pick = (bits[t / 64] >> (t % 64)) & 1 ? j : t;
    bits[pick / 64] |= uint64_t{1} << (pick % 64);
  }
  out.reserve(k);
  for (uint64_t w = 0; w < bits.size(); ++w) {
    uint64_t word = bits[w];
    while (word) {
      out.push_back(w * 64 + static_cast<uint64_t>(std::countr_zero(word)));
      word &= word - 1;
    }
  }
  return out;
}

namespace {

class RandkCodec final : public Codec {
 public:
  RandkCodec(double ratio, ValueType values) : ratio_(ratio), values_(values) {}

  proto::CodecId id() const override { return proto::CodecId::kRandk; }
  std::string spec() const override {
    return fmt::format("randk:{}{}", ratio_, values_ == ValueType::kF16 ? ":fp16" : "");
  }
  bool biased() const override { return false; }
  uint64_t max_encoded_bytes(uint64_t n) const override {
    return sparse_values_encoded_size(n, sparse_count(ratio_, n), values_);
  }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    uint64_t n = x.size();
    auto idx = randk_indices(ctx.seed, n, sparse_count(ratio_, n));
    std::vector<float> vals(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) vals[i] = x[idx[i]];
    return encode_sparse_values(n, vals, values_, out);
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    uint64_t n = y.size();
    uint64_t k = sparse_count(ratio_, n);
    std::vector<float> vals;
    GOSSIP_RETURN_IF_ERROR(decode_sparse_values(in, n, k, values_, "randk", vals));
    auto idx = randk_indices(ctx.seed, n, k);
    float* out = y.data();
    parallel_for(ctx.pool, y.size(), kGatherGrain,
                 [out](size_t b, size_t e) { std::memset(out + b, 0, (e - b) * sizeof(float)); });
    if (k == 0) return Status::ok();
    const auto scale = static_cast<float>(static_cast<double>(n) / static_cast<double>(k));
    for (size_t i = 0; i < idx.size(); ++i) out[idx[i]] = vals[i] * scale;
    return Status::ok();
  }

 private:
  double ratio_;
  ValueType values_;
};

}  // namespace

std::unique_ptr<Codec> make_randk(double ratio, ValueType values) {
  return std::make_unique<RandkCodec>(ratio, values);
}

}  // namespace gossip::compression

// Top-k sparsification: keep the k = sparse_count(R, n) entries of largest |x|, as a
// sparse payload (sparse_encoding.h). Biased: meant to run with error feedback.
//
// Selection works on the magnitude key of an fp32, its bits without the sign: for
// finite values the integer order of keys is the order of |x|, so selection is
// integer radix selection. Ties (equal |x|) go to the lower index, so the result
// is a function of x alone, whatever the thread count.
//
// Non-finite input (inf, NaN) has no meaningful top-k: encode fails with
// Status::invalid naming the first non-finite index.
//
// Exact path: one parallel histogram of the top 12 key bits finds the bin holding
// the k-th largest key; one parallel pass collects the candidates at or above that
// bin (k plus part of one narrow bin), and a radix select over the candidates
// (11+11+9 bits, on a compact copy of their bits) finds the exact k.
//
// Approximate path (Deep Gradient Compression, Lin et al. 2018, sec. 3.1): the
// threshold is estimated from a random sample (1% of x, at least 4096 elements, in
// runs of 8 consecutive elements at positions drawn by splitmix64 seeded with
// ctx.seed and n), aimed above k by two standard deviations of the estimate (at
// least 3%) so that the one parallel pass collecting |x| >= threshold usually finds
// slightly more than k candidates; those are cut to exactly k by the radix select
// above, which is then the exact top-k. So the approximate path saves the
// histogram pass, not accuracy. When the sample was unlucky and fewer than k were
// found: a count >= k - floor(k/10) is kept as is (all of them are the largest of
// x); below that, the sample rank is doubled (a lower threshold) and the pass
// repeated, at most 3 times, then the exact path runs. The count is always in
// [k - floor(k/10), k] (tolerance 10%, one-sided), the kept entries are always the
// largest of x, and inputs under 65536 elements take the exact path.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/split_mix64.h"
#include "compression/codec.h"
#include "compression/half.h"
#include "compression/sparse_encoding.h"
#include "compression/thread_pool.h"
#include "compression/topk_select.h"

namespace gossip::compression {

namespace {

constexpr uint32_t kNonFiniteKey = 0x7f800000u;  // keys at or above: inf or NaN
// Below this size the sample would be a large part of x: exact selection instead.
constexpr uint64_t kMinApproxN = uint64_t{1} << 16;
constexpr uint64_t kMinSample = 4096;
constexpr uint64_t kSampleRun = 8;
constexpr int kApproxTries = 3;

inline uint32_t mag_key(float f) { return float_bits(f) & 0x7fffffffu; }

inline uint64_t approx_slack(uint64_t k) { return topk_approx_slack(k); }

// A position of the threshold sample, uniform in [0, bound): Lemire's multiply-shift
// of SplitMix64's next draw (the tiny bias is irrelevant for a threshold estimate, and
// unlike rejection it takes exactly one draw).
inline uint64_t sample_below(SplitMix64& rng, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng.next()) * bound) >> 64);
}

// Candidates: indices (ascending) with the fp32 bits of their values side by side,
// so that selecting among them, and gathering the kept values, reads a compact
// array instead of x at scattered places.
struct Candidates {
  std::vector<uint64_t> index;
  std::vector<uint32_t> bits;
};

// The `need` largest magnitudes among the candidates, ties to the lower index,
// into out in ascending index order.
void select_among(const Candidates& cand, uint64_t need, Candidates& out) {
  out.index.clear();
  out.bits.clear();
  if (need == 0) return;
  const size_t m = cand.index.size();
  if (need >= m) {
    out = cand;
    return;
  }
  // Three radix rounds over the 31 key bits, most significant first: each finds
  // the bin holding the need-th largest among the keys matching the prefix so far.
  struct Round {
    int shift;
    int bits;
  };
  constexpr std::array<Round, 3> kRounds{{{20, 11}, {9, 11}, {0, 9}}};
  uint32_t prefix = 0, mask = 0;
  uint64_t remaining = need;  // how many to take among keys matching prefix/mask
  std::vector<uint64_t> hist;
  const uint32_t* bits = cand.bits.data();
  for (const Round& rd : kRounds) {
    uint32_t bins = 1u << rd.bits;
    hist.assign(bins, 0);
    for (size_t i = 0; i < m; ++i) {
      uint32_t k = bits[i] & 0x7fffffffu;
      if ((k & mask) == prefix) ++hist[(k >> rd.shift) & (bins - 1)];
    }
    uint64_t above = 0;
    uint32_t b = bins - 1;
    for (;; --b) {
      if (above + hist[b] >= remaining) break;
      above += hist[b];
    }
    remaining -= above;
    prefix |= b << rd.shift;
    mask |= (bins - 1) << rd.shift;
  }
  const uint32_t t = prefix;  // the need-th largest key; take `remaining` of its ties
  out.index.reserve(need);
  out.bits.reserve(need);
  for (size_t i = 0; i < m; ++i) {
    uint32_t k = bits[i] & 0x7fffffffu;
    if (k > t || (k == t && remaining > 0)) {
      remaining -= k == t;
      out.index.push_back(cand.index[i]);
      out.bits.push_back(bits[i]);
    }
  }
}

// The elements of x whose key is >= threshold, ascending: each range's list is
// filed under its start and the lists joined in order, so the result does not
// depend on how parallel_for cut x.
Candidates collect_at_least(std::span<const float> x, uint32_t threshold, ThreadPool* pool) {
  std::mutex mu;
  std::vector<std::pair<size_t, Candidates>> parts;
  const float* p = x.data();
  // Keys are below 2^31: compared as int32, which every SIMD level has.
  const auto thr = static_cast<int32_t>(threshold);
  parallel_for(pool, x.size(), kParallelGrain, [&](size_t b, size_t e) {
    Candidates local;
    auto take = [&](size_t i) {
      auto k = static_cast<int32_t>(mag_key(p[i]));
      if (k >= thr) {
        local.index.push_back(i);
        local.bits.push_back(float_bits(p[i]));
      }
    };
    size_t i = b;
#if defined(__SSE2__)
    // 16 elements per step: one mask of those at or above the threshold, its set
    // bits walked in order; no per-element branch to mispredict. (The compiler
    // does not vectorize the scalar form below on its own at -O2.)
    const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
    const __m128i below = _mm_set1_epi32(thr - 1);  // k >= thr  <=>  k > thr - 1 (thr >= 0)
    for (; i + 16 <= e; i += 16) {
      auto gt = [&](size_t o) {
        __m128i v =
            _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + o)), abs_mask);
        return _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(v, below)));
      };
      auto m = static_cast<uint32_t>(gt(0) | gt(4) << 4 | gt(8) << 8 | gt(12) << 12);
      while (m) {
        size_t j = i + static_cast<size_t>(std::countr_zero(m));
        local.index.push_back(j);
        local.bits.push_back(float_bits(p[j]));
        m &= m - 1;
      }
    }
#endif
    for (; i < e; ++i) take(i);
    std::lock_guard lock(mu);
    parts.emplace_back(b, std::move(local));
  });
  std::sort(parts.begin(), parts.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (parts.size() == 1) return std::move(parts[0].second);
  size_t total = 0;
  for (auto& [b, c] : parts) total += c.index.size();
  Candidates all;
  all.index.reserve(total);
  all.bits.reserve(total);
  for (auto& [b, c] : parts) {
    all.index.insert(all.index.end(), c.index.begin(), c.index.end());
    all.bits.insert(all.bits.end(), c.bits.begin(), c.bits.end());
  }
  return all;
}

Status non_finite_error(std::span<const float> x) {
  for (size_t i = 0; i < x.size(); ++i)
    if (mag_key(x[i]) >= kNonFiniteKey)
      return Status::invalid(fmt::format("topk: x[{}] is not finite ({})", i, x[i]));
  return Status::invalid("topk: non-finite input");  // unreachable: callers saw one
}

Status select_exact(std::span<const float> x, uint64_t k, ThreadPool* pool, Candidates& out) {
  out = Candidates{};
  if (k == 0) return Status::ok();
  // Histogram of the top 11 key bits (integer sums: the order ranges finish in
  // does not matter).
  // 4096 bins (8 per octave of |x|... 16 with the 4 top mantissa bits): the bin
  // at the threshold is narrow, so few candidates beyond k are collected.
  constexpr int kShift = 19;
  constexpr uint32_t kBins = 1u << (31 - kShift);
  std::array<uint64_t, kBins> hist{};
  std::mutex mu;
  const float* p = x.data();
  parallel_for(pool, x.size(), kParallelGrain, [&](size_t b, size_t e) {
    // Four sub-histograms break the store-to-load dependency of equal neighbors;
    // 32-bit counts flushed every 2^30 elements so they cannot overflow.
    std::vector<uint32_t> sub(4 * kBins, 0);
    std::array<uint64_t, kBins> local{};
    auto flush = [&] {
      for (uint32_t j = 0; j < kBins; ++j) {
        local[j] += uint64_t{sub[j]} + sub[kBins + j] + sub[2 * kBins + j] + sub[3 * kBins + j];
        sub[j] = sub[kBins + j] = sub[2 * kBins + j] = sub[3 * kBins + j] = 0;
      }
    };
    for (size_t cb = b; cb < e; cb += size_t{1} << 30) {
      size_t ce = std::min(e, cb + (size_t{1} << 30));
      size_t i = cb;
      for (; i + 4 <= ce; i += 4) {
        ++sub[0 * kBins + (mag_key(p[i]) >> kShift)];
        ++sub[1 * kBins + (mag_key(p[i + 1]) >> kShift)];
        ++sub[2 * kBins + (mag_key(p[i + 2]) >> kShift)];
        ++sub[3 * kBins + (mag_key(p[i + 3]) >> kShift)];
      }
      for (; i < ce; ++i) ++sub[mag_key(p[i]) >> kShift];
      flush();
    }
    std::lock_guard lock(mu);
    for (uint32_t j = 0; j < kBins; ++j) hist[j] += local[j];
  });
  for (uint32_t j = kNonFiniteKey >> kShift; j < kBins; ++j)
    if (hist[j]) return non_finite_error(x);
  uint64_t above = 0;
  uint32_t bin = kBins - 1;
  for (;; --bin) {
    if (above + hist[bin] >= k) break;
    above += hist[bin];
  }
  auto cand = collect_at_least(x, bin << kShift, pool);
  select_among(cand, k, out);
  return Status::ok();
}

Status select_approx(std::span<const float> x, uint64_t k, uint64_t seed, ThreadPool* pool,
                     Candidates& out) {
  const uint64_t n = x.size();
  if (n < kMinApproxN || k == 0 || k == n) return select_exact(x, k, pool, out);
  out = Candidates{};
  uint64_t s = std::max(kMinSample, n / 100);
  SplitMix64 rng(seed ^ (n * 0xd1b54a32d192ed03ull) ^ 0x746f706b5f617070ull);
  // Runs of kSampleRun consecutive elements at random starts: a fraction of the
  // cache misses of single positions, at little cost in independence.
  s = (s + kSampleRun - 1) / kSampleRun * kSampleRun;
  std::vector<uint32_t> sample(s);
  for (uint64_t r = 0; r < s; r += kSampleRun) {
    uint64_t start = sample_below(rng, n - kSampleRun + 1);
    for (uint64_t j = 0; j < kSampleRun; ++j) sample[r + j] = mag_key(x[start + j]);
  }
  // Aim above k by two standard deviations of the estimate (a sample rank r has a
  // relative error about 1/sqrt(r)), at least 3%, so that usually >= k are found.
  double r0 = static_cast<double>(k) * static_cast<double>(s) / static_cast<double>(n);
  double target =
      static_cast<double>(k) * (1.0 + std::max(0.03, 2.0 / std::sqrt(std::max(r0, 1.0))));
  auto rank =
      static_cast<uint64_t>(std::ceil(target * static_cast<double>(s) / static_cast<double>(n)));
  rank = std::max<uint64_t>(rank, 1);
  const uint64_t lo = k - approx_slack(k);
  for (int attempt = 0; attempt < kApproxTries && rank <= s; ++attempt, rank *= 2) {
    auto nth = sample.begin() + static_cast<std::ptrdiff_t>(rank - 1);
    std::nth_element(sample.begin(), nth, sample.end(), std::greater<>());
    uint32_t threshold = *nth;
    // Every non-finite key is >= any finite threshold, so the candidates hold them
    // all; a non-finite threshold means the sample itself saw one.
    if (threshold >= kNonFiniteKey) return non_finite_error(x);
    auto cand = collect_at_least(x, threshold, pool);
    for (uint32_t b : cand.bits)
      if ((b & 0x7fffffffu) >= kNonFiniteKey) return non_finite_error(x);
    if (cand.index.size() >= k) {
      select_among(cand, k, out);
      return Status::ok();
    }
    if (cand.index.size() >= lo) {
      out = std::move(cand);
      return Status::ok();
    }
  }
  return select_exact(x, k, pool, out);
}

class TopkCodec final : public Codec {
 public:
  TopkCodec(double ratio, bool approximate, ValueType values)
      : ratio_(ratio), approximate_(approximate), values_(values) {}

  proto::CodecId id() const override { return proto::CodecId::kTopk; }
  std::string spec() const override {
    return fmt::format("topk:{}{}{}", ratio_, approximate_ ? ":approx" : "",
                       values_ == ValueType::kF16 ? ":fp16" : "");
  }
  bool biased() const override { return true; }
  bool keeps_largest() const override { return true; }
  uint64_t max_encoded_bytes(uint64_t n) const override {
    return sparse_max_encoded_size(n, sparse_count(ratio_, n), values_);
  }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    std::vector<uint64_t> index;
    std::vector<float> vals;
    GOSSIP_RETURN_IF_ERROR(select_topk(x, sparse_count(ratio_, x.size()), approximate_, ctx.seed,
                                       ctx.pool, index, vals));
    return encode_sparse(x.size(), index, vals, values_, out);
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    // An approximate sender may keep fewer than k (never more); an exact one k.
    uint64_t k = sparse_count(ratio_, y.size());
    auto h = parse_sparse_header(in, y.size(), "topk");
    if (!h) return h.status();
    uint64_t lo = approximate_ ? k - approx_slack(k) : k;
    if (h->k < lo || h->k > k)
      return Status::protocol(
          fmt::format("topk: payload carries {} entries, {} expects {}", h->k, spec(),
                      lo == k ? fmt::format("{}", k) : fmt::format("{} to {}", lo, k)));
    return decode_sparse_into(in, values_, "topk", ctx.pool, y);
  }

 private:
  double ratio_;
  bool approximate_;
  ValueType values_;
};

}  // namespace

Status select_topk(std::span<const float> x, uint64_t k, bool approximate, uint64_t seed,
                   ThreadPool* pool, std::vector<uint64_t>& indices, std::vector<float>& values) {
  Candidates kept;
  GOSSIP_RETURN_IF_ERROR(approximate ? select_approx(x, k, seed, pool, kept)
                                     : select_exact(x, k, pool, kept));
  indices = std::move(kept.index);
  values.resize(kept.bits.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = bits_float(kept.bits[i]);
  return Status::ok();
}

std::unique_ptr<Codec> make_topk(double ratio, bool approximate, ValueType values) {
  return std::make_unique<TopkCodec>(ratio, approximate, values);
}

}  // namespace gossip::compression

// Every codec's decoder (compression/codec.h) on hostile payloads. The input's prefix
// picks the codec, the element count and the seed (codec_case.h).
//
// Checked beyond "no crash, no sanitizer report":
//  - a decode that fails leaves the output untouched ("never a partial write");
//  - a decode that succeeds writes every element (two decodes into buffers filled with
//    different patterns agree bit for bit), and writes the same bits on every
//    instruction set the machine has (isa.h: "every version writes the same bytes");
//  - what it writes fits the codec: finite for int8, qsgd, sign and chains, at most k
//    non-zero entries for topk and randk, chains too (randk's only where
//    randk_indices puts them);
//  - the decoded values encode again (where the codec takes them: qsgd refuses a bucket
//    norm beyond fp32, topk refuses inf and NaN), to the same bytes on every
//    instruction set, and that payload decodes; none, fp16, bf16, sign and exact topk
//    give back the same values (their decoded outputs are fixed points), approximate
//    topk the largest of them (it may keep fewer than k); so do top-k chains of fp32
//    values (quantized ones are no fixed point).

#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/isa.h"
#include "compression/codec_spec.h"
#include "compression/randk_indices.h"
#include "fuzz/codec_case.h"
#include "fuzz/invariant.h"

namespace gossip::fuzz {
namespace {

using compression::Codec;
using compression::CodecContext;

// Fill patterns: NaNs no encoder writes, different in every bit that matters.
constexpr uint32_t kFills[2] = {0x7fa5a5a5u, 0xffd25a5au};

// The instruction sets to compare: every one the machine has for the codecs with
// kernels per instruction set (isa.h), only the portable loops for the others (their
// loops do not look, and running them again would only slow the fuzzer down).
std::vector<Isa> isa_levels(CodecFamily family) {
  std::vector<Isa> levels{Isa::kPortable};
  switch (family) {
    case CodecFamily::kFp16:
    case CodecFamily::kBf16:
    case CodecFamily::kInt8:
    case CodecFamily::kSign:
      break;
    default:
      return levels;
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (static_cast<uint8_t>(isa) <= static_cast<uint8_t>(detected_isa())) levels.push_back(isa);
  return levels;
}

// Puts back the instruction set the process had, however the target returns.
class IsaRestore {
 public:
  IsaRestore() : saved_(active_isa()) {}
  ~IsaRestore() { set_active_isa(saved_); }
  IsaRestore(const IsaRestore&) = delete;
  IsaRestore& operator=(const IsaRestore&) = delete;

 private:
  Isa saved_;
};

// Output buffers kept across inputs: under AddressSanitizer a fresh vector of 65536+
// floats per decode is an mmap, page faults and an munmap, which took a third of the
// run time. An output sits at the end of its buffer, so that a write past it runs off
// the allocation into ASan's redzone; the part before it is poisoned.
class OutputBuffers {
 public:
  static constexpr size_t kSlots = 4;  // two decodes compared, twice (decoded, re-decoded)

  OutputBuffers() = default;
  OutputBuffers(const OutputBuffers&) = delete;
  OutputBuffers& operator=(const OutputBuffers&) = delete;
  ~OutputBuffers() {
    for (auto& b : buffers_) ASAN_UNPOISON_MEMORY_REGION(b.data(), b.size() * sizeof(float));
  }

  // `n` elements set to `fill`, in buffer `slot`, valid until the slot is taken again.
  std::span<float> take(size_t slot, size_t n, uint32_t fill) {
    std::vector<float>& b = buffers_[slot];
    ASAN_UNPOISON_MEMORY_REGION(b.data(), b.size() * sizeof(float));
    if (b.size() < n)
      b.assign(std::max<size_t>(n, kCodecCaseLargeBase + kCodecCaseSmallNumel), 0.0f);
    ASAN_POISON_MEMORY_REGION(b.data(), (b.size() - n) * sizeof(float));
    std::span<float> y(b.data() + (b.size() - n), n);
    std::fill(y.begin(), y.end(), std::bit_cast<float>(fill));
    return y;
  }

 private:
  std::array<std::vector<float>, kSlots> buffers_;
};

OutputBuffers& outputs() {
  static OutputBuffers buffers;
  return buffers;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

bool all_finite(std::span<const float> y) {
  return std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); });
}

// Equal as numbers (so +0 == -0), NaN where the other has NaN.
bool same_values(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

// Approximate top-k may keep fewer than k (topk_codec.cc: at least k - k/10), but
// always the largest: `kept` holds some of x's entries, unchanged, and none it
// dropped is larger in magnitude than one it kept.
bool keeps_largest(std::span<const float> x, std::span<const float> kept) {
  if (x.size() != kept.size()) return false;
  float min_kept = std::numeric_limits<float>::infinity(), max_dropped = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    if (kept[i] != 0.0f) {
      if (kept[i] != x[i]) return false;
      min_kept = std::min(min_kept, std::fabs(kept[i]));
    } else {
      max_dropped = std::max(max_dropped, std::fabs(x[i]));
    }
  }
  return max_dropped <= min_kept;
}

// Decodes on every instruction set, checking that they agree, that a failure writes
// nothing and that a success writes every element. Returns the decoded values (in
// buffer `slot`), or nullopt when the payload was refused. Uses slots `slot` and
// `slot + 1`.
std::optional<std::span<const float>> decode_everywhere(CodecFamily family, const Codec& codec,
                                                        std::span<const std::byte> payload,
                                                        const CodecContext& ctx, size_t numel,
                                                        size_t slot) {
  const std::vector<Isa> levels = isa_levels(family);
  // At least two decodes, so that the two fill patterns reveal an unwritten element.
  const size_t runs = std::max<size_t>(levels.size(), 2);
  std::optional<bool> accepted;
  std::span<const float> first;
  for (size_t r = 0; r < runs; ++r) {
    set_active_isa(levels[r % levels.size()]);
    const uint32_t fill = kFills[r % 2];
    const std::span<float> y = outputs().take(r == 0 ? slot : slot + 1, numel, fill);
    const Status st = codec.decode(payload, ctx, y);
    if (!st) {
      expect(!st.message().empty(), "a refused payload comes with a message");
      expect(std::all_of(y.begin(), y.end(),
                         [fill](float v) { return std::bit_cast<uint32_t>(v) == fill; }),
             "a refused payload leaves the output untouched");
    }
    if (!accepted) {
      accepted = st.is_ok();
      first = y;
      continue;
    }
    expect(*accepted == st.is_ok(), "every instruction set accepts the same payloads");
    if (st)
      expect(same_bits(first, y),
             "decodes write every element, the same bits on every instruction set");
  }
  if (!*accepted) return std::nullopt;
  return first;
}

// What a successful decode may hold, by codec.
void check_decoded(const CodecChoice& choice, std::span<const float> y) {
  const uint64_t n = y.size();
  switch (choice.family) {
    case CodecFamily::kInt8:
    case CodecFamily::kQsgd:
    case CodecFamily::kSign:
      expect(all_finite(y), "int8, qsgd and sign decode to finite values");
      break;
    case CodecFamily::kTopk:
    case CodecFamily::kRandk: {
      if (choice.chain) expect(all_finite(y), "a chain decodes to finite values");
      const double ratio = static_cast<double>(1 + choice.param % 1024) / 1024.0;
      const uint64_t k = compression::sparse_count(ratio, n);
      std::vector<uint64_t> kept;
      for (uint64_t i = 0; i < n; ++i)
        if (std::bit_cast<uint32_t>(y[i]) != 0) kept.push_back(i);
      expect(kept.size() <= k, "a sparse payload decodes to at most k non-zero entries");
      if (choice.family == CodecFamily::kRandk) {
        const auto positions = compression::randk_indices(choice.seed, n, k);
        expect(std::includes(positions.begin(), positions.end(), kept.begin(), kept.end()),
               "rand-k writes only where randk_indices(seed, n, k) says");
      }
      break;
    }
    case CodecFamily::kNone:
    case CodecFamily::kFp16:
    case CodecFamily::kBf16:
      break;
  }
}

// Encodes the decoded values again on every instruction set and decodes the result.
void check_reencode(const CodecChoice& choice, const Codec& codec,
                    std::span<const std::byte> payload, const CodecContext& ctx,
                    std::span<const float> y) {
  const bool finite = all_finite(y);
  std::vector<std::byte> first;
  std::optional<bool> accepted;
  for (Isa isa : isa_levels(choice.family)) {
    set_active_isa(isa);
    std::vector<std::byte> out;
    const Status st = codec.encode(y, ctx, out);
    if (!accepted) {
      accepted = st.is_ok();
      first = std::move(out);
      continue;
    }
    expect(*accepted == st.is_ok(), "every instruction set encodes the same inputs");
    if (st) expect(out == first, "every instruction set encodes to the same bytes");
  }
  switch (choice.family) {
    case CodecFamily::kQsgd:  // may refuse a bucket whose norm overflows fp32
      if (!*accepted) return;
      break;
    case CodecFamily::kTopk:  // refuses inf and NaN
      if (!finite) {
        expect(!*accepted, "topk refuses non-finite input");
        return;
      }
      break;
    case CodecFamily::kInt8:
    case CodecFamily::kSign:
      expect(finite, "checked by check_decoded");
      break;
    default:
      break;
  }
  expect(*accepted, "what a codec decodes, it encodes again");
  expect(first.size() <= codec.max_encoded_bytes(y.size()),
         "an encoded payload is within max_encoded_bytes");
  if (choice.family == CodecFamily::kNone)
    expect(first.size() == payload.size() &&
               (first.empty() || std::memcmp(first.data(), payload.data(), first.size()) == 0),
           "none encodes its decoded values to the bytes it decoded");

  auto again = decode_everywhere(choice.family, codec, first, ctx, y.size(), 2);
  expect(again.has_value(), "the decoder accepts what the encoder wrote");
  // Quantized values are no fixed point: a block's scale is its largest |value|,
  // which a hostile payload's codes need not reach.
  if (choice.chain && choice.chain_bits != 0) return;
  switch (choice.family) {
    case CodecFamily::kTopk:
      if (choice.approx) {
        expect(keeps_largest(y, *again), "approximate top-k keeps only the largest entries");
        break;
      }
      [[fallthrough]];
    case CodecFamily::kNone:
    case CodecFamily::kFp16:
    case CodecFamily::kBf16:
    case CodecFamily::kSign:
      expect(same_values(*again, y), "a decoded payload encodes and decodes to the same values");
      break;
    default:
      break;
  }
}

}  // namespace
}  // namespace gossip::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip;
  using namespace gossip::fuzz;
  const auto c = parse_codec_case(data, size);
  if (!c) return 0;
  const std::string spec = c->choice.spec();
  auto made = compression::make_codec(spec);
  expect(made.is_ok(), "the spec grammar accepts every spec codec_case.cc builds");
  const Codec& codec = *made->codec;
  // "The canonical spec string that make_codec() parses back to an equal codec."
  auto again = compression::make_codec(codec.spec());
  expect(again.is_ok() && again->codec->spec() == codec.spec() && again->codec->id() == codec.id(),
         "a codec's spec() parses back to the same codec");

  IsaRestore restore;
  const CodecContext ctx{c->choice.seed, nullptr};
  auto y = decode_everywhere(c->choice.family, codec, c->payload, ctx, c->choice.numel, 0);
  if (!y) return 0;
  check_decoded(c->choice, *y);
  check_reencode(c->choice, codec, c->payload, ctx, *y);
  return 0;
}

// Composed sparse codecs, as SparseLoCo and DeMo send a sync: a selection, then the
// kept values quantized to a few bits with a scale per block, then the indices in
// the smallest of several encodings. One codec, so one error-feedback memory holds
// what the whole chain dropped (error_feedback.h).
//
//   topk:RATIO[:approx][+quant:BITS][+idx:MODE]      randk:RATIO[+quant:BITS]
//
// Payload (little-endian; varint = unsigned LEB128, canonical, payload_reader.h):
//   u8      format version       kChainFormatVersion (1)
//   u8      selector             0 top-k, 1 rand-k
//   u8      value bits           32 (fp32), 8, 4 or 2
//   u8      index encoding       0 delta varints, 1 chunk12, 2 implicit (rand-k),
//                                3 Elias-Fano
//   varint  n, varint k          k <= n
//   indices:
//     delta:       k varints: the first index, then the gaps (each >= 1)
//     chunk12:     a varint count per chunk of 4096 positions (ceil(n / 4096) of
//                  them, summing to k), then each index's offset within its chunk,
//                  12 bits, ascending within a chunk, packed LSB first
//     implicit:    nothing: randk_indices(seed, n, k), as rand-k derives them
//     Elias-Fano:  with l = floor(log2(n / k)) (0 when k >= n / 2), the k low parts
//                  (index mod 2^l, l bits each, LSB first), then a bitmap of
//                  k + ((n - 1) >> l) + 1 bits (zero-padded to a byte) in which the
//                  i-th set bit is at position (index_i >> l) + i
//   values:
//     32:          k fp32
//     B < 32:      ceil(k / 128) fp32 scales s >= 0, one per block of 128 values (the
//                  block's largest |value|), then k codes of B bits packed LSB first;
//                  code q stands for s * (2q - L + 1) / (L - 1), L = 2^B
// Packed sections are ceil(bits / 8) bytes. A decoder checks every field against
// what its own spec expects (a sender of another spec is named), the indices
// (strictly increasing, below n), the scales (finite, >= 0) and the exact length,
// before it writes anything.

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "compression/codec.h"
#include "compression/payload_reader.h"
#include "compression/randk_indices.h"
#include "compression/sparse_encoding.h"
#include "compression/thread_pool.h"
#include "compression/topk_select.h"

namespace gossip::compression {

namespace {

constexpr uint8_t kChainFormatVersion = 1;
constexpr uint64_t kChunk = 4096;      // chunk12: positions per chunk
constexpr uint64_t kScaleBlock = 128;  // quantized values per scale

enum class Wire : uint8_t { kDelta = 0, kChunk12 = 1, kImplicit = 2, kEliasFano = 3 };

const char* wire_name(Wire w) {
  switch (w) {
    case Wire::kDelta:
      return "delta";
    case Wire::kChunk12:
      return "chunk12";
    case Wire::kImplicit:
      return "implicit";
    case Wire::kEliasFano:
      return "eliasfano";
  }
  return "?";
}

// Bits packed LSB first, `width` bits a field.
class BitWriter {
 public:
  explicit BitWriter(std::vector<std::byte>& out) : out_(out) {}
  void put(uint64_t v, unsigned width) {
    for (unsigned done = 0; done < width;) {
      if (fill_ == 0) out_.push_back(std::byte{0});
      const unsigned take = std::min(8 - fill_, width - done);
      const auto bits = static_cast<uint8_t>(((v >> done) & ((1u << take) - 1)) << fill_);
      out_.back() |= std::byte{bits};
      fill_ = (fill_ + take) % 8;
      done += take;
    }
  }
  void end() { fill_ = 0; }  // the next field starts on a byte

 private:
  std::vector<std::byte>& out_;
  unsigned fill_ = 0;
};

class BitReader {
 public:
  BitReader(const std::byte* p, uint64_t bits) : p_(p), bits_(bits) {}
  uint64_t get(unsigned width) {
    uint64_t v = 0;
    for (unsigned done = 0; done < width;) {
      const unsigned in_byte = at_ % 8;
      const unsigned take = std::min(8 - in_byte, width - done);
      const auto b = static_cast<uint64_t>(std::to_integer<uint8_t>(p_[at_ / 8]));
      v |= ((b >> in_byte) & ((1u << take) - 1)) << done;
      at_ += take;
      done += take;
    }
    return v;
  }
  bool bit(uint64_t i) const { return (std::to_integer<uint8_t>(p_[i / 8]) >> (i % 8)) & 1; }
  uint64_t size() const { return bits_; }

 private:
  const std::byte* p_;
  uint64_t bits_;
  uint64_t at_ = 0;
};

uint64_t packed_bytes(uint64_t count, unsigned width) { return (count * width + 7) / 8; }

unsigned elias_fano_low_bits(uint64_t n, uint64_t k) {
  return k == 0 || n / k < 2 ? 0 : static_cast<unsigned>(std::bit_width(n / k) - 1);
}

uint64_t elias_fano_high_bits(uint64_t n, uint64_t k, unsigned low) {
  return n == 0 ? k : k + ((n - 1) >> low) + 1;
}

// Index section sizes, in bytes.
uint64_t delta_bytes(std::span<const uint64_t> idx) {
  uint64_t bytes = 0, prev = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    bytes += varint_bytes(i == 0 ? idx[i] : idx[i] - prev);
    prev = idx[i];
  }
  return bytes;
}

uint64_t chunk12_bytes(uint64_t n, std::span<const uint64_t> idx) {
  std::vector<uint64_t> counts((n + kChunk - 1) / kChunk, 0);
  for (uint64_t i : idx) ++counts[i / kChunk];
  uint64_t bytes = 0;
  for (uint64_t c : counts) bytes += varint_bytes(c);
  return bytes + packed_bytes(idx.size(), 12);
}

uint64_t elias_fano_bytes(uint64_t n, uint64_t k) {
  const unsigned low = elias_fano_low_bits(n, k);
  return packed_bytes(k, low) + (elias_fano_high_bits(n, k, low) + 7) / 8;
}

void encode_indices(uint64_t n, std::span<const uint64_t> idx, Wire w,
                    std::vector<std::byte>& out) {
  switch (w) {
    case Wire::kDelta: {
      uint64_t prev = 0;
      for (size_t i = 0; i < idx.size(); ++i) {
        put_varint(out, i == 0 ? idx[i] : idx[i] - prev);
        prev = idx[i];
      }
      return;
    }
    case Wire::kChunk12: {
      std::vector<uint64_t> counts((n + kChunk - 1) / kChunk, 0);
      for (uint64_t i : idx) ++counts[i / kChunk];
      for (uint64_t c : counts) put_varint(out, c);
      BitWriter bits(out);
      for (uint64_t i : idx) bits.put(i % kChunk, 12);
      return;
    }
    case Wire::kEliasFano: {
      const uint64_t k = idx.size();
      const unsigned low = elias_fano_low_bits(n, k);
      BitWriter lows(out);
      for (uint64_t i : idx) lows.put(i, low);
      const size_t start = out.size();
      out.resize(start + (elias_fano_high_bits(n, k, low) + 7) / 8, std::byte{0});
      for (uint64_t j = 0; j < k; ++j) {
        const uint64_t pos = (idx[j] >> low) + j;
        out[start + pos / 8] |= std::byte{static_cast<uint8_t>(1u << (pos % 8))};
      }
      return;
    }
    case Wire::kImplicit:
      return;
  }
}

Status decode_indices(PayloadReader& r, uint64_t n, uint64_t k, Wire w, std::string_view who,
                      std::vector<uint64_t>& idx) {
  idx.resize(k);
  const auto order = [&](uint64_t j) -> Status {
    if (idx[j] >= n)
      return Status::protocol(fmt::format("{}: index {} is {}, past n = {}", who, j, idx[j], n));
    if (j > 0 && idx[j] <= idx[j - 1])
      return Status::protocol(fmt::format("{}: indices not strictly increasing at {} ({} after {})",
                                          who, j, idx[j], idx[j - 1]));
    return Status::ok();
  };
  switch (w) {
    case Wire::kDelta:
      for (uint64_t j = 0; j < k; ++j) {
        uint64_t v = 0;
        GOSSIP_RETURN_IF_ERROR(r.varint(v, "indices"));
        if (j > 0 && v == 0) return Status::protocol(fmt::format("{}: a gap of 0 at {}", who, j));
        if (j > 0 && v > n) return Status::protocol(fmt::format("{}: gap {} past n", who, v));
        idx[j] = j == 0 ? v : idx[j - 1] + v;
        GOSSIP_RETURN_IF_ERROR(order(j));
      }
      return Status::ok();
    case Wire::kChunk12: {
      std::vector<uint64_t> counts((n + kChunk - 1) / kChunk);
      uint64_t total = 0;
      for (uint64_t c = 0; c < counts.size(); ++c) {
        uint64_t v = 0;
        GOSSIP_RETURN_IF_ERROR(r.varint(v, "chunk counts"));
        const uint64_t len = std::min(kChunk, n - c * kChunk);
        if (v > len)
          return Status::protocol(
              fmt::format("{}: chunk {} claims {} of its {} positions", who, c, v, len));
        counts[c] = v;
        total += v;
      }
      if (total != k)
        return Status::protocol(fmt::format("{}: chunk counts sum to {}, k is {}", who, total, k));
      const std::byte* p = nullptr;
      GOSSIP_RETURN_IF_ERROR(r.bytes(p, packed_bytes(k, 12), "chunk offsets"));
      BitReader bits(p, k * 12);
      uint64_t j = 0;
      for (uint64_t c = 0; c < counts.size(); ++c)
        for (uint64_t m = 0; m < counts[c]; ++m, ++j) {
          idx[j] = c * kChunk + bits.get(12);
          GOSSIP_RETURN_IF_ERROR(order(j));
        }
      return Status::ok();
    }
    case Wire::kEliasFano: {
      const unsigned low = elias_fano_low_bits(n, k);
      const std::byte *lows = nullptr, *highs = nullptr;
      GOSSIP_RETURN_IF_ERROR(r.bytes(lows, packed_bytes(k, low), "Elias-Fano low parts"));
      const uint64_t high_bits = elias_fano_high_bits(n, k, low);
      GOSSIP_RETURN_IF_ERROR(r.bytes(highs, (high_bits + 7) / 8, "Elias-Fano high parts"));
      BitReader lo(lows, k * low), hi(highs, (high_bits + 7) / 8 * 8);
      uint64_t j = 0;
      for (uint64_t pos = 0; pos < hi.size(); ++pos) {
        if (!hi.bit(pos)) continue;
        if (pos >= high_bits || j == k)
          return Status::protocol(
              fmt::format("{}: Elias-Fano high parts set bit {} past its {} entries", who, pos, k));
        idx[j] = ((pos - j) << low) | lo.get(low);
        GOSSIP_RETURN_IF_ERROR(order(j));
        ++j;
      }
      if (j != k)
        return Status::protocol(
            fmt::format("{}: Elias-Fano carries {} indices, k is {}", who, j, k));
      return Status::ok();
    }
    case Wire::kImplicit:
      return Status::ok();
  }
  return Status::protocol(fmt::format("{}: unknown index encoding", who));
}

// L = 2^bits levels, symmetric around 0, spanning [-s, s].
inline uint32_t quantize(float v, float s, uint32_t levels) {
  if (s <= 0) return 0;
  const float q = std::nearbyint((v / s + 1.0f) * 0.5f * static_cast<float>(levels - 1));
  return static_cast<uint32_t>(std::clamp(q, 0.0f, static_cast<float>(levels - 1)));
}

inline float dequantize(uint32_t q, float s, uint32_t levels) {
  const float l = static_cast<float>(levels - 1);
  return s * (2.0f * static_cast<float>(q) - l) / l;
}

class ComposedCodec final : public Codec {
 public:
  explicit ComposedCodec(const ChainOptions& o) : o_(o) {}

  proto::CodecId id() const override { return proto::CodecId::kChain; }
  std::string spec() const override {
    std::string s = fmt::format("{}:{}{}", o_.randk ? "randk" : "topk", o_.ratio,
                                o_.approximate ? ":approx" : "");
    if (o_.value_bits < 32) s += fmt::format("+quant:{}", o_.value_bits);
    if (!o_.randk) s += fmt::format("+idx:{}", index_mode_name(o_.indices));
    return s;
  }
  bool biased() const override { return true; }
  bool keeps_largest() const override { return !o_.randk; }
  uint64_t max_encoded_bytes(uint64_t n) const override {
    const uint64_t k = sparse_count(o_.ratio, n);
    // The largest of the encodings pick_wire may choose: a delta is at most 10
    // bytes, a chunk's count at most 2 (it is at most 4096).
    const uint64_t index =
        o_.randk ? 0
                 : std::max({10 * k, 2 * ((n + kChunk - 1) / kChunk) + packed_bytes(k, 12),
                             elias_fano_bytes(n, k)});
    return 4 + 20 + index + value_section_bytes(k);
  }

  Status encode(std::span<const float> x, const CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    const uint64_t n = x.size();
    const uint64_t k = sparse_count(o_.ratio, n);
    std::vector<uint64_t> idx;
    std::vector<float> vals;
    if (o_.randk) {
      idx = randk_indices(ctx.seed, n, k);
      vals.resize(idx.size());
      for (size_t j = 0; j < idx.size(); ++j) vals[j] = x[idx[j]];
      for (size_t j = 0; j < vals.size(); ++j)
        if (!std::isfinite(vals[j]))
          return Status::invalid(fmt::format("{}: element {} is not finite", spec(), idx[j]));
    } else {
      GOSSIP_RETURN_IF_ERROR(select_topk(x, k, o_.approximate, ctx.seed, ctx.pool, idx, vals));
    }
    const Wire wire = pick_wire(n, idx);
    out.clear();
    out.reserve(24 + (wire == Wire::kImplicit ? 0 : 10 * idx.size()) +
                value_section_bytes(idx.size()));
    out.push_back(std::byte{kChainFormatVersion});
    out.push_back(std::byte{static_cast<uint8_t>(o_.randk ? 1 : 0)});
    out.push_back(std::byte{static_cast<uint8_t>(o_.value_bits)});
    out.push_back(std::byte{static_cast<uint8_t>(wire)});
    put_varint(out, n);
    put_varint(out, idx.size());
    encode_indices(n, idx, wire, out);
    encode_values(vals, out);
    return Status::ok();
  }

  Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                std::span<float> y) const override {
    const std::string who = spec();
    PayloadReader r(in, who, "composed payload");
    uint8_t version = 0, selector = 0, bits = 0, wire = 0;
    GOSSIP_RETURN_IF_ERROR(r.u8(version, "the format version"));
    if (version != kChainFormatVersion)
      return Status::protocol(fmt::format("{}: payload format version {}, this daemon reads {}",
                                          who, version, kChainFormatVersion));
    GOSSIP_RETURN_IF_ERROR(r.u8(selector, "the selector"));
    GOSSIP_RETURN_IF_ERROR(r.u8(bits, "the value bits"));
    GOSSIP_RETURN_IF_ERROR(r.u8(wire, "the index encoding"));
    if (selector != (o_.randk ? 1 : 0) || bits != o_.value_bits)
      return Status::protocol(fmt::format(
          "{}: the sender selects by {} with {}-bit values; run one --codec on every node", who,
          selector == 0   ? "top-k"
          : selector == 1 ? "rand-k"
                          : "an unknown selector",
          bits));
    const auto w = static_cast<Wire>(wire);
    const bool known = wire <= static_cast<uint8_t>(Wire::kEliasFano);
    if (!known || (w == Wire::kImplicit) != o_.randk)
      return Status::protocol(fmt::format("{}: index encoding {} ({}) is not one it reads", who,
                                          wire, known ? wire_name(w) : "unknown"));
    uint64_t n = 0, k = 0;
    GOSSIP_RETURN_IF_ERROR(r.varint(n, "n"));
    GOSSIP_RETURN_IF_ERROR(r.varint(k, "k"));
    if (n != y.size())
      return Status::protocol(
          fmt::format("{}: payload is for {} elements, {} expected", who, n, y.size()));
    const uint64_t want = sparse_count(o_.ratio, n);
    const uint64_t lo = o_.approximate ? want - topk_approx_slack(want) : want;
    if (k < lo || k > want)
      return Status::protocol(
          fmt::format("{}: payload carries {} entries, {} expected", who, k,
                      lo == want ? fmt::format("{}", want) : fmt::format("{} to {}", lo, want)));
    std::vector<uint64_t> idx;
    if (w == Wire::kImplicit)
      idx = randk_indices(ctx.seed, n, k);
    else
      GOSSIP_RETURN_IF_ERROR(decode_indices(r, n, k, w, who, idx));
    std::vector<float> vals(k);
    GOSSIP_RETURN_IF_ERROR(decode_values(r, who, vals));
    if (r.left() != 0)
      return Status::protocol(fmt::format("{}: {} bytes past the payload's end", who, r.left()));
    // Checked whole: now the output.
    parallel_for(ctx.pool, y.size(), size_t{1} << 18, [y](size_t b, size_t e) {
      std::fill(y.begin() + static_cast<ptrdiff_t>(b), y.begin() + static_cast<ptrdiff_t>(e), 0.0f);
    });
    const float unbias = o_.randk && k > 0
                             ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k))
                             : 1.0f;
    for (size_t j = 0; j < idx.size(); ++j) y[idx[j]] = vals[j] * unbias;
    return Status::ok();
  }

 private:
  uint64_t value_section_bytes(uint64_t k) const {
    if (o_.value_bits == 32) return 4 * k;
    return 4 * ((k + kScaleBlock - 1) / kScaleBlock) + packed_bytes(k, o_.value_bits);
  }

  Wire pick_wire(uint64_t n, std::span<const uint64_t> idx) const {
    if (o_.randk) return Wire::kImplicit;
    switch (o_.indices) {
      case ChainOptions::Indices::kDelta:
        return Wire::kDelta;
      case ChainOptions::Indices::kChunk12:
        return Wire::kChunk12;
      case ChainOptions::Indices::kEliasFano:
        return Wire::kEliasFano;
      case ChainOptions::Indices::kAuto:
        break;
    }
    // Exact sizes; the first of equals in this order.
    const uint64_t ef = elias_fano_bytes(n, idx.size());
    const uint64_t delta = delta_bytes(idx);
    const uint64_t chunk = chunk12_bytes(n, idx);
    if (ef <= delta && ef <= chunk) return Wire::kEliasFano;
    return delta <= chunk ? Wire::kDelta : Wire::kChunk12;
  }

  void encode_values(std::span<const float> vals, std::vector<std::byte>& out) const {
    if (vals.empty()) return;  // as decode_values: nothing, not a memcpy from null
    const size_t at = out.size();
    if (o_.value_bits == 32) {
      out.resize(at + 4 * vals.size());
      std::memcpy(out.data() + at, vals.data(), 4 * vals.size());  // little-endian hosts
      return;
    }
    const uint64_t blocks = (vals.size() + kScaleBlock - 1) / kScaleBlock;
    std::vector<float> scales(blocks, 0.0f);
    for (size_t j = 0; j < vals.size(); ++j)
      scales[j / kScaleBlock] = std::max(scales[j / kScaleBlock], std::fabs(vals[j]));
    out.resize(at + 4 * blocks);
    std::memcpy(out.data() + at, scales.data(), 4 * blocks);
    const uint32_t levels = 1u << o_.value_bits;
    BitWriter codes(out);
    for (size_t j = 0; j < vals.size(); ++j)
      codes.put(quantize(vals[j], scales[j / kScaleBlock], levels), o_.value_bits);
  }

  Status decode_values(PayloadReader& r, const std::string& who, std::vector<float>& vals) const {
    const uint64_t k = vals.size();
    if (k == 0) return Status::ok();  // no values (and memcpy of 0 bytes into null is UB)
    if (o_.value_bits == 32) {
      const std::byte* p = nullptr;
      GOSSIP_RETURN_IF_ERROR(r.bytes(p, 4 * k, "values"));
      std::memcpy(vals.data(), p, 4 * k);
      for (uint64_t j = 0; j < k; ++j)
        if (!std::isfinite(vals[j]))
          return Status::protocol(fmt::format("{}: value {} is not finite", who, j));
      return Status::ok();
    }
    const uint64_t blocks = (k + kScaleBlock - 1) / kScaleBlock;
    const std::byte* p = nullptr;
    GOSSIP_RETURN_IF_ERROR(r.bytes(p, 4 * blocks, "scales"));
    std::vector<float> scales(blocks);
    std::memcpy(scales.data(), p, 4 * blocks);
    for (uint64_t b = 0; b < blocks; ++b)
      if (!std::isfinite(scales[b]) || scales[b] < 0)
        return Status::protocol(fmt::format("{}: scale {} is {}", who, b, scales[b]));
    const std::byte* c = nullptr;
    GOSSIP_RETURN_IF_ERROR(r.bytes(c, packed_bytes(k, o_.value_bits), "codes"));
    BitReader codes(c, k * o_.value_bits);
    const uint32_t levels = 1u << o_.value_bits;
    for (uint64_t j = 0; j < k; ++j)
      vals[j] = dequantize(static_cast<uint32_t>(codes.get(o_.value_bits)), scales[j / kScaleBlock],
                           levels);
    return Status::ok();
  }

  ChainOptions o_;
};

}  // namespace

const char* index_mode_name(ChainOptions::Indices m) {
  switch (m) {
    case ChainOptions::Indices::kAuto:
      return "auto";
    case ChainOptions::Indices::kDelta:
      return "delta";
    case ChainOptions::Indices::kChunk12:
      return "chunk12";
    case ChainOptions::Indices::kEliasFano:
      return "eliasfano";
  }
  return "?";
}

std::unique_ptr<Codec> make_chain(const ChainOptions& options) {
  return std::make_unique<ComposedCodec>(options);
}

}  // namespace gossip::compression

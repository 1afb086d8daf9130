#include "compression/sparse_encoding.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "compression/bytes.h"
#include "compression/half.h"
#include "compression/payload_reader.h"
#include "compression/thread_pool.h"

namespace gossip::compression {

namespace {

constexpr size_t kHeaderFixedBytes = 3;
constexpr float kMaxFp16 = 65504.0f;

// Finite values beyond fp16's range saturate (see the header); inf and NaN keep
// their meaning.
uint16_t to_fp16_saturating(float f) {
  if (f > kMaxFp16 && f <= 3.4028235e38f) f = kMaxFp16;
  if (f < -kMaxFp16 && f >= -3.4028235e38f) f = -kMaxFp16;
  return float_to_fp16(f);
}

void write_header(std::byte*& p, IndexEncoding e, ValueType t, uint64_t n, uint64_t k) {
  *p++ = static_cast<std::byte>(kSparseFormatVersion);
  *p++ = static_cast<std::byte>(e);
  *p++ = static_cast<std::byte>(t);
  p = put_varint(p, n);
  p = put_varint(p, k);
}

void write_values(std::byte* p, std::span<const float> values, ValueType t) {
  if (t == ValueType::kF32) {
    for (float v : values) {
      store_f32(p, v);
      p += 4;
    }
  } else {
    for (float v : values) {
      store_le16(p, to_fp16_saturating(v));
      p += 2;
    }
  }
}

float read_value(const std::byte* p, ValueType t) {
  return t == ValueType::kF32 ? load_f32(p) : fp16_to_float(load_le16(p));
}

Status check_indices(uint64_t n, std::span<const uint64_t> indices, size_t values) {
  if (values != indices.size())
    return Status::invalid(
        fmt::format("sparse encoding: {} indices but {} values", indices.size(), values));
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= n)
      return Status::invalid(fmt::format(
          "sparse encoding: index {} at position {} is not below n = {}", indices[i], i, n));
    if (i > 0 && indices[i] <= indices[i - 1])
      return Status::invalid(fmt::format(
          "sparse encoding: indices not strictly increasing at position {} ({} after {})", i,
          indices[i], indices[i - 1]));
  }
  return Status::ok();
}

// Reads the index section (varint or bitmap) after the header into `indices`,
// checking every rule of the layout; leaves the reader at the values.
Status read_indices(PayloadReader& r, const SparseHeader& h, std::vector<uint64_t>& indices) {
  indices.clear();
  if (h.encoding == IndexEncoding::kVarint) {
    // Each varint is at least one byte, and the values follow: a k that cannot fit
    // is refused before anything is allocated for it.
    if (h.k > r.left() || h.k * value_bytes(h.values) > r.left() - h.k)
      return r.error(fmt::format("{} bytes cannot hold {} indices and values", r.left(), h.k));
    indices.resize(h.k);
    uint64_t prev = 0;
    for (uint64_t i = 0; i < h.k; ++i) {
      uint64_t v = 0;
      GOSSIP_RETURN_IF_ERROR(r.varint(v, "an index"));
      uint64_t idx;
      if (i == 0) {
        if (v >= h.n) return r.error(fmt::format("index {} is not below n = {}", v, h.n));
        idx = v;
      } else {
        if (v == 0)
          return r.error(fmt::format("indices not strictly increasing at position {} (gap 0)", i));
        if (v >= h.n - prev)  // prev + v >= n, without overflow
          return r.error(fmt::format("index at position {} (gap {} after {}) is not below n = {}",
                                     i, v, prev, h.n));
        idx = prev + v;
      }
      indices[i] = idx;
      prev = idx;
    }
    return Status::ok();
  }
  // Bitmap.
  uint64_t bytes = bitmap_index_bytes(h.n);
  if (bytes > r.left())
    return r.error(
        fmt::format("bitmap of {} elements needs {} bytes, {} left", h.n, bytes, r.left()));
  const std::byte* bm = r.here();
  uint64_t count = 0;
  uint64_t full = h.n / 8;
  for (uint64_t b = 0; b < bytes; ++b) count += std::popcount(static_cast<uint8_t>(bm[b]));
  if (h.n % 8 != 0) {
    auto last = static_cast<uint8_t>(bm[full]);
    if (last >> (h.n % 8)) return r.error("bitmap padding bits past n are set");
  }
  if (count != h.k)
    return r.error(fmt::format("bitmap has {} bits set, header says k = {}", count, h.k));
  indices.resize(h.k);
  size_t out = 0;
  // Eight bytes at a time where possible; set bits enumerated lowest first.
  uint64_t b = 0;
  for (; b + 8 <= bytes; b += 8) {
    uint64_t w;
    std::memcpy(&w, bm + b, 8);
    if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
    while (w) {
      indices[out++] = b * 8 + static_cast<uint64_t>(std::countr_zero(w));
      w &= w - 1;
    }
  }
  for (; b < bytes; ++b) {
    auto w = static_cast<uint8_t>(bm[b]);
    while (w) {
      indices[out++] = b * 8 + static_cast<uint64_t>(std::countr_zero(w));
      w = static_cast<uint8_t>(w & (w - 1));
    }
  }
  r.skip(bytes);
  return Status::ok();
}

// Checks that exactly k values remain.
Status check_values_left(const PayloadReader& r, const SparseHeader& h) {
  uint64_t need = h.k * value_bytes(h.values);
  if (r.left() < need)
    return r.error(
        fmt::format("truncated values: {} values need {} bytes, {} left", h.k, need, r.left()));
  if (r.left() > need)
    return r.error(fmt::format("{} trailing bytes after {} values", r.left() - need, h.k));
  return Status::ok();
}

}  // namespace

uint64_t varint_index_bytes(std::span<const uint64_t> indices) {
  uint64_t total = 0, prev = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    total += varint_bytes(i == 0 ? indices[0] : indices[i] - prev);
    prev = indices[i];
  }
  return total;
}

uint64_t sparse_header_bytes(uint64_t n, uint64_t k) {
  return kHeaderFixedBytes + varint_bytes(n) + varint_bytes(k);
}

IndexEncoding choose_index_encoding(uint64_t n, std::span<const uint64_t> indices) {
  // The bitmap is a fixed n/8 bytes; stop counting varint bytes once past it.
  uint64_t bitmap = bitmap_index_bytes(n);
  if (indices.size() > bitmap) return IndexEncoding::kBitmap;  // varints take >= 1 byte each
  return bitmap < varint_index_bytes(indices) ? IndexEncoding::kBitmap : IndexEncoding::kVarint;
}

uint64_t sparse_encoded_size(uint64_t n, std::span<const uint64_t> indices, ValueType t,
                             std::optional<IndexEncoding> force) {
  IndexEncoding e = force.value_or(choose_index_encoding(n, indices));
  uint64_t idx = e == IndexEncoding::kBitmap ? bitmap_index_bytes(n) : varint_index_bytes(indices);
  return sparse_header_bytes(n, indices.size()) + idx + indices.size() * value_bytes(t);
}

uint64_t sparse_max_encoded_size(uint64_t n, uint64_t k, ValueType t) {
  uint64_t varints = k * varint_bytes(n > 0 ? n - 1 : 0);
  return sparse_header_bytes(n, k) + std::min(varints, bitmap_index_bytes(n)) + k * value_bytes(t);
}

Status encode_sparse(uint64_t n, std::span<const uint64_t> indices, std::span<const float> values,
                     ValueType t, std::vector<std::byte>& out, std::optional<IndexEncoding> force) {
  GOSSIP_RETURN_IF_ERROR(check_indices(n, indices, values.size()));
  if (force && *force == IndexEncoding::kImplicit)
    return Status::invalid("sparse encoding: the implicit encoding carries no indices");
  IndexEncoding e = force.value_or(choose_index_encoding(n, indices));
  uint64_t k = indices.size();
  out.resize(sparse_encoded_size(n, indices, t, e));
  std::byte* p = out.data();
  write_header(p, e, t, n, k);
  if (e == IndexEncoding::kVarint) {
    uint64_t prev = 0;
    for (size_t i = 0; i < k; ++i) {
      p = put_varint(p, i == 0 ? indices[0] : indices[i] - prev);
      prev = indices[i];
    }
  } else {
    uint64_t bytes = bitmap_index_bytes(n);
    std::memset(p, 0, bytes);
    for (uint64_t i : indices) p[i / 8] |= static_cast<std::byte>(1u << (i % 8));
    p += bytes;
  }
  write_values(p, values, t);
  return Status::ok();
}

Result<SparseHeader> parse_sparse_header(std::span<const std::byte> in, uint64_t expected_n,
                                         std::string_view who) {
  PayloadReader r(in, who, "sparse payload");
  SparseHeader h;
  uint8_t version = 0, enc = 0, vt = 0;
  GOSSIP_RETURN_IF_ERROR(r.u8(version, "the format version"));
  if (version != kSparseFormatVersion)
    return r.error(
        fmt::format("unknown format version {} (expected {})", version, kSparseFormatVersion));
  GOSSIP_RETURN_IF_ERROR(r.u8(enc, "the index encoding"));
  if (enc > static_cast<uint8_t>(IndexEncoding::kImplicit))
    return r.error(fmt::format("unknown index encoding {}", enc));
  GOSSIP_RETURN_IF_ERROR(r.u8(vt, "the value type"));
  if (vt > static_cast<uint8_t>(ValueType::kF16))
    return r.error(fmt::format("unknown value type {}", vt));
  h.encoding = static_cast<IndexEncoding>(enc);
  h.values = static_cast<ValueType>(vt);
  GOSSIP_RETURN_IF_ERROR(r.varint(h.n, "n"));
  if (h.n != expected_n)
    return r.error(fmt::format("payload is for {} elements, {} expected", h.n, expected_n));
  GOSSIP_RETURN_IF_ERROR(r.varint(h.k, "k"));
  if (h.k > h.n) return r.error(fmt::format("k = {} exceeds n = {}", h.k, h.n));
  h.bytes = r.pos();
  return h;
}

Result<SparseVector> decode_sparse(std::span<const std::byte> in, uint64_t expected_n,
                                   std::string_view who) {
  auto h = parse_sparse_header(in, expected_n, who);
  if (!h) return h.status();
  PayloadReader r(in, who, "sparse payload");
  r.skip(h->bytes);
  if (h->encoding == IndexEncoding::kImplicit)
    return r.error("payload carries no indices (a rand-k payload?)");
  SparseVector v;
  v.encoding = h->encoding;
  v.value_type = h->values;
  v.n = h->n;
  GOSSIP_RETURN_IF_ERROR(read_indices(r, *h, v.indices));
  GOSSIP_RETURN_IF_ERROR(check_values_left(r, *h));
  v.values.resize(h->k);
  const std::byte* p = r.here();
  size_t w = value_bytes(h->values);
  for (uint64_t i = 0; i < h->k; ++i) v.values[i] = read_value(p + i * w, h->values);
  return v;
}

Status decode_sparse_into(std::span<const std::byte> in, ValueType expected_values,
                          std::string_view who, ThreadPool* pool, std::span<float> y) {
  auto h = parse_sparse_header(in, y.size(), who);
  if (!h) return h.status();
  PayloadReader r(in, who, "sparse payload");
  r.skip(h->bytes);
  if (h->encoding == IndexEncoding::kImplicit)
    return r.error("payload carries no indices (a rand-k payload?)");
  if (h->values != expected_values)
    return r.error(fmt::format("values are {}, the codec expects {}",
                               h->values == ValueType::kF16 ? "fp16" : "fp32",
                               expected_values == ValueType::kF16 ? "fp16" : "fp32"));
  std::vector<uint64_t> indices;
  GOSSIP_RETURN_IF_ERROR(read_indices(r, *h, indices));
  GOSSIP_RETURN_IF_ERROR(check_values_left(r, *h));
  // Everything checked: now y may be written.
  float* out = y.data();
  parallel_for(pool, y.size(), size_t{1} << 18,
               [out](size_t b, size_t e) { std::memset(out + b, 0, (e - b) * sizeof(float)); });
  const std::byte* p = r.here();
  if (h->values == ValueType::kF32) {
    for (uint64_t i = 0; i < h->k; ++i) out[indices[i]] = load_f32(p + 4 * i);
  } else {
    for (uint64_t i = 0; i < h->k; ++i) out[indices[i]] = fp16_to_float(load_le16(p + 2 * i));
  }
  return Status::ok();
}

uint64_t sparse_values_encoded_size(uint64_t n, uint64_t k, ValueType t) {
  return sparse_header_bytes(n, k) + k * value_bytes(t);
}

Status encode_sparse_values(uint64_t n, std::span<const float> values, ValueType t,
                            std::vector<std::byte>& out) {
  uint64_t k = values.size();
  if (k > n) return Status::invalid(fmt::format("sparse encoding: {} values for n = {}", k, n));
  out.resize(sparse_values_encoded_size(n, k, t));
  std::byte* p = out.data();
  write_header(p, IndexEncoding::kImplicit, t, n, k);
  write_values(p, values, t);
  return Status::ok();
}

Status decode_sparse_values(std::span<const std::byte> in, uint64_t expected_n, uint64_t expected_k,
                            ValueType expected_values, std::string_view who,
                            std::vector<float>& values) {
  auto h = parse_sparse_header(in, expected_n, who);
  if (!h) return h.status();
  PayloadReader r(in, who, "sparse payload");
  r.skip(h->bytes);
  if (h->encoding != IndexEncoding::kImplicit)
    return r.error("payload carries explicit indices, the codec derives them");
  if (h->k != expected_k)
    return r.error(fmt::format("payload carries {} values, {} expected", h->k, expected_k));
  if (h->values != expected_values)
    return r.error(fmt::format("values are {}, the codec expects {}",
                               h->values == ValueType::kF16 ? "fp16" : "fp32",
                               expected_values == ValueType::kF16 ? "fp16" : "fp32"));
  GOSSIP_RETURN_IF_ERROR(check_values_left(r, *h));
  values.resize(h->k);
  const std::byte* p = r.here();
  size_t w = value_bytes(h->values);
  for (uint64_t i = 0; i < h->k; ++i) values[i] = read_value(p + i * w, h->values);
  return Status::ok();
}

}  // namespace gossip::compression

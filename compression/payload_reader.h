#pragma once
// Varints and a bounds-checked cursor, shared by the payload formats that carry
// them (sparse_encoding.h, composed_codec.cc). Varint = unsigned LEB128, canonical
// (no superfluous zero continuation), below 2^64: at most 10 bytes, the 10th at most
// 0x01. Every failure is a Status::protocol naming the codec and the byte.

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::compression {

inline constexpr size_t kMaxVarintBytes = 10;

inline size_t varint_bytes(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

// Writes v at p (room for varint_bytes(v) bytes); returns the byte after it.
inline std::byte* put_varint(std::byte* p, uint64_t v) {
  for (; v >= 0x80; v >>= 7) *p++ = static_cast<std::byte>((v & 0x7f) | 0x80);
  *p++ = static_cast<std::byte>(v);
  return p;
}

inline void put_varint(std::vector<std::byte>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + varint_bytes(v));
  put_varint(out.data() + at, v);
}

class PayloadReader {
 public:
  // `who` names the codec (its spec), `format` the payload's kind ("sparse payload").
  PayloadReader(std::span<const std::byte> in, std::string_view who, std::string_view format)
      : in_(in), who_(who), format_(format) {}

  size_t pos() const { return pos_; }
  size_t left() const { return in_.size() - pos_; }
  const std::byte* here() const { return in_.data() + pos_; }
  void skip(size_t n) { pos_ += std::min(n, left()); }  // callers check n <= left() first

  Status u8(uint8_t& v, std::string_view what) {
    if (left() < 1) return error(fmt::format("truncated before {}", what));
    v = static_cast<uint8_t>(in_[pos_++]);
    return Status::ok();
  }

  Status varint(uint64_t& v, std::string_view what) {
    v = 0;
    for (size_t i = 0;; ++i) {
      if (i == kMaxVarintBytes) return error(fmt::format("varint overflow in {}", what));
      if (left() < 1) return error(fmt::format("truncated varint in {}", what));
      const auto b = static_cast<uint8_t>(in_[pos_++]);
      if (i == kMaxVarintBytes - 1 && b > 1)
        return error(fmt::format("varint overflow in {}", what));
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (!(b & 0x80)) {
        if (b == 0 && i > 0) return error(fmt::format("non-canonical varint in {}", what));
        return Status::ok();
      }
    }
  }

  // Points p at the next n bytes and moves past them. A caller that computes n from a
  // peer's count (4 * k) bounds the count first, so that n cannot wrap.
  Status bytes(const std::byte*& p, uint64_t n, std::string_view what) {
    if (n > left())
      return error(fmt::format("truncated {}: {} bytes needed, {} left", what, n, left()));
    p = here();
    pos_ += n;
    return Status::ok();
  }

  Status error(const std::string& what) const {
    return Status::protocol(
        fmt::format("{}: {}: {} (at byte {} of {})", who_, format_, what, pos_, in_.size()));
  }

 private:
  std::span<const std::byte> in_;
  std::string_view who_;
  std::string_view format_;
  size_t pos_ = 0;
};

}  // namespace gossip::compression

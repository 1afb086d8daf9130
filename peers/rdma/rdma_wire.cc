#include "peers/rdma/rdma_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace gossip::peers::rdma {
namespace {

template <class T>
std::optional<T> decode(std::span<const std::byte> data) {
  if (data.size() < sizeof(T)) return std::nullopt;
  T out;
  std::memcpy(&out, data.data(), sizeof(T));
  return out;
}

}  // namespace

std::optional<Hello> decode_hello(std::span<const std::byte> data) { return decode<Hello>(data); }
std::optional<Accept> decode_accept(std::span<const std::byte> data) {
  return decode<Accept>(data);
}

Status check_accept(const Accept& a, uint32_t max_slots, uint32_t peer) {
  if (a.magic != kAcceptMagic || a.version != kVersion)
    return Status::protocol(fmt::format(
        "ring: peer {} (right) accepted with a foreign answer (magic or version)", peer));
  if (a.slots == 0 || a.slots > max_slots || a.slot_bytes <= sizeof(FragmentHeader))
    return Status::protocol(
        fmt::format("ring: peer {} (right) offers {} slots of {} bytes (we drive 1 to {} slots of "
                    "more than {} bytes)",
                    peer, a.slots, a.slot_bytes, max_slots, sizeof(FragmentHeader)));
  return Status::ok();
}

uint64_t fragment_count(uint64_t bytes, uint32_t slot_bytes) {
  const uint64_t payload = slot_bytes - sizeof(FragmentHeader);
  return std::max<uint64_t>(1, (bytes + payload - 1) / payload);
}

Result<size_t> check_fragment(const FragmentHeader& h, size_t wire_len, uint32_t slot_bytes,
                              const Assembly& a, uint32_t peer) {
  const auto bad = [&](const std::string& why) {
    return Status::protocol(fmt::format("ring: peer {} (left) {}", peer, why));
  };
  if (wire_len < sizeof(FragmentHeader) || h.magic != kFragmentMagic || h.reserved != 0)
    return bad("sent a malformed fragment header");
  if (!a.started) {
    if (h.tag != a.tag)
      return bad(fmt::format("sent message {:#x} where {:#x} was expected", h.tag, a.tag));
    if (h.bytes > a.capacity)
      return bad(fmt::format("sent {} bytes for message {:#x}, more than the {} expected", h.bytes,
                             h.tag, a.capacity));
    if (h.offset != 0) return bad(fmt::format("began message {:#x} at offset {}", h.tag, h.offset));
  } else if (h.tag != a.tag || h.bytes != a.bytes || h.offset != a.filled) {
    return bad(fmt::format(
        "sent a fragment of message {:#x} ({} bytes, at {}) into message {:#x} ({} bytes, at {})",
        h.tag, h.bytes, h.offset, a.tag, a.bytes, a.filled));
  }
  const size_t payload =
      std::min<uint64_t>(slot_bytes - sizeof(FragmentHeader), h.bytes - h.offset);
  if (wire_len != sizeof(FragmentHeader) + payload)
    return bad(fmt::format("wrote {} bytes for a fragment of {} payload bytes of message {:#x}",
                           wire_len, payload, h.tag));
  return payload;
}

bool SendWindow::on_written() {
  if (written_ == posted_) return false;
  ++written_;
  return true;
}

bool SendWindow::on_credit(uint32_t consumed) {
  // The receiver never runs more than `slots` ahead of what we know, so the
  // difference mod 2^32 recovers the full count.
  const uint64_t next =
      credited_ + static_cast<uint32_t>(consumed - static_cast<uint32_t>(credited_));
  if (next > posted_) return false;
  credited_ = next;
  return true;
}

std::optional<uint32_t> RecvWindow::on_arrival(uint32_t imm) {
  if (imm != static_cast<uint32_t>(arrived_) || arrived_ - consumed_ >= slots_) return std::nullopt;
  return static_cast<uint32_t>(arrived_++ % slots_);
}

std::optional<uint32_t> RecvWindow::credit_owed() const {
  if (returned_ == consumed_) return std::nullopt;
  return static_cast<uint32_t>(consumed_);
}

}  // namespace gossip::peers::rdma

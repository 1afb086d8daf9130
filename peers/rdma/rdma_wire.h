#pragma once
// The RDMA ring's wire format and flow control, as pure logic (no verbs), so that it
// is unit-tested on machines without a device.
//
// A link carries messages one way. The receiver registers `slots` receive slots of
// `slot_bytes` each and advertises them when it accepts the connection (Accept). The
// sender cuts a message into fragments of at most slot_bytes - sizeof(FragmentHeader)
// bytes, and writes fragment n, header first, into slot n % slots with RDMA WRITE WITH
// IMMEDIATE (immediate = n mod 2^32, a check on the order). The receiver copies the
// fragment out into the posted receive and returns the slot as a credit: a zero-length
// SEND WITH IMMEDIATE carrying how many fragments it has consumed in all (mod 2^32).

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "peers/ring_hello.h"

namespace gossip::peers::rdma {

static_assert(std::endian::native == std::endian::little, "the ring's headers are little-endian");

constexpr uint32_t kAcceptMagic = 0x41524447;    // "GDRA"
constexpr uint32_t kFragmentMagic = 0x46524447;  // "GDRF"
constexpr uint32_t kVersion = 2;                 // 2: the accept carries the receiver's nonce

// Private data of the connect request: the ring's hello (peers/ring_hello.h).
using Hello = RingHello;

// Private data of the accept: where the sender may write, and the receiver's nonce
// (peers/ring_hello.h: what the TCP transport's answer carries).
struct Accept {
  uint32_t magic = kAcceptMagic;
  uint32_t version = kVersion;
  uint32_t slots = 0;
  uint32_t slot_bytes = 0;
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t reserved = 0;
  RingNonce nonce{};
};
static_assert(sizeof(Accept) == 48);  // of the 196 bytes an IB CM reply may carry

// At the start of every slot.
struct FragmentHeader {
  uint32_t magic = kFragmentMagic;
  uint32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t bytes = 0;   // of the whole message
  uint64_t offset = 0;  // of this fragment's payload in the message
};
static_assert(sizeof(FragmentHeader) == 32);

// CM private data may arrive padded (IB CM pads to its fixed size): only the prefix counts.
std::optional<Hello> decode_hello(std::span<const std::byte> data);
std::optional<Accept> decode_accept(std::span<const std::byte> data);
// Checks what the right neighbor accepted with against what this sender can drive.
Status check_accept(const Accept& a, uint32_t max_slots, uint32_t peer);

// How many fragments a message of `bytes` takes (at least one: an empty message too).
uint64_t fragment_count(uint64_t bytes, uint32_t slot_bytes);

// The receive being filled, as far as the fragments so far have filled it.
struct Assembly {
  uint64_t tag = 0;
  uint64_t capacity = 0;  // of the posted buffer
  uint64_t bytes = 0;     // of the message, known from its first fragment
  uint64_t filled = 0;
  bool started = false;
};
// Checks the fragment that arrived with `wire_len` bytes in a slot of `slot_bytes`
// against the receive it must fill. On success returns its payload length; otherwise
// a protocol Status naming `peer` (the left neighbor).
Result<size_t> check_fragment(const FragmentHeader& h, size_t wire_len, uint32_t slot_bytes,
                              const Assembly& a, uint32_t peer);

// The sender's side of a link. Fragment n uses slot n % slots, here and in the
// receiver; a slot is free again once the receiver has consumed it (credit) and our
// own NIC has finished reading our staging copy (write completion).
class SendWindow {
 public:
  explicit SendWindow(uint32_t slots) : slots_(slots) {}
  bool can_post() const { return posted_ - std::min(written_, credited_) < slots_; }
  // Takes the next slot; only when can_post(). Returns the fragment's number.
  uint64_t post() { return posted_++; }
  uint32_t slot_of(uint64_t fragment) const { return static_cast<uint32_t>(fragment % slots_); }
  // False when there was no write outstanding (a bug or a confused CQ).
  bool on_written();
  // A credit carries the receiver's consumed count mod 2^32. False when it claims
  // fragments never posted or goes backwards: a protocol error.
  bool on_credit(uint32_t consumed);
  bool idle() const { return written_ == posted_; }  // every write completed

 private:
  uint32_t slots_;
  uint64_t posted_ = 0;
  uint64_t written_ = 0;
  uint64_t credited_ = 0;
};

// The receiver's side: fragments arrive in order, are consumed in order, and each
// consumed one is owed back to the sender as a credit.
class RecvWindow {
 public:
  explicit RecvWindow(uint32_t slots) : slots_(slots) {}
  // A fragment arrived with this immediate: returns its slot, or nothing when it is
  // out of order or there was no free slot for it (the sender broke the protocol).
  std::optional<uint32_t> on_arrival(uint32_t imm);
  bool has_arrived() const { return consumed_ < arrived_; }
  uint32_t next_slot() const { return static_cast<uint32_t>(consumed_ % slots_); }
  void consume() { ++consumed_; }
  // The credit owed, if any: the consumed count mod 2^32. Call credit_sent() once it
  // is on its way (a full send queue leaves it owed for the next pass).
  std::optional<uint32_t> credit_owed() const;
  void credit_sent() { returned_ = consumed_; }

 private:
  uint32_t slots_;
  uint64_t arrived_ = 0;
  uint64_t consumed_ = 0;
  uint64_t returned_ = 0;
};

}  // namespace gossip::peers::rdma

#pragma once
// The first words of every ring connection, whatever the fabric: who connects, to
// whom, in which session (the model's layout fingerprint, a token and the view), and
// the receiver's answer, a nonce of its own. TCP sends the hello as the connection's
// first 24 bytes and the answer back as the first 24 bytes the other way; RDMA puts
// them in the connect request's and the accept's private data.
//
// Why the nonce: the session names a view, not a connection, and a sealed channel's
// sender picks its own salt; without something fresh from the receiver, a recorded
// connection replayed into a later one of the same view (a retry of the same round)
// would open. The sealed channel binds the receiver's nonce into its message keys
// (peers/sealed_ring_channel.h), so a replay fails the link instead.

#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>

namespace gossip::peers {

static_assert(std::endian::native == std::endian::little, "the ring's hello is little-endian");

inline constexpr uint32_t kRingHelloMagic = 0x474e5247;   // "GRNG"
inline constexpr uint32_t kRingAnswerMagic = 0x414e5247;  // "GRNA"
// 2: the receiver answers a hello it takes with a nonce.
inline constexpr uint32_t kRingVersion = 2;

struct RingHello {
  uint32_t magic = kRingHelloMagic;
  uint32_t version = kRingVersion;
  uint32_t from = 0;
  uint32_t to = 0;
  uint64_t session = 0;
};
static_assert(sizeof(RingHello) == 24);

using RingNonce = std::array<uint8_t, 16>;

// 16 bytes from the system's random source, fresh for each connection.
RingNonce fresh_ring_nonce();

// The receiver's answer to a hello it takes (TCP only: RDMA's accept carries the nonce).
struct RingAnswer {
  uint32_t magic = kRingAnswerMagic;
  uint32_t version = kRingVersion;
  RingNonce nonce{};
};
static_assert(sizeof(RingAnswer) == 24);

// Why a node waiting for its left neighbor `left` in `session` turns this hello
// away, or "" when it is the one.
std::string ring_hello_refusal(const RingHello& in, uint32_t self, uint32_t left, uint64_t session);

// Why a node that said hello to `peer` cannot take this answer, or "" when it can.
std::string ring_answer_refusal(const RingAnswer& in, uint32_t peer);

}  // namespace gossip::peers

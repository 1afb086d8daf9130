#pragma once
// The first words of every ring connection, whatever the fabric: who connects, to
// whom, in which session (the model's layout fingerprint). TCP sends it as the
// connection's first 24 bytes, RDMA as the connect request's private data.

#include <bit>
#include <cstdint>
#include <string>

namespace gossip::peers {

static_assert(std::endian::native == std::endian::little, "the ring's hello is little-endian");

inline constexpr uint32_t kRingHelloMagic = 0x474e5247;  // "GRNG"
inline constexpr uint32_t kRingVersion = 1;

struct RingHello {
  uint32_t magic = kRingHelloMagic;
  uint32_t version = kRingVersion;
  uint32_t from = 0;
  uint32_t to = 0;
  uint64_t session = 0;
};
static_assert(sizeof(RingHello) == 24);

// Why a node waiting for its left neighbor `left` in `session` turns this hello
// away, or "" when it is the one.
std::string ring_hello_refusal(const RingHello& in, uint32_t self, uint32_t left, uint64_t session);

}  // namespace gossip::peers

#include "peers/ring_hello.h"

#include <fmt/format.h>
#include <sodium.h>

namespace gossip::peers {

RingNonce fresh_ring_nonce() {
  RingNonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

std::string ring_hello_refusal(const RingHello& in, uint32_t self, uint32_t left,
                               uint64_t session) {
  if (in.magic != kRingHelloMagic || in.version != kRingVersion)
    return in.magic == kRingHelloMagic
               ? fmt::format("ring hello version {}, this node speaks {} (upgrade every node)",
                             in.version, kRingVersion)
               : "not a gossipd ring hello (magic)";
  if (in.to != self || in.from != left)
    return fmt::format("it is node {} asking for node {}, we wait for node {}", in.from, in.to,
                       left);
  // Not the session we expect: it may hold a secret token (sgd/membership/peer_ring.h).
  if (in.session != session)
    return fmt::format("session {:#x} is not ours (another layout, or no token)", in.session);
  return {};
}

std::string ring_answer_refusal(const RingAnswer& in, uint32_t peer) {
  if (in.magic != kRingAnswerMagic)
    return fmt::format("peer {} answered the ring hello with something else", peer);
  if (in.version != kRingVersion)
    return fmt::format("peer {} speaks ring version {}, this node {} (upgrade every node)", peer,
                       in.version, kRingVersion);
  return {};
}

}  // namespace gossip::peers

#include "peers/ring_hello.h"

#include <fmt/format.h>

namespace gossip::peers {

std::string ring_hello_refusal(const RingHello& in, uint32_t self, uint32_t left,
                               uint64_t session) {
  if (in.magic != kRingHelloMagic || in.version != kRingVersion)
    return "not a gossipd ring hello (magic or version)";
  if (in.to != self || in.from != left)
    return fmt::format("it is node {} asking for node {}, we wait for node {}", in.from, in.to,
                       left);
  // Not the session we expect: it may hold a secret token (sgd/membership/peer_ring.h).
  if (in.session != session)
    return fmt::format("session {:#x} is not ours (another layout, or no token)", in.session);
  return {};
}

}  // namespace gossip::peers

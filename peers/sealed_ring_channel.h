#pragma once
// A RingChannel whose messages are encrypted and authenticated (AES-256-GCM), over
// any other: TCP or verbs. The ring's links are raw streams beside the CURVE
// channel; sealed, a man in the middle can neither read a chunk nor alter, drop,
// reorder or replay one without the receiver failing the channel.
//
// Keys: each direction of a pair of nodes has a link key both ends derive from the
// X25519 secret of their CURVE keys (peers/curve_auth.h, curve_link_key); nobody
// else, another peer included, can compute it. A channel's sender picks 16 random
// bytes and sends them first, in the clear; the message key is a hash of the link
// key, the ring session, those bytes and the nonce the receiver answered the
// connection's hello with (peers/ring_hello.h), so no two connections share one, and
// a whole connection recorded and replayed into a later one does not open. Message
// i's nonce is i, and its tag and length are authenticated with it: the receiver
// takes messages only in the order they were sealed, and one replayed from another
// channel does not open. Each message costs 16 bytes of MAC, and a pass of the
// cipher over its bytes on either end.

#include <array>
#include <cstdint>
#include <memory>

#include "peers/ring_channel.h"

namespace gossip::peers {

using LinkKey = std::array<uint8_t, 32>;

struct SealKeys {
  LinkKey to_right{};   // messages from this node to inner's right neighbor
  LinkKey from_left{};  // messages from its left neighbor to this node
  // The links' sessions (what the right neighbor is presented, what the left one
  // presents: RingEnds), bound into the message keys.
  uint64_t right_session = 0;
  uint64_t left_session = 0;
};

std::unique_ptr<RingChannel> seal_ring_channel(std::unique_ptr<RingChannel> inner,
                                               const SealKeys& keys);

// Bytes a sealed message adds to its plaintext.
inline constexpr size_t kSealBytes = 16;

}  // namespace gossip::peers

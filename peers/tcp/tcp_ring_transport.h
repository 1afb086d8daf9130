#pragma once
// The ring over TCP with Boost.Asio: one connection to each neighbor (we connect to
// the right one, the left one connects to us), TCP_NODELAY and large socket buffers.
// Asio does the rendezvous (connect with retries, accept, hello, refusals); the
// connections then go to a channel its caller drives (peers/tcp/tcp_ring_channel.h).
//
// On the wire: a 24-byte hello when a connection opens ({magic, version, from, to,
// session}), then per message a 24-byte frame header ({magic, 0, tag, bytes}) and
// the bytes.

#include <memory>

#include "peers/ring_channel.h"

namespace gossip::peers {

Result<std::unique_ptr<RingTransport>> make_tcp_ring_transport(const RingTransportOptions& options);

}  // namespace gossip::peers

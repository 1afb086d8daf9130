#pragma once
// A RingChannel over two connected TCP sockets, progressed by its caller as MPI's
// TCP transport is: post_send writes what the kernel takes at once, and every wait
// moves both directions (sends out to the right, frames in from the left) with
// non-blocking system calls, sleeping in ppoll between them. No I/O thread: a
// small message costs one sendmsg and one recv instead of four thread hand-offs,
// and four ranks on two cores do not fight eight threads. The kernel's socket
// buffers carry the overlap: while the caller reduces chunk c, chunk c + 1 lands
// in the receive buffer and the sends already handed over keep going.
//
// Frames are {magic "GRF1", 0, tag, bytes} then the bytes; small frames are read
// several at a time through a staging buffer, large payloads straight into the
// posted receive.

#include <chrono>
#include <cstdint>
#include <memory>

#include "peers/ring_channel.h"

namespace gossip::peers {

// Takes ownership of both descriptors (connected stream sockets) and makes them
// non-blocking. A wait busy-polls for `busy_poll` before it sleeps (RingTransportOptions).
std::unique_ptr<RingChannel> make_tcp_ring_channel(uint32_t left, int left_fd, uint32_t right,
                                                   int right_fd, TrafficCounters* traffic,
                                                   std::chrono::microseconds busy_poll = {});

}  // namespace gossip::peers

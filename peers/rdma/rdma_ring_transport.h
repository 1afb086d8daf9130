#pragma once
// The ring over RDMA verbs: connections set up with rdma_cm (librdmacm), one RC queue
// pair to each neighbor (we connect to the right one, the left one connects to us),
// messages written with RDMA WRITE WITH IMMEDIATE into receive slots the receiver
// registered and advertised, and credits returned as the receiver consumes them
// (peers/rdma/rdma_wire.h has the format and the flow control).
//
// Messages go through registered bounce buffers on both sides, not zero-copy:
//  - a cache of registrations over the caller's memory is unsafe without ODP or
//    allocator hooks: memory freed and reallocated at the same address keeps the old
//    pages pinned under the cached MR, and the NIC would send stale bytes;
//  - the receiver must see a message's tag and length before its bytes land, so that
//    a wrong message fails the channel instead of overwriting the caller's buffer.
// The price is one memcpy per side, cheap beside the reduction the ring does per
// chunk anyway.
//
// No thread: completions are handled by whichever channel call runs (post or wait),
// which blocks on the completion and CM channels' descriptors with poll(), bounded by
// the deadline and looking at the cancel flag every 20 ms.
//
// With no RDMA device, make_rdma_ring_transport fails with "no RDMA device".

#include <memory>

#include "peers/ring_channel.h"

namespace gossip::peers {

Result<std::unique_ptr<RingTransport>> make_rdma_ring_transport(
    const RingTransportOptions& options);

}  // namespace gossip::peers

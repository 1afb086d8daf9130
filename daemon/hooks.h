#pragma once
// Seams for test builds of the daemon: the hostile node of the attack tests
// (tests/security/byzantine_gossipd.cc) is gossipd with its peer channel and its ring
// transport wrapped.
// gossipd itself passes none.

#include <functional>
#include <memory>

#include "peers/channel.h"
#include "peers/ring_channel.h"

namespace gossip::daemon {

struct DaemonHooks {
  // Wraps the channel the node talks to its peers through.
  std::function<std::unique_ptr<peers::PeerChannel>(std::unique_ptr<peers::PeerChannel>)>
      wrap_channel;
  // Wraps the transport of the all-reduce's ring and mesh links (TCP, RDMA).
  std::function<std::unique_ptr<peers::RingTransport>(std::unique_ptr<peers::RingTransport>)>
      wrap_ring_transport;
};

}  // namespace gossip::daemon

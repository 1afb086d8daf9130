#pragma once
// A free loopback TCP port for tests that bind transports of their own: below the
// kernel's ephemeral range, as gossipctl cluster picks them (peers/loopback_ports.h).
// A port from bind(0), released, could be taken by another test's connection before
// the transport bound it: InitialModel.ADigestFromAPeerOtherThanNode0IsNotTaken failed
// so in a CI run (its transport's create failed, and .value() threw).

#include <stdexcept>

#include "peers/loopback_ports.h"

namespace gossip::sgd {

inline int free_port() {
  auto ports = peers::pick_loopback_ports(1);
  if (!ports) throw std::runtime_error(ports.status().message());
  return ports->front();
}

}  // namespace gossip::sgd

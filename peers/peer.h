#pragma once

#include <cstdint>
#include <string>

namespace gossip::peers {

struct Peer {
  uint32_t id = 0;
  std::string endpoint;  // tcp://host:port
};

}  // namespace gossip::peers

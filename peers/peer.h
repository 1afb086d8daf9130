#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gossip::peers {

struct Peer {
  uint32_t id = 0;
  std::string endpoint;         // tcp://host:port
  std::string public_key = {};  // CURVE (Z85), when the channel is encrypted (peers/curve_auth.h)
  // Refused (under CURVE): its key's handshakes and every message from it; nothing is
  // sent to it. To the strategies it is a peer that never answers.
  bool banned = false;
};

inline std::vector<uint32_t> ids_of(const std::vector<Peer>& peers) {
  std::vector<uint32_t> ids;
  for (const Peer& p : peers) ids.push_back(p.id);
  return ids;
}

// The host of a validated endpoint: "tcp://host:port" -> host, "tcp://[v6]:port" -> v6.
inline std::string endpoint_host(const std::string& endpoint) {
  std::string rest = endpoint;
  if (const auto p = rest.find("://"); p != std::string::npos) rest = rest.substr(p + 3);
  if (!rest.empty() && rest.front() == '[') return rest.substr(1, rest.find(']') - 1);
  return rest.substr(0, rest.rfind(':'));
}

}  // namespace gossip::peers

#pragma once
// Free TCP ports on 127.0.0.1 for a local cluster or a test's transports, picked below
// the kernel's ephemeral range (ip_local_port_range): bind(0) and outgoing connections
// take their ports at or above it, never below, so no ring listener and no connection
// of another process can take a port picked here before its owner binds it. A port
// taken from bind(0) and released (the old way) could be, and a test failed on it.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::peers {

// The low end of the kernel's ephemeral ports.
inline int ephemeral_low() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return (f >> low) && low > 1024 ? low : 32768;
}

// n distinct ports, each checked free with a bind, held until all are picked.
inline Result<std::vector<int>> pick_loopback_ports(int n) {
  constexpr int kLowest = 10000;
  const int high = ephemeral_low() - 1;
  if (high - kLowest < 4 * n) return Status::io_error("no port range below the ephemeral ports");
  std::mt19937 draw(std::random_device{}());
  std::uniform_int_distribution<int> port_in(kLowest, high);
  std::vector<int> fds;
  std::vector<int> ports;
  for (int attempt = 0; static_cast<int>(ports.size()) < n && attempt < 1000; ++attempt) {
    const int port = port_in(draw);
    if (std::find(ports.begin(), ports.end(), port) != ports.end()) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      continue;  // taken
    }
    fds.push_back(fd);
    ports.push_back(port);
  }
  for (int fd : fds) ::close(fd);
  if (static_cast<int>(ports.size()) < n)
    return Status::io_error("found " + std::to_string(ports.size()) +
                            " free ports on 127.0.0.1 in " + std::to_string(kLowest) + ".." +
                            std::to_string(high) + ", not " + std::to_string(n));
  return ports;
}

}  // namespace gossip::peers

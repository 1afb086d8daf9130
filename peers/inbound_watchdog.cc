#include "peers/inbound_watchdog.h"

// <linux/tcp.h>, not <netinet/tcp.h>: glibc's tcp_info stops before
// tcpi_bytes_received (Linux 4.1).
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>

#include <cstring>

namespace gossip::peers {

namespace {

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool addresses_of(int fd, sockaddr_storage& local, sockaddr_storage& remote) {
  socklen_t n = sizeof local;
  std::memset(&local, 0, sizeof local);
  std::memset(&remote, 0, sizeof remote);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &n) != 0) return false;
  n = sizeof remote;
  return ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &n) == 0;
}

}  // namespace

uint64_t InboundWatchdog::wire_bytes(uint64_t bytes, bool curve) {
  // CURVE: "\x07MESSAGE", an 8-byte nonce, then the box: 16 bytes of MAC and the
  // part's flags byte before its data.
  const uint64_t body = curve ? bytes + 33 : bytes;
  return body + (body <= 255 ? 2 : 9);
}

void InboundWatchdog::accepted(int fd) {
  Connection c;
  if (!addresses_of(fd, c.local, c.remote)) {
    connections_.erase(fd);
    return;
  }
  connections_[fd] = c;
}

void InboundWatchdog::gone(int fd) { connections_.erase(fd); }

void InboundWatchdog::delivered(int fd, uint64_t bytes) {
  const auto it = connections_.find(fd);
  if (it != connections_.end()) it->second.delivered += wire_bytes(bytes, curve_);
}

bool InboundWatchdog::still_ours(int fd, const Connection& c) const {
  sockaddr_storage local, remote;
  return addresses_of(fd, local, remote) && same_address(local, c.local) &&
         same_address(remote, c.remote);
}

int64_t InboundWatchdog::held(int fd) const {
  const auto it = connections_.find(fd);
  if (it == connections_.end() || !still_ours(fd, it->second)) return -1;
  tcp_info info{};
  socklen_t n = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &n) != 0 ||
      n < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
    return -1;  // not TCP, or a kernel before 4.1
  int queued = 0;
  if (::ioctl(fd, SIOCINQ, &queued) != 0) return -1;
  const uint64_t read = info.tcpi_bytes_received - static_cast<uint64_t>(queued);
  // Fewer bytes read than delivered: the two calls raced a read; nothing is held.
  return read > it->second.delivered ? static_cast<int64_t>(read - it->second.delivered) : 0;
}

}  // namespace gossip::peers

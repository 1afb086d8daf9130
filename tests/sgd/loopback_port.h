#pragma once
// A free loopback TCP port for tests that bind transports of their own (bound and
// released: fine on one machine).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gossip::sgd {

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace gossip::sgd

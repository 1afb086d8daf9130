#pragma once
// ZMTP 3.0 by hand (rfc.zeromq.org/spec/23), NULL mechanism: libzmq itself never
// sends a message's parts before its last one, so an endless message needs a
// hand-made peer. Used by gossip-attacker and the watchdog's tests.

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gossip::testing {

// Greeting and READY as a DEALER with routing id `identity`, on a connected socket.
inline bool zmtp_hello(int fd, const std::string& identity) {
  unsigned char greeting[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0};
  std::memcpy(greeting + 12, "NULL", 4);
  if (::send(fd, greeting, sizeof greeting, MSG_NOSIGNAL) != sizeof greeting) return false;
  unsigned char theirs[64];
  for (size_t got = 0; got < sizeof theirs;) {
    const ssize_t n = ::recv(fd, theirs + got, sizeof theirs - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  std::string body = "\x05READY";
  const auto property = [&](const std::string& name, const std::string& value) {
    body += static_cast<char>(name.size());
    body += name;
    const uint32_t n = htonl(static_cast<uint32_t>(value.size()));
    body.append(reinterpret_cast<const char*>(&n), 4);
    body += value;
  };
  property("Socket-Type", "DEALER");
  property("Identity", identity);
  std::string command = {'\x04', static_cast<char>(body.size())};
  command += body;
  return ::send(fd, command.data(), command.size(), MSG_NOSIGNAL) ==
         static_cast<ssize_t>(command.size());
}

// One long frame of `bytes` with "more" set (flags 0x03, an 8-byte size): sent over
// and over, a message that never ends.
inline std::vector<unsigned char> zmtp_more_frame(size_t bytes) {
  std::vector<unsigned char> frame(9 + bytes, 'x');
  frame[0] = 0x03;
  for (int i = 0; i < 8; ++i)
    frame[1 + i] = static_cast<unsigned char>((uint64_t{bytes} >> (56 - 8 * i)) & 0xFF);
  return frame;
}

// Sends the rest of `frame` from `at` (moved on; back to 0 once the frame is out) on
// `fd` without blocking for more than `wait_ms`: the bytes sent (0 when
// the peer's window is shut), or -1 once the peer has closed the connection (an
// error, or its FIN: a receiver that cut us and freed the message sends FIN, then
// never opens its window again, so a blocked sender would not notice for a minute).
inline ssize_t zmtp_push(int fd, const std::vector<unsigned char>& frame, size_t& at,
                         int wait_ms = 100) {
  const ssize_t n = ::send(fd, frame.data() + at, frame.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) {
    at = (at + static_cast<size_t>(n)) % frame.size();
    return n;
  }
  if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
  pollfd p{fd, POLLOUT | POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, wait_ms) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLERR | POLLHUP))) {
    char c;
    const ssize_t r = ::recv(fd, &c, 1, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return -1;
  }
  return 0;
}

}  // namespace gossip::testing

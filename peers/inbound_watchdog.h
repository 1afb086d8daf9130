#pragma once
// Bounds what libzmq holds of a message it has not handed over yet.
//
// libzmq buffers every part of a multipart message until its last one arrives, and
// both its limits (ZMQ_MAXMSGSIZE per part, the high-water mark in whole messages)
// leave one unending message unbounded: a peer that sends parts with "more" set
// forever grows the daemon's memory until it dies. The socket API never shows the
// parts, so the watchdog reads the kernel instead. For every accepted connection,
// the bytes the kernel has taken in (TCP_INFO) minus those still in its queue
// (SIOCINQ) are the bytes libzmq has read; minus the wire size of every part the
// daemon has received from that connection (ZMQ_SRCFD names it), they are what
// libzmq holds undelivered. When the daemon has drained the socket, that is the
// message in progress, which the wire format bounds (header + payload), plus the
// handshake. A connection above the bound is shut down; libzmq then drops its pipe
// and the partial message with it.

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

namespace gossip::peers {

class InboundWatchdog {
 public:
  // `limit`: the most one connection may hold undelivered; `curve`: parts arrive as
  // CURVE MESSAGE commands, whose wire size differs.
  InboundWatchdog(uint64_t limit, bool curve) : limit_(limit), curve_(curve) {}

  // From the socket monitor: a connection was accepted, or is gone.
  void accepted(int fd);
  void gone(int fd);
  // A part of `bytes` the daemon took from the connection `fd`.
  void delivered(int fd, uint64_t bytes);

  struct Cut {
    int fd;
    uint64_t held;  // undelivered bytes when it was cut
  };
  // Called only when the socket has no whole message waiting. Shuts down every
  // connection that holds more than the limit if `still_nothing_waiting()`, asked
  // after the count, says no message completed meanwhile (it would be counted as
  // held until the caller takes it).
  template <class StillNothingWaiting>
  std::vector<Cut> check(StillNothingWaiting still_nothing_waiting) {
    std::vector<Cut> cuts;
    for (auto it = connections_.begin(); it != connections_.end();) {
      const int64_t held_now = held(it->first);
      if (held_now < 0) {  // closed, and maybe reused before its event reached us
        it = connections_.erase(it);
        continue;
      }
      if (static_cast<uint64_t>(held_now) > limit_ && still_nothing_waiting()) {
        ::shutdown(it->first, SHUT_RDWR);
        cuts.push_back({it->first, static_cast<uint64_t>(held_now)});
        it = connections_.erase(it);
        continue;
      }
      ++it;
    }
    return cuts;
  }

  // Whether a connection holds more than the limit by the count now, which whole
  // messages waiting in libzmq inflate: where it does, the caller takes them (they are
  // then delivered) and check()s.
  bool any_over_limit() const {
    for (const auto& [fd, c] : connections_)
      if (held(fd) > static_cast<int64_t>(limit_)) return true;
    return false;
  }

  // Undelivered bytes of `fd` now, or -1 when it is not a tracked TCP connection.
  int64_t held(int fd) const;
  size_t tracked() const { return connections_.size(); }

  // The bytes a part of `bytes` takes on the wire (ZMTP 3 framing; with CURVE, the
  // MESSAGE command around it).
  static uint64_t wire_bytes(uint64_t bytes, bool curve);

 private:
  struct Connection {
    sockaddr_storage local{}, remote{};  // to tell a reused descriptor from ours
    uint64_t delivered = 0;
  };
  bool still_ours(int fd, const Connection& c) const;

  uint64_t limit_;
  bool curve_;
  std::map<int, Connection> connections_;
};

}  // namespace gossip::peers

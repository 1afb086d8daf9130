#pragma once
// A node's two links in a ring: messages go to the right neighbor and come from the
// left one. Request based, as verbs and NCCL are: post, then wait with a deadline,
// so the caller reduces chunk c while chunk c + 1 is on the wire.
//
// A RingTransport makes channels (one implementation per fabric: "tcp" with
// Boost.Asio, "rdma" with verbs): it listens for the left neighbor and connects to
// the right one. The two ends' addresses travel over the daemons' control channel;
// the transport only needs the right neighbor's host and port.
//
// Messages arrive whole and in order. Each carries a 64-bit tag that the receiver
// names when it posts the receive; a message with another tag, or longer than the
// posted buffer, fails the channel with a message naming the peer. Any failure
// (peer gone, deadline, protocol) poisons the channel: every later call fails with
// the same Status, and the owner makes a new one.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "peers/ring_hello.h"
#include "peers/traffic.h"

namespace gossip::peers {

// How often a transport's wait looks at WaitOptions' cancel flag and interrupt, and how
// long its connect waits before trying a refused neighbor again (TCP and RDMA alike).
inline constexpr std::chrono::milliseconds kCancelPoll{20};
inline constexpr std::chrono::milliseconds kConnectRetry{50};

struct WaitOptions {
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* cancel = nullptr;  // set by the owner to abandon the wait
  // Polled with `cancel`, on the waiting thread: true abandons the wait too. The
  // elastic ring answers its control channel from here while a ring operation waits
  // (sgd/membership/peer_ring.h).
  std::function<bool()> interrupt = nullptr;
  bool cancelled() const {
    return (cancel && cancel->load(std::memory_order_relaxed)) || (interrupt && interrupt());
  }
};

// Where a channel's time went, summed since it was made: the system calls that move
// bytes and the sleeps between them, in wall time (a process the scheduler preempts
// inside a call is charged for the wait). What a call spends outside them is the
// caller's (reducing, copying, sealing). The TCP channel counts, two clock reads a
// system call; the others leave it zero. Read by bench/allreduce's per-call breakdown.
struct ChannelTimes {
  uint64_t send_calls = 0;  // sendmsg
  uint64_t send_ns = 0;
  uint64_t recv_calls = 0;  // recv, those that found nothing outside a busy-poll included
  uint64_t recv_ns = 0;
  uint64_t empty_recvs = 0;  // of recv_calls: nothing there yet (EAGAIN)
  uint64_t sleeps = 0;       // ppoll: waiting for the peer or the kernel
  uint64_t sleep_ns = 0;
  // A busy-poll's probes that found nothing (RingTransportOptions::busy_poll); a probe
  // that moves bytes counts as a send or receive. The loop between probes is the caller's.
  uint64_t spin_calls = 0;
  uint64_t spin_ns = 0;
  ChannelTimes& operator+=(const ChannelTimes& o) {
    send_calls += o.send_calls;
    send_ns += o.send_ns;
    recv_calls += o.recv_calls;
    recv_ns += o.recv_ns;
    empty_recvs += o.empty_recvs;
    sleeps += o.sleeps;
    sleep_ns += o.sleep_ns;
    spin_calls += o.spin_calls;
    spin_ns += o.spin_ns;
    return *this;
  }
  // Counters only grow, so a later reading minus an earlier one of the same channels.
  ChannelTimes operator-(const ChannelTimes& o) const {
    return {send_calls - o.send_calls, send_ns - o.send_ns,         recv_calls - o.recv_calls,
            recv_ns - o.recv_ns,       empty_recvs - o.empty_recvs, sleeps - o.sleeps,
            sleep_ns - o.sleep_ns,     spin_calls - o.spin_calls,   spin_ns - o.spin_ns};
  }
};

class RingChannel {
 public:
  virtual ~RingChannel() = default;

  uint32_t left() const { return left_; }
  uint32_t right() const { return right_; }

  // Queues a message to the right neighbor. `data` must stay valid and unchanged
  // until wait_sends() has returned.
  virtual Status post_send(uint64_t tag, std::span<const std::byte> data) = 0;
  // Queues a receive of the next message from the left neighbor into `buffer`; the
  // message must carry `tag` and be at most buffer.size() bytes long.
  virtual Status post_recv(uint64_t tag, std::span<std::byte> buffer) = 0;
  // Waits for the oldest posted receive; returns the length of its message.
  virtual Result<size_t> wait_recv(const WaitOptions& wait) = 0;
  // Waits until every posted send has left this process's hands.
  virtual Status wait_sends(const WaitOptions& wait) = 0;
  // Moves what it can without waiting: queued sends out, arrived messages into
  // posted receives. An algorithm that waits on one of several channels pokes the
  // others, so that none stalls for lack of a caller (the TCP channel has no thread).
  // Fails, and poisons the channel, only as a wait would (a broken connection, a
  // message that does not fit); never for lack of time.
  virtual Status poke() { return Status::ok(); }

  // What this channel's calls have spent, and where (a wrapper answers its inner channel's).
  virtual ChannelTimes times() const { return {}; }

  // The receivers' nonces of this channel's two connections (peers/ring_hello.h): the
  // one this node gave its left neighbor, which binds what comes from it, and the one
  // its right neighbor gave this node, which binds what goes to it. The transport sets
  // them; a sealed channel derives its keys from them.
  const RingNonce& nonce_given_left() const { return given_left_; }
  const RingNonce& nonce_from_right() const { return from_right_; }
  void set_nonces(const RingNonce& given_left, const RingNonce& from_right) {
    given_left_ = given_left;
    from_right_ = from_right;
  }

 protected:
  RingChannel(uint32_t left, uint32_t right) : left_(left), right_(right) {}

 private:
  uint32_t left_;
  uint32_t right_;
  RingNonce given_left_{};
  RingNonce from_right_{};
};

struct RingEnds {
  uint32_t self = 0;
  uint32_t left = 0;   // who must connect to us
  uint32_t right = 0;  // whom we connect to
  std::string right_host;
  uint16_t right_port = 0;
  uint64_t session = 0;  // what the left neighbor must present (e.g. a layout fingerprint)
  // What we present to the right neighbor; 0: `session` too. Different where each node
  // hands its left neighbor a secret token of its own (sgd/membership/peer_ring.h).
  uint64_t right_session = 0;
};

// One link of a mesh: a peer this node both sends to and receives from.
struct MeshEnd {
  uint32_t peer = 0;
  std::string host;
  uint16_t port = 0;
  uint64_t session = 0;       // what the peer must present to us
  uint64_t peer_session = 0;  // what we present to it
};

class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual const char* name() const = 0;
  // The port it accepts the left neighbor on (bound at creation).
  virtual uint16_t port() const = 0;
  // Connects to the right neighbor and accepts the left one, both by the deadline.
  // Connections from anyone but `ends.left` (wrong id or session) are refused and
  // logged, and the wait goes on.
  virtual Result<std::unique_ptr<RingChannel>> connect(const RingEnds& ends,
                                                       const WaitOptions& wait) = 0;
  // Links to several peers at once (the tree, butterfly and master all-reduces,
  // sgd/collectives/): one channel per end, whose left and right are that peer, in
  // the order of `ends`. Every peer must ask for its link to this node at the same
  // time. Connections from anyone not in `ends` are refused and logged.
  virtual Result<std::vector<std::unique_ptr<RingChannel>>> connect_mesh(
      uint32_t self, const std::vector<MeshEnd>& ends, const WaitOptions& wait);
};

// The longest busy-poll a channel takes (RingTransportOptions::busy_poll): the spin
// does not look at the cancel flag. gossipd's and ring_bench's flags refuse more.
inline constexpr std::chrono::microseconds kMaxBusyPoll{10'000};

struct RingTransportOptions {
  std::string listen_host = "127.0.0.1";  // where the left neighbor connects
  uint16_t port = 0;                      // 0: any free port
  int socket_buffer_bytes = 4 << 20;
  TrafficCounters* traffic = nullptr;  // counts payload and wire bytes per peer
  // A wait retries its non-blocking system calls this long (at most 10 ms) before it
  // sleeps in ppoll: a message that comes within it costs no wake-up. Worth it where
  // each rank has a core of its own; where ranks share cores, a spinning rank takes the
  // core of the one it waits for (docs/collectives.md, "Busy-poll"). TCP only.
  std::chrono::microseconds busy_poll{0};
};

// The transports this build has, by name ("tcp"; "rdma" where rdma-core was found
// and a device is present). An unknown or absent one fails, naming those there are.
Result<std::unique_ptr<RingTransport>> make_ring_transport(const std::string& name,
                                                           const RingTransportOptions& options);

}  // namespace gossip::peers

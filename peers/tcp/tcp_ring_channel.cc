#include "peers/tcp/tcp_ring_channel.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

namespace gossip::peers {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kFrameMagic = 0x31465247;  // "GRF1"
// Small frames are read in bulk through this; payloads larger than it go straight
// into their receive buffer, so that a 1 MiB chunk is not copied twice.
constexpr size_t kStageBytes = 64 << 10;
// Queued messages handed to one sendmsg (two iovecs each).
constexpr size_t kSendBatch = 32;

struct Frame {
  uint32_t magic = kFrameMagic;
  uint32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(Frame) == 24);

bool would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK; }

class TcpRingChannel final : public RingChannel {
 public:
  TcpRingChannel(uint32_t left, int left_fd, uint32_t right, int right_fd, TrafficCounters* traffic,
                 std::chrono::microseconds busy_poll)
      : RingChannel(left, right),
        left_fd_(left_fd),
        right_fd_(right_fd),
        traffic_(traffic),
        busy_poll_(std::min<std::chrono::microseconds>(busy_poll, kMaxBusyPoll)),
        stage_(kStageBytes) {
    for (int fd : {left_fd_, right_fd_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  ~TcpRingChannel() override {
    ::close(left_fd_);
    ::close(right_fd_);
  }

  Status post_send(uint64_t tag, std::span<const std::byte> data) override {
    if (!failure_.is_ok()) return failure_;
    sends_.push_back({Frame{.tag = tag, .bytes = data.size()}, data});
    return check(flush_sends());  // eager: most messages leave here, in one system call
  }

  Status post_recv(uint64_t tag, std::span<std::byte> buffer) override {
    if (!failure_.is_ok()) return failure_;
    recvs_.push_back({tag, buffer});
    return Status::ok();
  }

  Result<size_t> wait_recv(const WaitOptions& wait) override {
    if (recvs_.empty()) return Status::invalid("ring: wait_recv with no receive posted");
    GOSSIP_RETURN_IF_ERROR(wait_until(
        wait, [&] { return recvs_.front().done; },
        [&] { return fmt::format("ring: no message from peer {} (left) in time", left()); }));
    const size_t bytes = recvs_.front().bytes;
    recvs_.pop_front();
    --next_recv_;
    return bytes;
  }

  Status poke() override {
    if (!failure_.is_ok()) return failure_;
    GOSSIP_RETURN_IF_ERROR(check(flush_sends()));
    return check(fill_recvs());
  }

  Status wait_sends(const WaitOptions& wait) override {
    return wait_until(
        wait, [&] { return sends_.empty(); },
        [&] {
          return fmt::format("ring: peer {} (right) did not take our messages in time", right());
        });
  }

  ChannelTimes times() const override { return times_; }

 private:
  struct Send {
    Frame frame;
    std::span<const std::byte> data;
  };
  struct Recv {
    uint64_t tag = 0;
    std::span<std::byte> buffer;
    bool done = false;
    size_t bytes = 0;
  };

  // Progresses both directions until `done()`, a failure, the deadline or the cancel flag.
  // With busy_poll_, the first turns retry at once, for that long, before any sleep.
  // The spin looks at the deadline but not at the cancel flag, whose interrupt may
  // answer a control channel: it lasts at most kMaxBusyPoll.
  template <class Done, class What>
  Status wait_until(const WaitOptions& wait, Done done, What what) {
    if (!failure_.is_ok()) return failure_;
    struct SpinEnds {  // on every way out, so that later calls count as themselves
      bool& spinning;
      ~SpinEnds() { spinning = false; }
    } spin_ends{spinning_};
    Clock::time_point spin_end{};
    for (;;) {
      GOSSIP_RETURN_IF_ERROR(check(flush_sends()));
      GOSSIP_RETURN_IF_ERROR(check(fill_recvs()));
      if (done()) return Status::ok();
      auto now = Clock::now();
      if (busy_poll_.count() > 0) {
        if (spin_end == Clock::time_point{}) spin_end = std::min(now + busy_poll_, wait.deadline);
        spinning_ = now < spin_end;
        if (spinning_) continue;
      }
      if (wait.cancelled()) return fail(Status::closed(what() + ": cancelled"));
      now = Clock::now();
      if (now >= wait.deadline) return fail(Status::timeout(what()));
      std::array<pollfd, 2> fds{};
      nfds_t n = 0;
      if (next_recv_ < recvs_.size()) fds[n++] = {.fd = left_fd_, .events = POLLIN, .revents = 0};
      if (!sends_.empty()) fds[n++] = {.fd = right_fd_, .events = POLLOUT, .revents = 0};
      const auto nap = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::min<Clock::duration>(wait.deadline - now, kCancelPoll));
      const timespec ts{.tv_sec = static_cast<time_t>(nap.count() / 1'000'000'000),
                        .tv_nsec = static_cast<long>(nap.count() % 1'000'000'000)};
      // Wakes on readiness, a closed peer (POLLHUP/POLLERR) or the nap's end; the
      // next turn's system calls tell which.
      timed(times_.sleeps, times_.sleep_ns, [&] { return ::ppoll(fds.data(), n, &ts, nullptr); });
    }
  }

  // Runs one system call, adding its count and time to `calls` and `ns`; a busy-poll's
  // probe that found nothing counts as the spin's instead. errno stays the call's.
  template <class Call>
  auto timed(uint64_t& calls, uint64_t& ns, Call call) {
    const auto t0 = Clock::now();
    auto r = call();
    const int err = errno;
    const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
    const bool idle_probe = spinning_ && r < 0 && would_block(err);
    ++(idle_probe ? times_.spin_calls : calls);
    (idle_probe ? times_.spin_ns : ns) += static_cast<uint64_t>(took.count());
    errno = err;
    return r;
  }
  ssize_t timed_recv(std::byte* into, size_t bytes) {
    const bool spin = spinning_;
    const ssize_t r = timed(times_.recv_calls, times_.recv_ns,
                            [&] { return ::recv(left_fd_, into, bytes, MSG_DONTWAIT); });
    if (r < 0 && would_block(errno) && !spin) ++times_.empty_recvs;
    return r;
  }

  // Hands the kernel as many queued frames as it takes now.
  Status flush_sends() {
    while (!sends_.empty()) {
      std::array<iovec, 2 * kSendBatch> iov;
      size_t n = 0;
      size_t skip = sent_;  // of the front message, already written
      for (size_t i = 0; i < sends_.size() && i < kSendBatch; ++i) {
        const Send& s = sends_[i];
        const std::array<std::span<const std::byte>, 2> parts{std::as_bytes(std::span(&s.frame, 1)),
                                                              s.data};
        for (auto part : parts) {
          const size_t k = std::min(skip, part.size());
          skip -= k;
          if (part.size() > k)
            iov[n++] = {const_cast<std::byte*>(part.data() + k), part.size() - k};
        }
      }
      msghdr msg{};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = n;
      const ssize_t w = timed(times_.send_calls, times_.send_ns, [&] {
        return ::sendmsg(right_fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      });
      if (w < 0) {
        if (errno == EINTR) continue;
        if (would_block(errno)) return Status::ok();
        return Status::io_error(io_message("sending to", right(), "right", errno));
      }
      advance_sends(static_cast<size_t>(w));
    }
    return Status::ok();
  }

  void advance_sends(size_t written) {
    while (written > 0) {
      const Send& s = sends_.front();
      const size_t left_of_it = sizeof(Frame) + s.data.size() - sent_;
      if (written < left_of_it) {
        sent_ += written;
        return;
      }
      written -= left_of_it;
      if (traffic_) traffic_->count_sent(right(), s.data.size(), sizeof(Frame) + s.data.size());
      sends_.pop_front();
      sent_ = 0;
    }
  }

  // Reads frames into the posted receives, in order, until the socket has no more
  // or every posted receive is filled (later frames wait in the kernel).
  Status fill_recvs() {
    while (next_recv_ < recvs_.size()) {
      Recv& op = recvs_[next_recv_];
      if (!have_frame_) {
        if (staged() < sizeof(Frame)) {
          // Small receives read ahead (their payload, and frames after it); a large
          // one takes just the header here and its payload below.
          const size_t want =
              op.buffer.size() + sizeof(Frame) <= kStageBytes ? kStageBytes : sizeof(Frame);
          auto got = read_stage(want);
          if (!got.is_ok()) return got.status();
          if (*got == 0) return Status::ok();
          continue;
        }
        std::memcpy(&rx_frame_, stage_.data() + stage_begin_, sizeof(Frame));
        stage_begin_ += sizeof(Frame);
        GOSSIP_RETURN_IF_ERROR(check_frame(op));
        have_frame_ = true;
        rx_filled_ = 0;
      }
      const size_t total = rx_frame_.bytes;
      if (rx_filled_ < total && staged() > 0) {
        const size_t k = std::min(staged(), total - rx_filled_);
        std::memcpy(op.buffer.data() + rx_filled_, stage_.data() + stage_begin_, k);
        stage_begin_ += k;
        rx_filled_ += k;
      }
      if (rx_filled_ < total) {
        const ssize_t r = timed_recv(op.buffer.data() + rx_filled_, total - rx_filled_);
        if (r == 0) return Status::io_error(closed_message(left(), "left"));
        if (r < 0) {
          if (errno == EINTR) continue;
          if (would_block(errno)) return Status::ok();
          return Status::io_error(io_message("receiving from", left(), "left", errno));
        }
        rx_filled_ += static_cast<size_t>(r);
        if (rx_filled_ < total) return Status::ok();  // the socket is drained for now
      }
      op.done = true;
      op.bytes = total;
      ++next_recv_;
      have_frame_ = false;
      if (traffic_) traffic_->count_recv(left(), total, total + sizeof(Frame));
    }
    return Status::ok();
  }

  size_t staged() const { return stage_end_ - stage_begin_; }

  // Reads up to `want` bytes into the staging buffer's free end; 0 when none are there yet.
  Result<size_t> read_stage(size_t want) {
    if (stage_begin_ > 0) {  // keep the unread bytes at the front
      std::memmove(stage_.data(), stage_.data() + stage_begin_, staged());
      stage_end_ -= stage_begin_;
      stage_begin_ = 0;
    }
    want = std::min(want - std::min(want, stage_end_), stage_.size() - stage_end_);
    for (;;) {
      const ssize_t r = timed_recv(stage_.data() + stage_end_, want);
      if (r > 0) {
        stage_end_ += static_cast<size_t>(r);
        return static_cast<size_t>(r);
      }
      if (r == 0) return Status::io_error(closed_message(left(), "left"));
      if (errno == EINTR) continue;
      if (would_block(errno)) return size_t{0};
      return Status::io_error(io_message("receiving from", left(), "left", errno));
    }
  }

  Status check_frame(const Recv& op) const {
    if (rx_frame_.magic != kFrameMagic || rx_frame_.reserved != 0)
      return Status::protocol(
          fmt::format("ring: peer {} (left) sent a malformed frame header", left()));
    if (rx_frame_.tag != op.tag)
      return Status::protocol(
          fmt::format("ring: peer {} (left) sent message {:#x} where {:#x} was expected", left(),
                      rx_frame_.tag, op.tag));
    if (rx_frame_.bytes > op.buffer.size())
      return Status::protocol(fmt::format(
          "ring: peer {} (left) sent {} bytes for message {:#x}, more than the {} expected", left(),
          rx_frame_.bytes, op.tag, op.buffer.size()));
    return Status::ok();
  }

  static std::string closed_message(uint32_t peer, const char* side) {
    return fmt::format("ring: peer {} ({}) closed the connection", peer, side);
  }
  static std::string io_message(const char* what, uint32_t peer, const char* side, int err) {
    if (err == ECONNRESET || err == EPIPE) return closed_message(peer, side);
    return fmt::format("ring: {} peer {} ({}) failed: {}", what, peer, side, std::strerror(err));
  }

  Status check(Status st) { return st.is_ok() ? st : fail(std::move(st)); }

  // Poisons the channel (the first failure wins) and shuts both connections down,
  // so that the neighbors' waits end now rather than at their deadlines.
  Status fail(Status why) {
    if (failure_.is_ok()) {
      failure_ = std::move(why);
      ::shutdown(left_fd_, SHUT_RDWR);
      ::shutdown(right_fd_, SHUT_RDWR);
    }
    return failure_;
  }

  int left_fd_;   // we read
  int right_fd_;  // we write
  TrafficCounters* traffic_;
  std::chrono::microseconds busy_poll_;
  Status failure_;
  ChannelTimes times_;
  bool spinning_ = false;  // in a wait's busy-poll: its system calls count as spin time

  std::deque<Send> sends_;  // the front one is partly written (sent_ bytes)
  size_t sent_ = 0;
  std::deque<Recv> recvs_;  // done ones first, then pending
  size_t next_recv_ = 0;    // the first receive not done yet

  std::vector<std::byte> stage_;
  size_t stage_begin_ = 0;
  size_t stage_end_ = 0;
  Frame rx_frame_;
  bool have_frame_ = false;  // rx_frame_ is the header of the message being filled
  size_t rx_filled_ = 0;
};

}  // namespace

std::unique_ptr<RingChannel> make_tcp_ring_channel(uint32_t left, int left_fd, uint32_t right,
                                                   int right_fd, TrafficCounters* traffic,
                                                   std::chrono::microseconds busy_poll) {
  return std::make_unique<TcpRingChannel>(left, left_fd, right, right_fd, traffic, busy_poll);
}

}  // namespace gossip::peers

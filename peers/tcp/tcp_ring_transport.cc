#include "peers/tcp/tcp_ring_transport.h"

#include "peers/ring_hello.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace gossip::peers {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;


constexpr uint32_t kFrameMagic = 0x31465247;  // "GRF1"
// How often a wait looks at its cancel flag.
constexpr auto kCancelPoll = std::chrono::milliseconds(20);
constexpr auto kConnectRetry = std::chrono::milliseconds(50);

struct Frame {
  uint32_t magic = kFrameMagic;
  uint32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(Frame) == 24);

// Waits on cv (with lock held) until done(), the deadline or the cancel flag.
template <class Done>
Status wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                  const WaitOptions& wait, Done done, const std::function<std::string()>& what) {
  while (!done()) {
    if (wait.cancel && wait.cancel->load(std::memory_order_relaxed))
      return Status::closed(what() + ": cancelled");
    const auto now = Clock::now();
    if (now >= wait.deadline) return Status::timeout(what());
    cv.wait_until(lock, std::min(wait.deadline, now + kCancelPoll));
  }
  return Status::ok();
}

void tune(tcp::socket& s, int buffer_bytes) {
  error_code ignored;
  s.set_option(tcp::no_delay(true), ignored);
  if (buffer_bytes > 0) {
    s.set_option(asio::socket_base::send_buffer_size(buffer_bytes), ignored);
    s.set_option(asio::socket_base::receive_buffer_size(buffer_bytes), ignored);
  }
}

// A completion condition that lets one system call move everything still to go.
auto all_of(size_t total) {
  return [total](const error_code& ec, size_t done) -> size_t { return ec ? 0 : total - done; };
}

// True when the peer has closed the connection (EOF is waiting), without consuming
// anything: frames it may have sent already stay in the socket.
bool closed_by_peer(tcp::socket& s) {
  char byte;
  return ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// Everything a channel's I/O touches. Socket operations run on the transport's I/O
// thread; the queues are shared with the caller under mu. Handlers hold a
// shared_ptr, so the state outlives a channel destroyed with operations in flight.
class ChannelState : public std::enable_shared_from_this<ChannelState> {
 public:
  ChannelState(asio::io_context& io, uint32_t left, uint32_t right, TrafficCounters* traffic)
      : io_(io), left_sock_(io), right_sock_(io), left_(left), right_(right), traffic_(traffic) {}

  tcp::socket& left_socket() { return left_sock_; }
  tcp::socket& right_socket() { return right_sock_; }

  Status post_send(uint64_t tag, std::span<const std::byte> data) {
    {
      std::lock_guard lock(mu_);
      if (!failure_.is_ok()) return failure_;
      sends_.push_back({Frame{.tag = tag, .bytes = data.size()}, data});
    }
    asio::post(io_, [self = shared_from_this()] { self->start_send(); });
    return Status::ok();
  }

  Status post_recv(uint64_t tag, std::span<std::byte> buffer) {
    {
      std::lock_guard lock(mu_);
      if (!failure_.is_ok()) return failure_;
      recvs_.push_back({tag, buffer});
    }
    asio::post(io_, [self = shared_from_this()] { self->start_recv(); });
    return Status::ok();
  }

  Result<size_t> wait_recv(const WaitOptions& wait) {
    std::unique_lock lock(mu_);
    if (recvs_.empty()) return Status::invalid("ring: wait_recv with no receive posted");
    Status st = wait_until(
        lock, cv_, wait, [&] { return !failure_.is_ok() || recvs_.front().done; },
        [&] { return fmt::format("ring: no message from peer {} (left) in time", left_); });
    if (!failure_.is_ok()) return failure_;
    if (!st.is_ok()) {
      lock.unlock();
      fail(st);
      return st;
    }
    const size_t bytes = recvs_.front().bytes;
    recvs_.pop_front();
    --next_recv_;
    return bytes;
  }

  Status wait_sends(const WaitOptions& wait) {
    std::unique_lock lock(mu_);
    Status st = wait_until(
        lock, cv_, wait, [&] { return !failure_.is_ok() || sends_.empty(); },
        [&] { return fmt::format("ring: peer {} (right) did not take our messages in time", right_); });
    if (!failure_.is_ok()) return failure_;
    if (!st.is_ok()) {
      lock.unlock();
      fail(st);
    }
    return st;
  }

  // Poisons the channel (first failure wins) and closes both sockets, which aborts
  // whatever is in flight.
  void fail(const Status& why) {
    {
      std::lock_guard lock(mu_);
      if (failure_.is_ok()) failure_ = why;
    }
    cv_.notify_all();
    asio::post(io_, [self = shared_from_this()] {
      error_code ignored;
      self->left_sock_.close(ignored);
      self->right_sock_.close(ignored);
    });
  }

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

  std::string io_message(const char* what, uint32_t peer, const char* side, const error_code& ec) {
    if (ec == asio::error::eof || ec == asio::error::connection_reset)
      return fmt::format("ring: peer {} ({}) closed the connection", peer, side);
    return fmt::format("ring: {} peer {} ({}) failed: {}", what, peer, side, ec.message());
  }

  // I/O thread only from here on.
  void start_send() {
    if (writing_) return;
    Send* op = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!failure_.is_ok() || sends_.empty()) return;
      op = &sends_.front();  // stays put until popped below
    }
    writing_ = true;
    const std::array<asio::const_buffer, 2> bufs{asio::buffer(&op->frame, sizeof(Frame)),
                                                 asio::buffer(op->data.data(), op->data.size())};
    // Asio's default completion condition hands the kernel at most 64 KiB per call;
    // asking for all that is left cuts the system calls of a 1 MiB chunk from ~17 to ~1.
    asio::async_write(right_sock_, bufs, all_of(sizeof(Frame) + op->data.size()),
                      [self = shared_from_this()](error_code ec, size_t n) {
      self->writing_ = false;
      if (ec) return self->fail(Status::io_error(self->io_message("sending to", self->right_, "right", ec)));
      size_t payload = 0;
      {
        std::lock_guard lock(self->mu_);
        payload = self->sends_.front().data.size();
        self->sends_.pop_front();
      }
      if (self->traffic_) self->traffic_->count_sent(self->right_, payload, n);
      self->cv_.notify_all();
      self->start_send();
    });
  }

  void start_recv() {
    if (reading_) return;
    {
      std::lock_guard lock(mu_);
      if (!failure_.is_ok() || next_recv_ >= recvs_.size()) return;
    }
    reading_ = true;
    asio::async_read(left_sock_, asio::buffer(&rx_frame_, sizeof(Frame)),
                     [self = shared_from_this()](error_code ec, size_t) { self->on_frame(ec); });
  }

  void on_frame(const error_code& ec) {
    if (ec) {
      reading_ = false;
      return fail(Status::io_error(io_message("receiving from", left_, "left", ec)));
    }
    std::span<std::byte> dst;
    Status bad;
    {
      std::lock_guard lock(mu_);
      const Recv& op = recvs_[next_recv_];
      if (rx_frame_.magic != kFrameMagic || rx_frame_.reserved != 0)
        bad = Status::protocol(fmt::format("ring: peer {} (left) sent a malformed frame header", left_));
      else if (rx_frame_.tag != op.tag)
        bad = Status::protocol(fmt::format("ring: peer {} (left) sent message {:#x} where {:#x} was expected",
                                           left_, rx_frame_.tag, op.tag));
      else if (rx_frame_.bytes > op.buffer.size())
        bad = Status::protocol(fmt::format("ring: peer {} (left) sent {} bytes for message {:#x}, more than the {} expected",
                                           left_, rx_frame_.bytes, op.tag, op.buffer.size()));
      else
        dst = op.buffer.first(rx_frame_.bytes);
    }
    if (!bad.is_ok()) {
      reading_ = false;
      return fail(bad);
    }
    asio::async_read(left_sock_, asio::buffer(dst.data(), dst.size()), all_of(dst.size()),
                     [self = shared_from_this(), bytes = dst.size()](error_code ec, size_t) {
                       self->reading_ = false;
                       if (ec)
                         return self->fail(Status::io_error(self->io_message("receiving from", self->left_, "left", ec)));
                       {
                         std::lock_guard lock(self->mu_);
                         Recv& op = self->recvs_[self->next_recv_];
                         op.done = true;
                         op.bytes = bytes;
                         ++self->next_recv_;
                       }
                       if (self->traffic_) self->traffic_->count_recv(self->left_, bytes, bytes + sizeof(Frame));
                       self->cv_.notify_all();
                       self->start_recv();
                     });
  }

  asio::io_context& io_;
  tcp::socket left_sock_;   // we read
  tcp::socket right_sock_;  // we write
  uint32_t left_;
  uint32_t right_;
  TrafficCounters* traffic_;

  std::mutex mu_;
  std::condition_variable cv_;
  Status failure_;           // guarded by mu_
  std::deque<Send> sends_;   // guarded by mu_; the front one is on the wire
  std::deque<Recv> recvs_;   // guarded by mu_; done ones first, then pending
  size_t next_recv_ = 0;     // guarded by mu_: the first receive not done yet
  bool writing_ = false;     // I/O thread only
  bool reading_ = false;     // I/O thread only
  Frame rx_frame_;           // I/O thread only
};

class TcpRingChannel final : public RingChannel {
 public:
  TcpRingChannel(uint32_t left, uint32_t right, std::shared_ptr<ChannelState> state)
      : RingChannel(left, right), state_(std::move(state)) {}
  ~TcpRingChannel() override { state_->fail(Status::closed("ring: channel closed")); }

  Status post_send(uint64_t tag, std::span<const std::byte> data) override {
    return state_->post_send(tag, data);
  }
  Status post_recv(uint64_t tag, std::span<std::byte> buffer) override {
    return state_->post_recv(tag, buffer);
  }
  Result<size_t> wait_recv(const WaitOptions& wait) override { return state_->wait_recv(wait); }
  Status wait_sends(const WaitOptions& wait) override { return state_->wait_sends(wait); }

 private:
  std::shared_ptr<ChannelState> state_;
};

class TcpRingTransport final : public RingTransport {
 public:
  explicit TcpRingTransport(const RingTransportOptions& options)
      : options_(options), acceptor_(rendezvous_), work_(asio::make_work_guard(io_)) {}

  ~TcpRingTransport() override {
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Status start() {
    error_code ec;
    auto address = asio::ip::make_address(options_.listen_host, ec);
    if (ec) {  // a host name: its first address
      tcp::resolver resolver(rendezvous_);
      const auto found = resolver.resolve(options_.listen_host, "", ec);
      if (ec || found.empty())
        return Status::invalid(fmt::format("ring: cannot resolve listen host '{}': {}", options_.listen_host,
                                           ec ? ec.message() : "no address"));
      address = found.begin()->endpoint().address();
    }
    const tcp::endpoint ep(address, options_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec && options_.socket_buffer_bytes > 0)
      acceptor_.set_option(asio::socket_base::receive_buffer_size(options_.socket_buffer_bytes), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return Status::io_error(fmt::format("ring: cannot listen on {}:{}: {}", options_.listen_host,
                                          options_.port, ec.message()));
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "ring-tcp-io");
      io_.run();
    });
    return Status::ok();
  }

  const char* name() const override { return "tcp"; }
  uint16_t port() const override { return port_; }

  Result<std::unique_ptr<RingChannel>> connect(const RingEnds& ends,
                                               const WaitOptions& wait) override;

 private:
  RingTransportOptions options_;
  // The rendezvous runs on the caller's thread, on its own io_context; the finished
  // sockets are handed to io_, whose thread runs every channel's I/O.
  asio::io_context rendezvous_;
  tcp::acceptor acceptor_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  uint16_t port_ = 0;
};

Result<std::unique_ptr<RingChannel>> TcpRingTransport::connect(const RingEnds& ends,
                                                               const WaitOptions& wait) {
  error_code ec;
  tcp::resolver resolver(rendezvous_);
  const auto found = resolver.resolve(ends.right_host, std::to_string(ends.right_port), ec);
  if (ec || found.empty())
    return Status::invalid(fmt::format("ring: cannot resolve peer {}'s host '{}': {}", ends.right,
                                       ends.right_host, ec.message()));
  const tcp::endpoint right_ep = *found.begin();

  rendezvous_.restart();
  bool stop = false;
  bool right_done = false;
  bool left_done = false;
  const RingHello out{.from = ends.self, .to = ends.right, .session = ends.session};
  RingHello in;
  tcp::socket right(rendezvous_);
  tcp::socket left(rendezvous_);
  tcp::socket candidate(rendezvous_);
  asio::steady_timer retry(rendezvous_);
  std::string right_error = "no answer";
  std::string refused;  // why the last stranger was turned away, for the timeout's message

  // Connect to the right neighbor, retrying until the deadline (it may be restarting).
  std::function<void()> connect_right = [&] {
    error_code ignored;
    right.close(ignored);
    right.open(right_ep.protocol(), ignored);
    tune(right, options_.socket_buffer_bytes);
    right.async_connect(right_ep, [&](error_code ec) {
      if (stop) return;
      if (ec) {
        right_error = ec.message();
        retry.expires_after(kConnectRetry);
        retry.async_wait([&](error_code ec) {
          if (!ec && !stop) connect_right();
        });
        return;
      }
      asio::async_write(right, asio::buffer(&out, sizeof out), [&](error_code ec, size_t) {
        if (stop) return;
        if (ec) {
          right_error = ec.message();
          return connect_right();
        }
        right_done = true;
      });
    });
  };

  // Accept until the left neighbor of this session says hello; refuse anyone else.
  std::function<void()> accept_left = [&] {
    error_code ignored;
    candidate.close(ignored);
    acceptor_.async_accept(candidate, [&](error_code ec) {
      if (stop) return;
      if (ec) {
        spdlog::warn("ring: accept failed: {}", ec.message());
        return accept_left();
      }
      asio::async_read(candidate, asio::buffer(&in, sizeof in), [&](error_code ec, size_t) {
        if (stop) return;
        std::string why = ec ? ec.message() : ring_hello_refusal(in, ends.self, ends.left, ends.session);
        // A connection the neighbor gave up on (it timed out an earlier attempt) may
        // wait in the backlog: take the next one.
        if (why.empty() && closed_by_peer(candidate))
          why = fmt::format("node {} had closed this connection already", in.from);
        if (!why.empty()) {
          spdlog::warn("ring: refused a connection: {}", why);
          refused = why;
          return accept_left();
        }
        left = std::move(candidate);
        candidate = tcp::socket(rendezvous_);
        tune(left, options_.socket_buffer_bytes);
        left_done = true;
      });
    });
  };

  connect_right();
  accept_left();
  Status failure;
  while (!(right_done && left_done)) {
    if (wait.cancel && wait.cancel->load(std::memory_order_relaxed)) {
      failure = Status::closed("ring: connecting cancelled");
      break;
    }
    const auto now = Clock::now();
    if (now >= wait.deadline) {
      failure = Status::timeout(
          !right_done ? fmt::format("ring: could not connect to peer {} (right) at {}:{}: {}", ends.right,
                                    ends.right_host, ends.right_port, right_error)
                      : fmt::format("ring: peer {} (left) did not connect in time{}", ends.left,
                                    refused.empty() ? "" : " (refused a connection: " + refused + ")"));
      break;
    }
    rendezvous_.run_one_until(std::min(wait.deadline, now + kCancelPoll));
    if (rendezvous_.stopped()) rendezvous_.restart();
  }

  // Abort whatever is left and let the aborted handlers run (they see `stop`).
  stop = true;
  acceptor_.cancel(ec);
  retry.cancel();
  candidate.close(ec);
  if (!right_done) right.close(ec);
  rendezvous_.restart();
  rendezvous_.run();
  if (!failure.is_ok()) return failure;

  // Hand the two connections to the I/O thread's context.
  auto state = std::make_shared<ChannelState>(io_, ends.left, ends.right, options_.traffic);
  const auto adopt = [&](tcp::socket& from, tcp::socket& to) -> Status {
    const int fd = ::dup(from.native_handle());
    if (fd < 0) return Status::io_error(fmt::format("ring: dup: {}", std::strerror(errno)));
    error_code ec;
    to.assign(from.local_endpoint().protocol(), fd, ec);
    if (ec) {
      ::close(fd);
      return Status::io_error(fmt::format("ring: adopting a socket: {}", ec.message()));
    }
    from.close(ec);
    return Status::ok();
  };
  GOSSIP_RETURN_IF_ERROR(adopt(left, state->left_socket()));
  GOSSIP_RETURN_IF_ERROR(adopt(right, state->right_socket()));
  spdlog::info("ring: connected, left peer {}, right peer {} at {}:{}", ends.left, ends.right,
               ends.right_host, ends.right_port);
  return std::unique_ptr<RingChannel>(new TcpRingChannel(ends.left, ends.right, std::move(state)));
}

}  // namespace

Result<std::unique_ptr<RingTransport>> make_tcp_ring_transport(const RingTransportOptions& options) {
  auto t = std::make_unique<TcpRingTransport>(options);
  GOSSIP_RETURN_IF_ERROR(t->start());
  return std::unique_ptr<RingTransport>(std::move(t));
}

}  // namespace gossip::peers

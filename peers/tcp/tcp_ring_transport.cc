#include "peers/tcp/tcp_ring_transport.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cstring>
#include <functional>

#include "peers/ring_hello.h"
#include "peers/tcp/tcp_ring_channel.h"

namespace gossip::peers {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr auto kCancelPoll = std::chrono::milliseconds(20);
constexpr auto kConnectRetry = std::chrono::milliseconds(50);

void tune(tcp::socket& s, int buffer_bytes) {
  error_code ignored;
  s.set_option(tcp::no_delay(true), ignored);
  if (buffer_bytes > 0) {
    s.set_option(asio::socket_base::send_buffer_size(buffer_bytes), ignored);
    s.set_option(asio::socket_base::receive_buffer_size(buffer_bytes), ignored);
  }
}

// True when the peer has closed the connection (EOF is waiting), without consuming
// anything: frames it may have sent already stay in the socket.
bool closed_by_peer(tcp::socket& s) {
  char byte;
  return ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

class TcpRingTransport final : public RingTransport {
 public:
  explicit TcpRingTransport(const RingTransportOptions& options)
      : options_(options), acceptor_(rendezvous_) {}

  Status start() {
    error_code ec;
    auto address = asio::ip::make_address(options_.listen_host, ec);
    if (ec) {  // a host name: its first address
      tcp::resolver resolver(rendezvous_);
      const auto found = resolver.resolve(options_.listen_host, "", ec);
      if (ec || found.empty())
        return Status::invalid(fmt::format("ring: cannot resolve listen host '{}': {}",
                                           options_.listen_host, ec ? ec.message() : "no address"));
      address = found.begin()->endpoint().address();
    }
    const tcp::endpoint ep(address, options_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec && options_.socket_buffer_bytes > 0)
      acceptor_.set_option(asio::socket_base::receive_buffer_size(options_.socket_buffer_bytes),
                           ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return Status::io_error(fmt::format("ring: cannot listen on {}:{}: {}", options_.listen_host,
                                          options_.port, ec.message()));
    port_ = acceptor_.local_endpoint().port();
    return Status::ok();
  }

  const char* name() const override { return "tcp"; }
  uint16_t port() const override { return port_; }

  Result<std::unique_ptr<RingChannel>> connect(const RingEnds& ends,
                                               const WaitOptions& wait) override;

 private:
  RingTransportOptions options_;
  // The rendezvous runs on the caller's thread; the finished connections leave
  // Asio for the channel (peers/tcp/tcp_ring_channel.h), which its caller drives.
  asio::io_context rendezvous_;
  tcp::acceptor acceptor_;
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
  const RingHello out{.from = ends.self,
                      .to = ends.right,
                      .session = ends.right_session != 0 ? ends.right_session : ends.session};
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
        std::string why =
            ec ? ec.message() : ring_hello_refusal(in, ends.self, ends.left, ends.session);
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
    if (wait.cancelled()) {
      failure = Status::closed("ring: connecting cancelled");
      break;
    }
    const auto now = Clock::now();
    if (now >= wait.deadline) {
      failure = Status::timeout(
          !right_done
              ? fmt::format("ring: could not connect to peer {} (right) at {}:{}: {}", ends.right,
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

  // The channel owns descriptors of its own: Asio's sockets (and the rendezvous
  // context they belong to) may go before it does.
  const auto take = [](tcp::socket& from) -> Result<int> {
    const int fd = ::dup(from.native_handle());
    if (fd < 0) return Status::io_error(fmt::format("ring: dup: {}", std::strerror(errno)));
    error_code ignored;
    from.close(ignored);
    return fd;
  };
  auto left_fd = take(left);
  if (!left_fd.is_ok()) return left_fd.status();
  auto right_fd = take(right);
  if (!right_fd.is_ok()) {
    ::close(*left_fd);
    return right_fd.status();
  }
  spdlog::info("ring: connected, left peer {}, right peer {} at {}:{}", ends.left, ends.right,
               ends.right_host, ends.right_port);
  return make_tcp_ring_channel(ends.left, *left_fd, ends.right, *right_fd, options_.traffic);
}

}  // namespace

Result<std::unique_ptr<RingTransport>> make_tcp_ring_transport(
    const RingTransportOptions& options) {
  auto t = std::make_unique<TcpRingTransport>(options);
  GOSSIP_RETURN_IF_ERROR(t->start());
  return std::unique_ptr<RingTransport>(std::move(t));
}

}  // namespace gossip::peers

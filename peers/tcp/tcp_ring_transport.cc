#include "peers/tcp/tcp_ring_transport.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "base/refusals.h"
#include "peers/ring_hello.h"
#include "peers/tcp/tcp_ring_channel.h"

namespace gossip::peers {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// The peer is there but turned our hello away (closed without an answer): do not flood
// its log.
constexpr auto kRefusedRetry = std::chrono::milliseconds(500);
// A peer sends its hello as soon as it connects; a connection silent this long while
// this node listens is a stranger's (or a stuck peer's, which reconnects).
constexpr auto kHelloTimeout = std::chrono::seconds(2);
constexpr size_t kMaxHandshakes = 64;

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
  ~TcpRingTransport() override {
    // Strangers that connected and never spoke (a ring formed once hears nobody again);
    // not a partner whose hello waits unread for a rendezvous that will not come.
    error_code ignored;
    for (const Unheard& u : unheard_)
      if (u.socket.available(ignored) < sizeof(RingHello)) refuse_silent();
  }

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
  Result<std::vector<std::unique_ptr<RingChannel>>> connect_mesh(uint32_t self,
                                                                 const std::vector<MeshEnd>& ends,
                                                                 const WaitOptions& wait) override;

 private:
  struct Out {  // a peer we connect to and send to
    uint32_t peer;
    std::string host;
    uint16_t port;
    uint64_t session;  // what we present
    const char* side;  // for messages: "right", "partner"
  };
  struct In {  // a peer that connects to us, whose messages we receive
    uint32_t peer;
    uint64_t session;  // what it must present
    const char* side;
  };
  struct Fds {
    std::vector<int> in, out;  // in the order of ins and outs
    // The nonces this node answered each `in` with, and those each `out` answered with.
    std::vector<RingNonce> given, answered;
  };
  // Connects to every `outs` and accepts every `ins`, all by the deadline; connections
  // from anyone else are refused and logged, and the wait goes on.
  Result<Fds> rendezvous(uint32_t self, const std::vector<Out>& outs, const std::vector<In>& ins,
                         const WaitOptions& wait);

  RingTransportOptions options_;
  // The rendezvous runs on the caller's thread; the finished connections leave
  // Asio for the channel (peers/tcp/tcp_ring_channel.h), which its caller drives.
  asio::io_context rendezvous_;
  tcp::acceptor acceptor_;
  // Connections that said hello before this node was waiting for them (bounded).
  struct Parked {
    RingHello hello;
    std::unique_ptr<tcp::socket> socket;
  };
  static constexpr size_t kMaxParked = 16;
  std::deque<Parked> parked_;
  // Connections accepted but not heard when a rendezvous ended (bounded), with the
  // time they have left to say hello: the next rendezvous hears them, and the ones that
  // never do are refused then, or when the transport closes. The time counts only while
  // this node listens: one that a loaded machine holds up between two rendezvous must
  // not refuse a partner whose hello has been waiting in the socket all along.
  struct Unheard {
    tcp::socket socket;
    Clock::duration left;
  };
  std::deque<Unheard> unheard_;
  void keep_unheard(tcp::socket socket, Clock::duration left) {
    if (unheard_.size() >= kMaxParked) {
      refuse_silent();
      unheard_.pop_front();
    }
    unheard_.push_back({std::move(socket), left});
  }
  static void refuse_silent() {
    count_refusal(Refusal::kRingNoHello);
    spdlog::warn("ring: refused a connection: no hello within {} ms",
                 std::chrono::duration_cast<std::chrono::milliseconds>(kHelloTimeout).count());
  }
  uint16_t port_ = 0;
};

Result<TcpRingTransport::Fds> TcpRingTransport::rendezvous(uint32_t self,
                                                           const std::vector<Out>& outs,
                                                           const std::vector<In>& ins,
                                                           const WaitOptions& wait) {
  error_code ec;
  std::vector<tcp::endpoint> endpoints;
  for (const Out& o : outs) {
    tcp::resolver resolver(rendezvous_);
    const auto found = resolver.resolve(o.host, std::to_string(o.port), ec);
    if (ec || found.empty())
      return Status::invalid(fmt::format("ring: cannot resolve peer {}'s host '{}': {}", o.peer,
                                         o.host, ec.message()));
    endpoints.push_back(*found.begin());
  }

  rendezvous_.restart();
  bool stop = false;
  struct Link {
    std::unique_ptr<tcp::socket> socket;
    std::unique_ptr<asio::steady_timer> retry;
    RingHello hello;
    RingAnswer answer;
    bool done = false;
    std::string error = "no answer";
  };
  std::vector<Link> out_links(outs.size());
  std::vector<std::unique_ptr<tcp::socket>> in_sockets(ins.size());
  std::vector<RingNonce> given(ins.size());
  size_t outs_done = 0, ins_done = 0;
  std::string refused;  // why the last stranger was turned away, for the timeout's message
  // Connections accepted and not yet heard: each has kHelloTimeout to say hello, and
  // the listener goes on accepting meanwhile, so a stranger that connects and stays
  // silent holds up nobody (at most kMaxHandshakes wait at once: the oldest goes).
  struct Handshake {
    explicit Handshake(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;
    Clock::time_point hello_by{};
    RingHello hello;
    bool finished = false;
    bool timed_out = false;
  };
  std::deque<std::shared_ptr<Handshake>> handshakes;
  asio::steady_timer accept_retry(rendezvous_);

  // Connect to each peer we send to, retrying until the deadline (it may be restarting,
  // or not be waiting for us yet): say hello, then read its answer.
  std::function<void(size_t)> connect_out;
  const auto retry_out = [&](size_t i, std::chrono::milliseconds after) {
    out_links[i].retry->expires_after(after);
    out_links[i].retry->async_wait([&, i](error_code ec) {
      if (!ec && !stop) connect_out(i);
    });
  };
  connect_out = [&](size_t i) {
    Link& l = out_links[i];
    error_code ignored;
    l.socket->close(ignored);
    l.socket->open(endpoints[i].protocol(), ignored);
    tune(*l.socket, options_.socket_buffer_bytes);
    l.socket->async_connect(endpoints[i], [&, i](error_code ec) {
      Link& l = out_links[i];
      if (stop) return;
      if (ec) {
        l.error = ec.message();
        return retry_out(i, kConnectRetry);
      }
      asio::async_write(
          *l.socket, asio::buffer(&l.hello, sizeof l.hello), [&, i](error_code ec, size_t) {
            Link& l = out_links[i];
            if (stop) return;
            if (ec) {
              l.error = ec.message();
              return connect_out(i);
            }
            l.error = "no answer to the hello";
            asio::async_read(
                *l.socket, asio::buffer(&l.answer, sizeof l.answer), [&, i](error_code ec, size_t) {
                  Link& l = out_links[i];
                  if (stop) return;
                  if (ec) {
                    l.error = fmt::format(
                        "it closed the connection after the hello ({}): it "
                        "refused it (its log says why)",
                        ec.message());
                    return retry_out(i, kRefusedRetry);
                  }
                  if (std::string why = ring_answer_refusal(l.answer, outs[i].peer); !why.empty()) {
                    l.error = std::move(why);
                    return retry_out(i, kRefusedRetry);
                  }
                  l.done = true;
                  ++outs_done;
                });
          });
    });
  };

  // Accept until every peer we receive from said hello in its session; refuse anyone else.
  // Takes a connection that said hello: as the link of an expected peer; parked for a
  // later rendezvous when it is a well-formed hello to this node from a node this call
  // does not wait for (a partner that finished the previous rendezvous sooner and
  // already asks for the next one); refused otherwise.
  const auto admit = [&](const RingHello& hello, std::unique_ptr<tcp::socket> socket) {
    size_t slot = ins.size();
    bool expected = false;
    for (size_t i = 0; i < ins.size(); ++i)
      if (ins[i].peer == hello.from) {
        expected = true;
        if (!in_sockets[i]) slot = i;
      }
    std::string why;
    if (slot < ins.size()) why = ring_hello_refusal(hello, self, ins[slot].peer, ins[slot].session);
    // A connection the peer gave up on (it timed out an earlier attempt) may wait in
    // the backlog: take the next one.
    if (why.empty() && closed_by_peer(*socket))
      why = fmt::format("node {} had closed this connection already", hello.from);
    if (slot < ins.size() && why.empty()) {
      // The answer: 24 bytes into an empty socket buffer, which do not block.
      const RingAnswer answer{.nonce = fresh_ring_nonce()};
      error_code ec;
      asio::write(*socket, asio::buffer(&answer, sizeof answer), ec);
      if (!ec) {
        tune(*socket, options_.socket_buffer_bytes);
        in_sockets[slot] = std::move(socket);
        given[slot] = answer.nonce;
        ++ins_done;
        return;
      }
      why = fmt::format("node {} went before it heard the answer: {}", hello.from, ec.message());
    }
    const bool well_formed =
        hello.magic == kRingHelloMagic && hello.version == kRingVersion && hello.to == self;
    if (slot == ins.size() && !expected && well_formed && !closed_by_peer(*socket)) {
      if (parked_.size() >= kMaxParked) parked_.pop_front();
      spdlog::debug("ring: node {} connected ahead of its turn; kept for the next rendezvous",
                    hello.from);
      parked_.push_back({hello, std::move(socket)});
      return;
    }
    if (why.empty())
      why = slot < ins.size() ? std::string("?")
            : expected        ? fmt::format("node {} is connected already", hello.from)
            : ins.empty()     ? fmt::format("not a ring hello to node {}", self)
                          : ring_hello_refusal(hello, self, ins.front().peer, ins.front().session);
    count_refusal(Refusal::kRingBadHello);
    spdlog::warn("ring: refused a connection: {}", why);
    refused = why;
  };

  const auto finish = [&](const std::shared_ptr<Handshake>& h) {
    h->finished = true;
    error_code ignored;
    h->timer.cancel(ignored);
    std::erase(handshakes, h);
  };
  const auto hear = [&](const std::shared_ptr<Handshake>& h) {
    if (handshakes.size() >= kMaxHandshakes) {
      error_code ignored;
      handshakes.front()->socket.close(ignored);  // its read fails and refuses it
    }
    handshakes.push_back(h);
    h->timer.expires_at(h->hello_by);
    h->timer.async_wait([h](error_code ec) {
      error_code ignored;
      if (ec || h->finished) return;
      // The hello came as the time ran out (or this node heard the socket late): the
      // read completes with it.
      if (h->socket.available(ignored) >= sizeof h->hello) return;
      h->timed_out = true;
      h->socket.close(ignored);
    });
    asio::async_read(h->socket, asio::buffer(&h->hello, sizeof h->hello),
                     [&, h](error_code ec, size_t) {
                       if (stop) return;
                       finish(h);
                       if (ec && h->timed_out) {
                         refuse_silent();
                         refused = "no hello in time";
                         return;
                       }
                       if (ec) {
                         count_refusal(Refusal::kRingBadHello);
                         refused = ec.message();
                         spdlog::warn("ring: refused a connection: {}", refused);
                         return;
                       }
                       admit(h->hello, std::make_unique<tcp::socket>(std::move(h->socket)));
                     });
  };
  std::function<void()> accept_in = [&] {
    auto h = std::make_shared<Handshake>(rendezvous_);
    acceptor_.async_accept(h->socket, [&, h](error_code ec) {
      if (stop) {
        // Accepted as this rendezvous ended: heard in the next one (a partner early
        // for it), not dropped.
        if (!ec) keep_unheard(std::move(h->socket), kHelloTimeout);
        return;
      }
      if (ec) {
        // Out of descriptors, say: try again shortly rather than spin.
        spdlog::warn("ring: accept failed: {}", ec.message());
        accept_retry.expires_after(kConnectRetry);
        accept_retry.async_wait([&](error_code ec) {
          if (!ec && !stop) accept_in();
        });
        return;
      }
      h->hello_by = Clock::now() + kHelloTimeout;
      hear(h);
      if (ins_done < ins.size()) accept_in();
    });
  };

  for (size_t i = 0; i < outs.size(); ++i) {
    out_links[i].socket = std::make_unique<tcp::socket>(rendezvous_);
    out_links[i].retry = std::make_unique<asio::steady_timer>(rendezvous_);
    out_links[i].hello = RingHello{.from = self, .to = outs[i].peer, .session = outs[i].session};
    connect_out(i);
  }
  if (!ins.empty()) {
    std::deque<Parked> parked = std::move(parked_);
    parked_.clear();
    for (Parked& p : parked) admit(p.hello, std::move(p.socket));
    std::deque<Unheard> unheard = std::move(unheard_);
    unheard_.clear();
    for (Unheard& u : unheard) {
      auto h = std::make_shared<Handshake>(rendezvous_);
      h->socket = std::move(u.socket);
      h->hello_by = Clock::now() + u.left;
      hear(h);
    }
    if (ins_done < ins.size()) accept_in();
  }
  Status failure;
  while (outs_done < outs.size() || ins_done < ins.size()) {
    if (wait.cancelled()) {
      failure = Status::closed("ring: connecting cancelled");
      break;
    }
    const auto now = Clock::now();
    if (now >= wait.deadline) {
      for (size_t i = 0; i < outs.size() && failure.is_ok(); ++i)
        if (!out_links[i].done)
          failure = Status::timeout(
              fmt::format("ring: could not connect to peer {} ({}) at {}:{}: {}", outs[i].peer,
                          outs[i].side, outs[i].host, outs[i].port, out_links[i].error));
      for (size_t i = 0; i < ins.size() && failure.is_ok(); ++i)
        if (!in_sockets[i])
          failure = Status::timeout(
              fmt::format("ring: peer {} ({}) did not connect in time{}", ins[i].peer, ins[i].side,
                          refused.empty() ? "" : " (refused a connection: " + refused + ")"));
      break;
    }
    rendezvous_.run_one_until(std::min(wait.deadline, now + kCancelPoll));
    if (rendezvous_.stopped()) rendezvous_.restart();
  }

  // Abort whatever is left and let the aborted handlers run (they see `stop`).
  stop = true;
  acceptor_.cancel(ec);
  accept_retry.cancel(ec);
  for (const auto& h : handshakes) {
    // Not heard yet: heard in the next rendezvous (a partner early for it).
    h->finished = true;
    h->timer.cancel(ec);
    h->socket.cancel(ec);
  }
  for (Link& l : out_links) {
    l.retry->cancel();
    if (!l.done) l.socket->close(ec);
  }
  rendezvous_.restart();
  rendezvous_.run();
  for (const auto& h : handshakes)
    if (h->socket.is_open())
      keep_unheard(std::move(h->socket),
                   std::max<Clock::duration>(h->hello_by - Clock::now(), Clock::duration::zero()));
  handshakes.clear();
  if (!failure.is_ok()) return failure;

  // The channels own descriptors of their own: Asio's sockets (and the rendezvous
  // context they belong to) may go before they do.
  Fds fds;
  const auto take = [&](tcp::socket& from, std::vector<int>& into) -> Status {
    const int fd = ::dup(from.native_handle());
    if (fd < 0) return Status::io_error(fmt::format("ring: dup: {}", std::strerror(errno)));
    error_code ignored;
    from.close(ignored);
    into.push_back(fd);
    return Status::ok();
  };
  Status st;
  for (size_t i = 0; i < ins.size() && st.is_ok(); ++i) st = take(*in_sockets[i], fds.in);
  for (size_t i = 0; i < outs.size() && st.is_ok(); ++i) st = take(*out_links[i].socket, fds.out);
  fds.given = std::move(given);
  for (const Link& l : out_links) fds.answered.push_back(l.answer.nonce);
  if (!st.is_ok()) {
    for (int fd : fds.in) ::close(fd);
    for (int fd : fds.out) ::close(fd);
    return st;
  }
  return fds;
}

Result<std::unique_ptr<RingChannel>> TcpRingTransport::connect(const RingEnds& ends,
                                                               const WaitOptions& wait) {
  const Out right{ends.right, ends.right_host, ends.right_port,
                  ends.right_session != 0 ? ends.right_session : ends.session, "right"};
  const In left{ends.left, ends.session, "left"};
  auto fds = rendezvous(ends.self, {right}, {left}, wait);
  if (!fds.is_ok()) return fds.status();
  spdlog::info("ring: connected, left peer {}, right peer {} at {}:{}", ends.left, ends.right,
               ends.right_host, ends.right_port);
  auto channel = make_tcp_ring_channel(ends.left, fds->in[0], ends.right, fds->out[0],
                                       options_.traffic, options_.busy_poll);
  channel->set_nonces(fds->given[0], fds->answered[0]);
  return channel;
}

Result<std::vector<std::unique_ptr<RingChannel>>> TcpRingTransport::connect_mesh(
    uint32_t self, const std::vector<MeshEnd>& ends, const WaitOptions& wait) {
  std::vector<Out> outs;
  std::vector<In> ins;
  for (const MeshEnd& e : ends) {
    outs.push_back({e.peer, e.host, e.port, e.peer_session, "partner"});
    ins.push_back({e.peer, e.session, "partner"});
  }
  auto fds = rendezvous(self, outs, ins, wait);
  if (!fds.is_ok()) return fds.status();
  std::vector<std::unique_ptr<RingChannel>> channels;
  for (size_t i = 0; i < ends.size(); ++i) {
    channels.push_back(make_tcp_ring_channel(ends[i].peer, fds->in[i], ends[i].peer, fds->out[i],
                                             options_.traffic, options_.busy_poll));
    channels.back()->set_nonces(fds->given[i], fds->answered[i]);
  }
  spdlog::debug("ring: linked to {} partner(s)", ends.size());
  return channels;
}

}  // namespace

Result<std::unique_ptr<RingTransport>> make_tcp_ring_transport(
    const RingTransportOptions& options) {
  auto t = std::make_unique<TcpRingTransport>(options);
  GOSSIP_RETURN_IF_ERROR(t->start());
  return std::unique_ptr<RingTransport>(std::move(t));
}

}  // namespace gossip::peers

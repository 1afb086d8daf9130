#include "daemon/metrics_server.h"

#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <map>
#include <optional>
#include <thread>

namespace gossip::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr size_t kHeaderLimit = 8 << 10;
// A scraper sends its whole request at once: the request line and headers get a short
// deadline, counted from the connect or from the last response (an idle keep-alive
// connection is closed as soon, and Prometheus opens another).
constexpr auto kHeaderTimeout = std::chrono::seconds(2);
constexpr auto kWriteTimeout = std::chrono::seconds(10);
constexpr size_t kMaxConnections = 32;
constexpr size_t kMaxPerAddress = 8;
}  // namespace

namespace {
class MetricsConnection;
}  // namespace

// Everything below runs on the server's one thread: no locks.
struct MetricsServer::Impl {
  std::function<std::string()> render;  // declared before io: alive while handlers die
  // The connections that count against the limits, oldest first; one that is evicted
  // leaves the list at once (its handlers end it later). Before io too: the connections
  // still open when the server stops leave them as io destroys their handlers.
  std::list<MetricsConnection*> live;
  std::map<asio::ip::address, size_t> per_address;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  uint16_t port = 0;

  void accept();
  // Makes room for a connection from `from`: when the server or that address is at its
  // limit, the longest-waiting connection that has not sent a whole request (of that
  // address, when it is the address's limit) is closed. False: no room (every
  // connection is answering one).
  bool make_room(const asio::ip::address& from);
};

namespace {

class MetricsConnection : public std::enable_shared_from_this<MetricsConnection> {
 public:
  MetricsConnection(tcp::socket socket, asio::ip::address from, MetricsServer::Impl& server)
      : stream_(std::move(socket)), from_(std::move(from)), server_(server) {
    server_.live.push_back(this);
    at_ = std::prev(server_.live.end());
    ++server_.per_address[from_];
  }
  ~MetricsConnection() { forget(); }

  const asio::ip::address& from() const { return from_; }
  bool waiting() const { return waiting_; }

  // Closed to make room: a slow or idle client loses its place to a new one.
  void evict() {
    forget();
    beast::error_code ignored;
    stream_.socket().close(ignored);  // its pending read ends with operation_aborted
  }

  void read() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(0);  // a scrape has no body
    stream_.expires_after(kHeaderTimeout);
    waiting_ = true;
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

 private:
  void forget() {
    if (!listed_) return;
    listed_ = false;
    server_.live.erase(at_);
    if (--server_.per_address[from_] == 0) server_.per_address.erase(from_);
  }

  void on_read(beast::error_code ec) {
    waiting_ = false;
    if (ec == http::error::end_of_stream) return close();
    if (ec) {
      // A request we could not parse gets a 400; a timeout or a reset just ends.
      if (ec.category() == http::make_error_code(http::error::bad_target).category())
        return respond(http::status::bad_request, fmt::format("bad request: {}\n", ec.message()),
                       false, true);
      return close();
    }
    const auto& req = parser_->get();
    std::string_view target(req.target().data(), req.target().size());
    target = target.substr(0, target.find('?'));
    // /healthz: the liveness probe's, answered without rendering the metrics.
    if (target != "/metrics" && target != "/healthz")
      return respond(http::status::not_found,
                     "not found; metrics are at /metrics, liveness at /healthz\n",
                     req.keep_alive());
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res_.set(http::field::allow, "GET, HEAD");
      return respond(http::status::method_not_allowed, "only GET and HEAD\n", req.keep_alive());
    }
    if (target == "/healthz")
      return respond(http::status::ok, "ok\n", req.keep_alive(), false, "text/plain; charset=utf-8",
                     req.method() == http::verb::head);
    respond(http::status::ok, server_.render(), req.keep_alive(), false,
            "text/plain; version=0.0.4; charset=utf-8", req.method() == http::verb::head);
  }

  void respond(http::status status, std::string body, bool keep_alive, bool malformed = false,
               const char* type = "text/plain; charset=utf-8", bool head = false) {
    res_.result(status);
    res_.version(11);
    res_.set(http::field::server, "gossipd");
    res_.set(http::field::content_type, type);
    res_.keep_alive(keep_alive && !malformed);
    res_.body() = std::move(body);
    res_.prepare_payload();
    if (head) res_.body().clear();  // Content-Length stays that of the GET
    stream_.expires_after(kWriteTimeout);
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      const bool again = !ec && self->res_.keep_alive();
      self->res_ = {};
      if (again) return self->read();
      self->close();
    });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  beast::tcp_stream stream_;
  asio::ip::address from_;
  MetricsServer::Impl& server_;
  std::list<MetricsConnection*>::iterator at_;
  bool listed_ = true;
  bool waiting_ = false;  // for a whole request (its line and headers)
  beast::flat_buffer buffer_{kHeaderLimit};
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> res_;
};

}  // namespace

bool MetricsServer::Impl::make_room(const asio::ip::address& from) {
  const auto mine = per_address.find(from);
  const bool address_full = mine != per_address.end() && mine->second >= kMaxPerAddress;
  if (!address_full && live.size() < kMaxConnections) return true;
  // The oldest first: a slow client that keeps opening connections evicts its own.
  for (MetricsConnection* c : live)
    if (c->waiting() && (!address_full || c->from() == from)) {
      c->evict();
      return address_full || live.size() < kMaxConnections || make_room(from);
    }
  return false;
}

void MetricsServer::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      beast::error_code peer_ec;
      const auto from = socket.remote_endpoint(peer_ec).address();
      if (peer_ec || !make_room(from)) {
        beast::error_code ignored;
        socket.close(ignored);  // a flood of scrapers must not grow us without bound
      } else {
        std::make_shared<MetricsConnection>(std::move(socket), from, *this)->read();
      }
    }
    accept();
  });
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t MetricsServer::port() const { return impl_->port; }

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, uint16_t port,
                                                            std::function<std::string()> render) {
  auto impl = std::make_unique<Impl>();
  impl->render = std::move(render);
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    return Status::invalid(
        fmt::format("metrics: '{}' is not an IP address: {}", host, ec.message()));
  const tcp::endpoint ep(address, port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status::io_error(
        fmt::format("metrics: cannot listen on {}:{}: {}", host, port, ec.message()));
  impl->port = impl->acceptor.local_endpoint().port();
  impl->accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    pthread_setname_np(pthread_self(), "metrics");
    raw->io.run();
  });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

}  // namespace gossip::daemon

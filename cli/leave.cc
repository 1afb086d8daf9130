#include "cli/leave.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <zmq.hpp>

#include "cli/status.h"
#include "proto/ipc.h"

namespace gossip::cli {
namespace {

namespace ipc = proto::ipc;

struct LeaveOptions {
  std::string node = "ipc:///run/gossipd/gossipd-0.sock";
  double timeout_s = 30;
};

// The daemon's answer (the reason it gives its trainers), once it has gone: its socket
// is unlinked as it stops.
Result<std::string> leave(const std::string& endpoint, std::chrono::milliseconds timeout) {
  const std::string path = endpoint.substr(6);  // ipc_endpoint_of gives ipc://PATH
  if (!std::filesystem::exists(path))
    return Status::not_found(fmt::format(
        "no gossipd socket at {}: is gossipd running on this host, with this --run-dir and id?",
        path));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string reason;
  try {
    zmq::context_t context(1);
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.connect(endpoint);
    const std::string request = ipc::encode(ipc::Leave{});
    if (!socket.send(zmq::buffer(request), zmq::send_flags::dontwait))
      return Status::io_error(fmt::format("cannot send to {}", endpoint));
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0)
      return Status::timeout(fmt::format("no answer from the daemon at {} in {:.0f} s", endpoint,
                                         std::chrono::duration<double>(timeout).count()));
    zmq::message_t answer;
    if (!socket.recv(answer, zmq::recv_flags::dontwait))
      return Status::io_error(fmt::format("no answer from {}", endpoint));
    auto m = ipc::decode(answer.data(), answer.size());
    if (!m) return m.status().with_context("the daemon's answer");
    if (auto* e = std::get_if<ipc::Error>(&*m)) return Status::invalid(e->message);
    auto* s = std::get_if<ipc::Shutdown>(&*m);
    if (!s)
      return Status::protocol(fmt::format(
          "the daemon answered '{}', not shutdown (an older gossipd?)", ipc::message_name(*m)));
    reason = s->reason;
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("{}: {}", endpoint, e.what()));
  }
  while (std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::timeout(
          fmt::format("the daemon said '{}' but was still running after {:.0f} s", reason,
                      std::chrono::duration<double>(timeout).count()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return reason;
}

}  // namespace

Subcommand add_leave_command(CLI::App& parent) {
  auto o = std::make_shared<LeaveOptions>();
  CLI::App* app = parent.add_subcommand(
      "leave", "The node leaves its cluster in order: its peers go on without it at once");
  app->add_option("--node", o->node,
                  "The daemon's IPC endpoint (ipc://RUN_DIR/gossipd-ID.sock) or socket path")
      ->capture_default_str();
  app->add_option("--timeout", o->timeout_s, "Seconds to wait for the daemon to stop")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  return Subcommand{app, [o] {
                      const auto timeout =
                          std::chrono::milliseconds(static_cast<int64_t>(o->timeout_s * 1000.0));
                      auto r = leave(ipc_endpoint_of(o->node), timeout);
                      if (!r) {
                        std::fprintf(stderr, "gossipctl leave: %s\n", r.status().message().c_str());
                        return kExitFailure;
                      }
                      std::printf("%s\n", r->c_str());
                      return kExitOk;
                    }};
}

}  // namespace gossip::cli

#include "cli/leave.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/inspect.h"
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
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto m = ask_daemon(endpoint, ipc::Leave{}, timeout);
  if (!m) return m.status();
  auto* s = std::get_if<ipc::Shutdown>(&*m);
  if (!s)
    return Status::protocol(fmt::format(
        "the daemon answered '{}', not shutdown (an older gossipd?)", ipc::message_name(*m)));
  const std::string reason = s->reason;
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

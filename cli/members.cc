#include "cli/members.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/inspect.h"
#include "cli/status.h"
#include "proto/ipc.h"

namespace gossip::cli {
namespace {

namespace ipc = proto::ipc;

struct PeerCommandOptions {
  uint32_t peer = 0;
  std::string node = "ipc:///run/gossipd/gossipd-0.sock";
  double timeout_s = 10;
};

// Sends `ask` (a Ban or a Forget) to the node; ok once the daemon echoes it.
template <typename Ask>
Status ask_about_peer(const PeerCommandOptions& o, const Ask& ask) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000.0));
  auto m = ask_daemon(ipc_endpoint_of(o.node), ask, timeout);
  if (!m) return m.status();
  if (auto* e = std::get_if<ipc::Error>(&*m)) return Status::invalid(e->message);
  auto* echo = std::get_if<Ask>(&*m);
  if (!echo || echo->peer != o.peer)
    return Status::protocol(fmt::format("the daemon answered '{}', not the {} (an older gossipd?)",
                                        ipc::message_name(*m), ipc::message_name(ask)));
  return Status::ok();
}

template <typename Ask>
Subcommand add_peer_command(CLI::App& parent, const char* name, const char* help,
                            const char* done) {
  auto o = std::make_shared<PeerCommandOptions>();
  CLI::App* app = parent.add_subcommand(name, help);
  app->add_option("ID", o->peer, "The peer's node id")->required();
  app->add_option("--node", o->node,
                  "The daemon's IPC endpoint (ipc://RUN_DIR/gossipd-ID.sock) or socket path")
      ->capture_default_str();
  app->add_option("--timeout", o->timeout_s, "Seconds to wait for the daemon's answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  return Subcommand{app, [o, name, done] {
                      if (Status st = ask_about_peer(*o, Ask{o->peer}); !st) {
                        std::fprintf(stderr, "gossipctl %s: %s\n", name, st.message().c_str());
                        return kExitFailure;
                      }
                      std::printf("node %u %s %s\n", o->peer, done, o->node.c_str());
                      return kExitOk;
                    }};
}

}  // namespace

Subcommand add_ban_command(CLI::App& parent) {
  return add_peer_command<ipc::Ban>(
      parent, "ban", "Ban a peer on a running node (CURVE): its key refused, nothing sent to it",
      "is banned on");
}

Subcommand add_forget_command(CLI::App& parent) {
  return add_peer_command<ipc::Forget>(
      parent, "forget",
      "Forget a node gone for good: it no longer counts toward the members' majority (once a "
      "majority of them accept)",
      "is forgotten by the members, asked through");
}

}  // namespace gossip::cli

#include "cli/ban.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/inspect.h"
#include "cli/status.h"
#include "proto/ipc.h"

namespace gossip::cli {
namespace {

namespace ipc = proto::ipc;

struct BanOptions {
  uint32_t peer = 0;
  std::string node = "ipc:///run/gossipd/gossipd-0.sock";
  double timeout_s = 10;
};

Status ban(const BanOptions& o) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000.0));
  auto m = ask_daemon(ipc_endpoint_of(o.node), ipc::Ban{o.peer}, timeout);
  if (!m) return m.status();
  if (auto* e = std::get_if<ipc::Error>(&*m)) return Status::invalid(e->message);
  auto* b = std::get_if<ipc::Ban>(&*m);
  if (!b || b->peer != o.peer)
    return Status::protocol(fmt::format("the daemon answered '{}', not the ban (an older gossipd?)",
                                        ipc::message_name(*m)));
  return Status::ok();
}

}  // namespace

Subcommand add_ban_command(CLI::App& parent) {
  auto o = std::make_shared<BanOptions>();
  CLI::App* app = parent.add_subcommand(
      "ban", "Ban a peer on a running node (CURVE): its key refused, nothing sent to it");
  app->add_option("ID", o->peer, "The peer's node id")->required();
  app->add_option("--node", o->node,
                  "The daemon's IPC endpoint (ipc://RUN_DIR/gossipd-ID.sock) or socket path")
      ->capture_default_str();
  app->add_option("--timeout", o->timeout_s, "Seconds to wait for the daemon's answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  return Subcommand{app, [o] {
                      if (Status st = ban(*o); !st) {
                        std::fprintf(stderr, "gossipctl ban: %s\n", st.message().c_str());
                        return kExitFailure;
                      }
                      std::printf("node %u is banned on %s\n", o->peer, o->node.c_str());
                      return kExitOk;
                    }};
}

}  // namespace gossip::cli

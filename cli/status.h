#pragma once
// `gossipctl status`: asks one node's daemon, over its IPC socket, what it is doing
// (node, strategy, round, step, attached trainers, traffic per peer, when each peer
// was last heard from) and prints a table, or one JSON object with --json.

#include <string>

#include "cli/command.h"
#include "gossip/client.h"

namespace gossip::cli {

struct StatusOptions {
  std::string node = "ipc:///run/gossipd/gossipd-0.sock";  // ipc:// endpoint, or the socket's path
  bool json = false;
  double timeout_s = 5;
};

// "ipc://PATH" as it is; a bare path becomes "ipc://PATH".
std::string ipc_endpoint_of(const std::string& node);
std::string format_status_table(const NodeStatus& s);
std::string format_status_json(const NodeStatus& s, const std::string& endpoint);

Subcommand add_status_command(CLI::App& parent);
int run_status(const StatusOptions& options);

}  // namespace gossip::cli

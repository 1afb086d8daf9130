#pragma once
// `gossipctl status`: asks one node's daemon, over its IPC socket, what it is doing
// (node, strategy, round, step, attached trainers, traffic per peer, when each peer
// was last heard from) and prints a table, or one JSON object with --json.

#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/inspect.h"
#include "gossip/client.h"

namespace gossip::cli {

struct StatusOptions {
  std::string node = "ipc:///run/gossipd/gossipd-0.sock";  // ipc:// endpoint, or the socket's path
  bool json = false;
  double timeout_s = 5;
  bool cluster = false;  // every member, through this node (daemon/inspector.h)
};

// "ipc://PATH" as it is; a bare path becomes "ipc://PATH".
std::string ipc_endpoint_of(const std::string& node);
std::string format_status_table(const NodeStatus& s);
std::string format_status_json(const NodeStatus& s, const std::string& endpoint);

// status --cluster: each member's distance from the members' mean model, relative to
// the mean's norm, on the samples they sent (nullopt where not every member sent as
// many); lag is behind the member furthest on.
struct MemberView {
  proto::inspect::MemberStatus status;
  uint64_t lag = 0;
  std::optional<double> distance;
};
std::vector<MemberView> member_views(const ClusterStatus& c);
std::string format_cluster_table(const ClusterStatus& c);
std::string format_cluster_json(const ClusterStatus& c);

Subcommand add_status_command(CLI::App& parent);
int run_status(const StatusOptions& options);

}  // namespace gossip::cli

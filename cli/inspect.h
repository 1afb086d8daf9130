#pragma once
// Asks one node's daemon, over its IPC socket, to gather what every member says
// (daemon/inspector.h): the link matrix for `gossipctl doctor`, the members' status
// for `gossipctl status --cluster`.

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/inspect.h"
#include "proto/ipc.h"

namespace gossip::cli {

struct ClusterLinks {
  proto::inspect::Summary summary;
  std::vector<proto::inspect::LinkRow> rows;  // one per node that answered
  std::vector<std::string> unreadable;        // why a part of the answer could not be read
};
struct ClusterStatus {
  proto::inspect::Summary summary;
  std::vector<proto::inspect::MemberStatus> members;
  std::vector<std::string> unreadable;
};

// One request to the daemon at `endpoint` (ipc://PATH) and its answer, within `wait`;
// an Error answer becomes the Status, a missing socket a hint to check the node.
Result<proto::ipc::Message> ask_daemon(const std::string& endpoint,
                                       const proto::ipc::Message& request,
                                       std::chrono::milliseconds wait);

// `timeout`: how long the node waits for its peers; this waits a little longer.
Result<ClusterLinks> ask_links(const std::string& endpoint, std::chrono::milliseconds timeout);
Result<ClusterStatus> ask_status(const std::string& endpoint, std::chrono::milliseconds timeout);

}  // namespace gossip::cli

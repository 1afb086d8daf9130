#pragma once
// Nodes that were never in the peer list join a running cluster (issue 24, part 1):
// the members' side. A joiner asks any seed (daemon/join_client.h); the coordinator,
// the lowest id among this node and the peers heard within the dead-after bound,
// assigns it the next id above every id it knows, makes it a peer of its own channel
// and strategy, tells every member (an add), and answers the joiner with its id and
// the member list. A seed that is not the coordinator redirects the joiner to it; one
// whose strategy takes no new members refuses, saying why. An answer that got lost
// is asked again: a joiner whose endpoint is a member's already gets that id back.
//
// The joiner then starts as a node without state: it fetches the members' state and
// asks into their ring like a restarted node (sgd/state_transfer.h, sgd/peer_ring.h).
//
// A member that was down when an add went out, or restarted since with its configured
// list, hears of the joined members when it says hello: every member that knows them
// sends it their adds again (an add of a known member changes nothing).
//
// Not yet (docs/architecture.md, "Churn"): joining under CURVE, a member list that
// outlives the restart of every member that knew it, and ids assigned on both sides
// of a partition.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "peers/router.h"

namespace gossip::daemon {

class Admission {
 public:
  struct Options {
    std::string self_endpoint;
    std::chrono::milliseconds dead_after{5000};
    // Empty when the strategy takes new members; else why not (the joiner is told).
    std::string refuse;
    // Takes a new member into the strategy (after the channel has it).
    std::function<Status(uint32_t id, const std::string& endpoint)> take;
  };
  Admission(peers::Router& router, Options options);

  uint64_t epoch() const { return epoch_; }

 private:
  void on_member(peers::Incoming& in);
  void answer_join(peers::Incoming& in, const std::string& endpoint);
  void on_add(uint32_t from, uint32_t id, uint64_t epoch, const std::string& endpoint);
  // A peer (re)started: the members that joined since the peer lists were written.
  void on_hello(uint32_t peer);
  void send_add(uint32_t to, const peers::Peer& member);
  Status add(uint32_t id, const std::string& endpoint);
  void reply(const std::string& route, proto::Member m, const std::string& payload);
  uint32_t coordinator() const;

  peers::Router& router_;
  Options options_;
  uint64_t epoch_ = 0;
  uint32_t highest_ = 0;             // the highest id this node has known
  std::vector<peers::Peer> joined_;  // members that joined by seeds, as this node knows
  peers::Router::Subscription subscription_;
};

// "<id> <endpoint>" a line: the member list of an answer. Parsed strictly: ids unique,
// endpoints valid (daemon/config.h), at most 4096 lines.
std::string format_members(const std::vector<peers::Peer>& members);
Result<std::vector<peers::Peer>> parse_members(std::string_view text);

}  // namespace gossip::daemon

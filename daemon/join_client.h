#pragma once
// A node that was never in the peer list joins a running cluster (--join SEEDS): the
// joiner's side of daemon/admission.h. Before its channel exists it asks the seeds in
// turn, over a socket of its own, for an id: it follows a redirect to the coordinator,
// stops at a refusal (which says why), and tries the next seed a second after a wait
// (the coordinator hears no majority) or when one does not answer within a few
// seconds, until `timeout`. Under CURVE it speaks to each seed with the seed's public
// key (KEY@tcp://HOST:PORT) and its own keys, and the answer gives every member's key.
//
// The asking itself is a function (JoinAsk): gossipd's asks over ZeroMQ, on the real
// clock; the simulation's over its in-memory links, on virtual time (sim/joins.h).

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "peers/peer.h"
#include "proto/message.h"

namespace gossip::daemon {

struct Joined {
  uint32_t id = 0;
  uint64_t epoch = 0;                // of the member list
  uint64_t first_round = 0;          // the round from which it takes part (daemon/admission.h)
  std::vector<peers::Peer> members;  // every member, this node included
};

// Under CURVE (seeds with public keys): this node's own keys (Z85).
struct JoinKeys {
  std::string public_key, secret_key;
};

// A seed's reply to one join-request: its member message, the envelope's round and
// the payload.
struct JoinReply {
  proto::Member m;
  uint64_t round = 0;
  std::string text;
};
// Sends `seed` one join-request for `endpoint` and returns its reply, or nullopt when it
// stayed silent until `until` (or sent something that is no reply).
using JoinAsk = std::function<std::optional<JoinReply>(
    const peers::Peer& seed, const std::string& endpoint, TimePoint until)>;

// Over ZeroMQ, on the real clock.
Result<Joined> join_by_seeds(const std::vector<peers::Peer>& seeds, const std::string& endpoint,
                             std::chrono::milliseconds timeout, const JoinKeys& keys = {});
// With `ask`, on `clock`: the protocol above, whatever carries it.
Result<Joined> join_by_seeds(const std::vector<peers::Peer>& seeds, const std::string& endpoint,
                             std::chrono::milliseconds timeout, const JoinKeys& keys,
                             gossip::Clock& clock, const JoinAsk& ask);

}  // namespace gossip::daemon

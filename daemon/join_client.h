#pragma once
// A node that was never in the peer list joins a running cluster (--join SEEDS): the
// joiner's side of daemon/admission.h. Before its channel exists it asks the seeds in
// turn, over a socket of its own, for an id: it follows a redirect to the coordinator,
// stops at a refusal (which says why), and tries the next seed a second after a wait
// (the coordinator hears no majority) or when one does not answer within a few
// seconds, until `timeout`. Under CURVE it speaks to each seed with the seed's public
// key (KEY@tcp://HOST:PORT) and its own keys, and the answer gives every member's key.

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"
#include "peers/peer.h"

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

Result<Joined> join_by_seeds(const std::vector<peers::Peer>& seeds, const std::string& endpoint,
                             std::chrono::milliseconds timeout, const JoinKeys& keys = {});

}  // namespace gossip::daemon

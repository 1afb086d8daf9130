#pragma once
// Joins by seeds in the simulation (issue 45, item 4): N members run gossipd's own
// admission (daemon/admission.h: the ping round, the coordinator, the majority's
// promise, the adds, the syncs) over the in-memory channel's link model, on virtual
// time, with the real router and inspector (which answers the pings); joiners arrive
// one every `every` and ask their seeds with gossipd's join client
// (daemon/join_client.h) over the hub (peers::MemoryJoiner). A joiner that gets an id
// becomes a member as gossipd's would: its own channel, router, inspector and
// admission, from the member list of its answer.
//
// The nodes run no strategy (no training, no heartbeats): what is measured is the
// membership protocol alone. What it reports per join: when the answer came, when the
// last node with a lower id listed the new member, the messages sent meanwhile, and
// whether an id went to two endpoints.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "peers/memory_channel.h"

namespace gossip::sim {

struct JoinOptions {
  uint32_t members = 16;
  uint32_t joins = 10;
  Duration every = std::chrono::seconds(2);  // between two joiners' arrivals
  uint32_t seeds = 3;                        // members each joiner knows, asked in turn
  bool majority = true;                      // --join-quorum majority (false: any)
  std::chrono::milliseconds dead_after{3000};
  std::chrono::milliseconds join_timeout{120000};  // a joiner gives up after it
  peers::LinkModel links;  // outages' sides name members; a joiner is on no side
  uint64_t seed = 1;       // the joiners' seeds
};

struct JoinRow {
  uint32_t joiner = 0;     // the order of arrival
  double asked_s = 0;      // virtual time of its first request
  double answered_s = -1;  // when it got its id; -1: it got none
  uint32_t id = 0;         // the id it got
  // When the last node with a lower id (each was a member before it) listed it; -1:
  // one never did.
  double all_knew_s = -1;
  uint32_t knew = 0, should_know = 0;  // nodes that listed it, of those with a lower id
  uint64_t messages = 0;               // sent through the hub from its request until the next one's
  std::string failure;                 // why it got no id
};

struct JoinReport {
  std::vector<JoinRow> rows;
  // "id I: ENDPOINT and ENDPOINT": ids the coordinators gave to two joiners.
  std::vector<std::string> duplicates;
  double virtual_s = 0, real_s = 0;
  uint64_t messages = 0;
};

Result<JoinReport> simulate_joins(const JoinOptions& options);

}  // namespace gossip::sim

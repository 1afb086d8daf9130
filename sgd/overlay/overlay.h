#pragma once
// The gossip family's overlay while the membership grows (issue 24, part 1): the
// topology of the first n nodes up to the round from which a joiner takes part, the
// topology of n + 1 from that round on. Every member derives the same graph for a
// round because the coordinator picks the joiner's first round and sends it with the
// add (daemon/admission.h); a member that hears of the join late switches at its next
// round, and the neighbor exchange's absences cover the rounds in between.
//
// Old topologies are kept: a strategy that mixes a round `lag` rounds back (push-sum,
// async gossip) still asks for it, and a reference taken in a round stays valid when
// a join arrives during that round's wait.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "peers/topology.h"

namespace gossip::sgd {

class Overlay {
 public:
  // `spec` and `seed` as make_topology takes them; the first topology covers every
  // round until a grow().
  Overlay(std::string spec, uint64_t seed, std::unique_ptr<peers::Topology> first);

  const peers::Topology& at(uint64_t round) const;
  const peers::Topology& latest() const { return *epochs_.back().topology; }
  // Every topology that holds at `round` or later, each with the first such round.
  std::vector<std::pair<uint64_t, const peers::Topology*>> from(uint64_t round) const;
  // The round from which latest() holds.
  uint64_t latest_from() const { return epochs_.back().from; }

  // Ids are handed out one above the highest, so a member more than this past the
  // graph is made up (a graph on four billion nodes would not fit in memory).
  static constexpr uint32_t kMaxGrowth = 256;

  // Fails, saying why, when the spec has no graph on `nodes` (a torus on a prime,
  // an explicit torus:RxC, random-regular:D with nodes * D odd), or `nodes` is more
  // than kMaxGrowth past the graph's.
  Status check_grow(uint32_t nodes) const;
  // From `round` on, the topology of `nodes` nodes. A size already reached changes
  // nothing; a round before the last change is moved to it, so that rounds already
  // given a graph keep it.
  Status grow(uint32_t nodes, uint64_t round);

 private:
  // The graph on `nodes` (more than latest()'s), or why there is none.
  Result<std::unique_ptr<peers::Topology>> make(uint32_t nodes) const;

  struct Epoch {
    uint64_t from = 0;
    std::unique_ptr<peers::Topology> topology;
  };
  std::string spec_;
  uint64_t seed_;
  std::vector<Epoch> epochs_;  // by `from`, ascending; the first from round 0
};

}  // namespace gossip::sgd

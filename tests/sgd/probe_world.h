#pragma once
// Memberships of an elastic ring (sgd/membership/ring_membership.h) exchanging probes through one
// queue, delivered in a random order, each answering as PeerRing does: a probe
// carries its sender's list when sent (its view, or the union while merging) and
// whether it merges. Pure logic: the agreement rules tested without sockets.

#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "sgd/membership/ring_membership.h"

namespace gossip::sgd {

struct ProbeWorld {
  using Clock = std::chrono::steady_clock;
  using Probe = RingMembership::Probe;
  using Merge = RingMembership::Merge;
  struct Message {
    uint32_t from, to;
    uint64_t epoch;
    bool joining;
    std::vector<uint32_t> view;
    Merge merge = Merge::kNone;
  };
  std::vector<RingMembership> nodes;  // node i has id i
  std::vector<uint64_t> next;         // each node's next round, as its probes tell
  std::vector<Message> queue;
  std::set<std::pair<uint32_t, uint32_t>> cut;  // links (from, to) that drop every probe
  Clock::time_point t0 = Clock::now();
  std::chrono::milliseconds wait{1000};

  // n nodes that admit joiners, each configured with all the others.
  explicit ProbeWorld(uint32_t n) : next(n, 9) {
    for (uint32_t self = 0; self < n; ++self) {
      std::vector<uint32_t> peers;
      for (uint32_t id = 0; id < n; ++id)
        if (id != self) peers.push_back(id);
      nodes.emplace_back(self, peers, /*admit_joiners=*/true);
    }
  }

  void send(uint32_t from, uint32_t to) {
    const auto& m = nodes[from];
    queue.push_back({from, to, m.epoch(), m.rejoining(), m.probe_list(),
                     m.merging() ? Merge::kMerging : Merge::kNone});
  }
  void offer(uint32_t from, uint32_t to) {
    const auto& m = nodes[from];
    queue.push_back({from, to, m.epoch(), false, m.members(), Merge::kOffer});
  }
  void send_probes(uint32_t from) {
    for (uint32_t id : nodes[from].members())
      if (id != from) send(from, id);
    for (uint32_t id : nodes[from].take_to_probe()) send(from, id);
  }
  // Hands `msg` to its node, which answers as PeerRing does.
  Probe deliver(const Message& msg) {
    if (cut.count({msg.from, msg.to})) return Probe::kIgnored;
    auto& to = nodes[msg.to];
    const bool was_merging = to.merging();
    const auto effect = to.on_probe(msg.from, msg.epoch, next[msg.from], t0, wait, msg.joining,
                                    msg.view, msg.merge);
    if (effect == Probe::kStarted || (effect == Probe::kHeard && to.merging() && !was_merging)) {
      send_probes(msg.to);
    } else if (effect == Probe::kHeard) {
      for (uint32_t id : to.take_to_probe()) send(msg.to, id);
      if (to.answers(msg.from, msg.view)) send(msg.to, msg.from);
    }
    return effect;
  }
  // Delivers until the queue is empty; then whether every node re-forms and is ready
  // without the wait running out.
  bool run(std::mt19937& rng) {
    while (!queue.empty()) {
      const size_t i = rng() % queue.size();
      const Message msg = queue[i];
      queue.erase(queue.begin() + static_cast<ptrdiff_t>(i));
      deliver(msg);
    }
    for (auto& n : nodes)
      if (!n.ready(t0)) return false;
    return true;
  }
  // Two rings: nodes [0, side) and [side, n), each decided at its own epoch.
  void split(uint32_t side, uint64_t epoch_a, uint64_t epoch_b) {
    const auto n = static_cast<uint32_t>(nodes.size());
    for (uint32_t self = 0; self < n; ++self) {
      const bool a = self < side;
      for (uint64_t e = 0; e < (a ? epoch_a : epoch_b); ++e) {
        nodes[self].start(t0, wait);
        for (uint32_t id = a ? 0 : side; id < (a ? side : n); ++id)
          if (id != self) nodes[self].on_probe(id, e, next[id], t0, wait);
        nodes[self].decide();
      }
    }
  }
};

}  // namespace gossip::sgd

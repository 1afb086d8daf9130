// Two elastic rings that trained apart (a partition that healed) merge into one:
// the offers, the merging re-forming and who learns of the merge (RingMembership,
// pure logic, over every delivery order of ProbeWorld). The models' side, the
// union's first round, is in local_sgd_test.cc; the whole of it with real processes
// in network namespaces is Experiments.PartitionHeals.

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

#include "sgd/membership/ring_membership.h"
#include "tests/sgd/probe_world.h"

namespace gossip::sgd {
namespace {

using namespace std::chrono_literals;
using Probe = RingMembership::Probe;
using Merge = RingMembership::Merge;

const std::vector<uint32_t> kAll{0, 1, 2, 3, 4, 5};

TEST(RingMerge, TwoRingsApartMergeIntoOneWhateverTheOrderOfTheProbes) {
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE(seed);
    ProbeWorld w(6);
    w.split(3, 1, 2);
    ASSERT_EQ(w.nodes[0].members(), (std::vector<uint32_t>{0, 1, 2}));
    ASSERT_EQ(w.nodes[4].members(), (std::vector<uint32_t>{3, 4, 5}));
    for (uint32_t id = 0; id < 6; ++id) w.next[id] = id < 3 ? 187 : 181;
    // The healed link brings one offer first (any of A's to any of B's), and maybe
    // others after it.
    std::mt19937 rng(seed);
    w.offer(rng() % 3, 3 + rng() % 3);
    if (seed % 2) w.offer(3 + rng() % 3, rng() % 3);
    ASSERT_TRUE(w.run(rng)) << "a node still waited when every probe was delivered";
    for (auto& n : w.nodes) {
      const auto change = n.decide();
      EXPECT_TRUE(change.merged) << "node " << n.order().ids[n.order().rank];
      EXPECT_TRUE(change.lost.empty());
      EXPECT_EQ(n.members(), kAll);
      EXPECT_EQ(n.epoch(), 3u) << "one past the higher side's";
      EXPECT_EQ(change.next_rounds.size(), 5u) << "every other node's next round, for the union's";
    }
    for (auto& n : w.nodes) EXPECT_EQ(n.view_id(), w.nodes[0].view_id());
  }
}

// Links that came back one by one: node 5 hears nobody of the other side in the
// first merging re-forming and decides its old ring; the others take in the nodes
// they heard. At the next re-forming (the ring round fails on the views that
// differ), the members that still owe the union its first round probe as merging
// (PeerRing::merge_round_), and the views agree; whoever takes in an outsider then
// learns of a merge.
TEST(RingMerge, ASideThatHeardNobodyAcrossMergesAtTheNextReforming) {
  for (uint32_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE(seed);
    ProbeWorld w(6);
    w.split(3, 1, 1);
    for (uint32_t a = 0; a < 3; ++a) w.cut.insert({a, 5}), w.cut.insert({5, a});
    std::mt19937 rng(seed);
    w.offer(0, 3);
    ASSERT_FALSE(w.run(rng)) << "nodes wait for node 5 and node 5 for them";
    std::vector<RingMembership::Change> first;
    for (auto& n : w.nodes) first.push_back(n.decide());
    EXPECT_EQ(w.nodes[5].members(), (std::vector<uint32_t>{3, 4, 5}));
    EXPECT_FALSE(first[5].merged) << "it took nobody in";
    EXPECT_TRUE(first[0].merged);

    w.cut.clear();
    for (uint32_t id = 0; id < 6; ++id) w.nodes[id].start(w.t0, w.wait);
    for (uint32_t id = 0; id < 6; ++id) {
      // Those that merged owe the union its first round: their probes merge.
      if (first[id].merged)
        for (uint32_t to : w.nodes[id].members())
          if (to != id)
            w.queue.push_back(
                {id, to, w.nodes[id].epoch(), false, w.nodes[id].probe_list(), Merge::kMerging});
      if (!first[id].merged) w.send_probes(id);
    }
    ASSERT_TRUE(w.run(rng));
    for (auto& n : w.nodes) n.decide();
    for (auto& n : w.nodes) {
      EXPECT_EQ(n.members(), kAll);
      EXPECT_EQ(n.view_id(), w.nodes[0].view_id());
    }
  }
}

// Nodes 4 and 5 were left out by 0-3 (stopped past the reform wait, say) and do not
// know it: their view still holds 0-3, who ignore their probes, and their round waited
// two reform waits for ring addresses that never came, then re-formed, then waited
// for an offer. Past a 10 s round deadline under churn (Experiments.Churn in CI). The
// first offer of 0-3 now tells them, and the six merge in one re-forming, whatever
// the order of the probes.
TEST(RingMerge, NodesLeftOutLearnItFromTheFirstOfferAndMerge) {
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE(seed);
    ProbeWorld w(6);
    w.split(6, 1, 0);                   // one ring of six at epoch 1
    for (uint32_t a = 0; a < 4; ++a) {  // 0-3 decide epoch 2 without 4 and 5
      w.nodes[a].start(w.t0, w.wait);
      for (uint32_t b = 0; b < 4; ++b)
        if (b != a) w.nodes[a].on_probe(b, 1, w.next[b], w.t0, w.wait);
      w.nodes[a].decide();
    }
    ASSERT_EQ(w.nodes[0].members(), (std::vector<uint32_t>{0, 1, 2, 3}));
    ASSERT_EQ(w.nodes[4].members(), kAll) << "the stale view";
    for (uint32_t id = 0; id < 6; ++id) w.next[id] = id < 4 ? 85 : 57;
    std::mt19937 rng(seed);
    w.offer(rng() % 4, 4 + rng() % 2);
    if (seed % 2) w.offer(rng() % 4, 4 + rng() % 2);
    ASSERT_TRUE(w.run(rng)) << "a node still waited when every probe was delivered";
    for (uint32_t id = 0; id < 6; ++id) {
      auto& n = w.nodes[id];
      const auto change = n.decide();
      EXPECT_EQ(n.members(), kAll) << "node " << id;
      EXPECT_EQ(n.epoch(), 3u) << "node " << id;
      EXPECT_EQ(n.view_id(), w.nodes[0].view_id());
      // Every node learns that the sides trained apart, as PeerRing reads it: it took
      // in another ring's node, or a member that merges is at a later round.
      EXPECT_TRUE(change.merged || change.highest_claim() > w.next[id]) << "node " << id;
    }
  }
}

TEST(RingMerge, AStaleOrForeignOfferLeavesTheViewAlone) {
  const auto t0 = std::chrono::steady_clock::now();
  // Without joiners admitted (allreduce's elastic ring, which takes nobody back) an
  // offer is nothing.
  RingMembership fixed(3, {0, 1, 2});
  EXPECT_EQ(fixed.on_probe(0, 1, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 2}, Merge::kOffer),
            Probe::kIgnored);
  EXPECT_EQ(fixed.members(), (std::vector<uint32_t>{0, 1, 2, 3}));
  // An offer of an epoch this node has moved past, or one that lists this node.
  RingMembership m(3, {0, 1, 2}, /*admit_joiners=*/true);
  for (int e = 0; e < 2; ++e) {
    m.start(t0, 1s);
    for (uint32_t id : {0u, 1u, 2u}) m.on_probe(id, e, 50, t0, 1s);
    m.decide();
  }
  ASSERT_EQ(m.epoch(), 2u);
  EXPECT_EQ(m.on_probe(0, 1, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 2}, Merge::kOffer),
            Probe::kIgnored);
  EXPECT_EQ(m.on_probe(0, 2, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 2, 3}, Merge::kOffer),
            Probe::kIgnored);
  // Nor a "ring" of its sender alone, which no live ring offers.
  EXPECT_EQ(m.on_probe(0, 2, 50, t0, 1s, false, std::vector<uint32_t>{0}, Merge::kOffer),
            Probe::kIgnored);
  EXPECT_EQ(m.members(), (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_FALSE(m.reforming());
  // Left out by all of them: alone, it re-forms at once and then asks back in.
  EXPECT_EQ(m.on_probe(0, 2, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 2}, Merge::kOffer),
            Probe::kStarted);
  EXPECT_FALSE(m.merging());
  ASSERT_TRUE(m.ready(t0));
  m.decide();
  EXPECT_TRUE(m.alone());
}

// An offer sent while the link was cut arrives after the heal with the round it was
// sent at. The union's first round is agreed from the offerer's own probe, which
// answers this node's: from the offer, the two sides took different first rounds
// (200 and 206) and re-formed once more (experiments/partition.py).
TEST(RingMerge, AnOfferIsVouchedForAndItsSendersOwnProbeGivesItsRound) {
  const auto t0 = std::chrono::steady_clock::now();
  RingMembership m(0, {1, 2, 3, 4, 5}, /*admit_joiners=*/true);
  m.start(t0, 1s);
  for (uint32_t id : {1u, 2u}) m.on_probe(id, 0, 200, t0, 1s);
  m.decide();  // {0, 1, 2} at epoch 1
  const std::vector<uint32_t> theirs{3, 4, 5};
  ASSERT_EQ(m.on_probe(3, 1, 76, t0, 1s, false, theirs, Merge::kOffer), Probe::kStarted);
  EXPECT_TRUE(m.merging());
  const std::vector<uint32_t> union_{0, 1, 2, 3, 4, 5};
  for (uint32_t id : {1u, 2u}) m.on_probe(id, 1, 200, t0, 1s, false, union_, Merge::kMerging);
  for (uint32_t id : {4u, 5u}) m.on_probe(id, 1, 206, t0, 1s, false, union_, Merge::kMerging);
  EXPECT_FALSE(m.ready(t0)) << "node 3 was vouched for by its offer, not heard";
  m.on_probe(3, 1, 206, t0, 1s, false, union_, Merge::kMerging);
  ASSERT_TRUE(m.ready(t0));
  const auto change = m.decide();
  EXPECT_EQ(m.members(), union_);
  EXPECT_TRUE(change.merged);
  EXPECT_EQ(change.next_rounds.at(3), 206u) << "the round of its probe, not of its offer";
}

TEST(RingMerge, AnOfferFromARingThatSharesANodeIsNoOtherRing) {
  const auto t0 = std::chrono::steady_clock::now();
  RingMembership m(4, {0, 1, 2, 3, 5}, /*admit_joiners=*/true);
  m.start(t0, 1s);
  m.on_probe(5, 0, 50, t0, 1s);
  m.on_probe(3, 0, 50, t0, 1s);
  m.decide();  // {3, 4, 5}
  EXPECT_EQ(m.on_probe(0, 1, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 3}, Merge::kOffer),
            Probe::kIgnored);
  EXPECT_EQ(m.on_probe(0, 1, 50, t0, 1s, false, std::vector<uint32_t>{0}, Merge::kOffer),
            Probe::kIgnored)
      << "a node alone is left out: it takes a member's state instead";
  EXPECT_EQ(m.on_probe(0, 1, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 2}, Merge::kOffer),
            Probe::kStarted);
  EXPECT_TRUE(m.merging());
  EXPECT_EQ(m.probe_list(), kAll) << "the union it expects: 0 heard, 1 and 2 vouched for";
}

TEST(RingMerge, ANodeAloneOrAskingBackInNeitherOffersNorMerges) {
  const auto t0 = std::chrono::steady_clock::now();
  RingMembership alone(0, {1, 2, 3}, /*admit_joiners=*/true);
  alone.start(t0, 1s);
  alone.decide();
  ASSERT_TRUE(alone.alone());
  EXPECT_TRUE(alone.offers().empty());
  EXPECT_EQ(alone.on_probe(1, 2, 50, t0, 1s, false, std::vector<uint32_t>{1, 2, 3}, Merge::kOffer),
            Probe::kIgnored);
  EXPECT_EQ(
      alone.on_probe(1, 2, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 2, 3}, Merge::kMerging),
      Probe::kIgnored);

  RingMembership back(0, {1, 2, 3}, /*admit_joiners=*/true);
  back.start_rejoin(t0, 1s);
  EXPECT_TRUE(back.offers().empty());
  back.on_probe(1, 2, 50, t0, 1s, false, std::vector<uint32_t>{0, 1, 2, 3}, Merge::kMerging);
  EXPECT_FALSE(back.merging()) << "the members take it in as a joiner, with their state";

  // A restarted node's probe that says merging (it owed a union a first round before
  // it was left out) is a joiner's: it took a member's state, no other ring's.
  RingMembership member(1, {0, 2, 3}, /*admit_joiners=*/true);
  member.start(t0, 1s);
  member.on_probe(2, 0, 50, t0, 1s);
  member.on_probe(3, 0, 50, t0, 1s);
  member.decide();  // {1, 2, 3}
  EXPECT_EQ(member.on_probe(0, 0, 50, t0, 1s, /*joining=*/true, std::vector<uint32_t>{0, 1, 2, 3},
                            Merge::kMerging),
            Probe::kStarted);
  EXPECT_FALSE(member.merging());
  member.on_probe(2, 1, 50, t0, 1s);
  member.on_probe(3, 1, 50, t0, 1s);
  const auto change = member.decide();
  EXPECT_EQ(change.joined, (std::vector<uint32_t>{0}));
  EXPECT_FALSE(change.merged);

  // Nor do rings that take no joiners (only local SGD's ring can merge models).
  RingMembership fixed(4, {0, 1, 2, 3, 5});
  fixed.start(t0, 1s);
  fixed.on_probe(5, 0, 50, t0, 1s);
  fixed.decide();
  EXPECT_TRUE(fixed.offers().empty());
  EXPECT_EQ(fixed.on_probe(0, 1, 50, t0, 1s, false, std::vector<uint32_t>{0, 1}, Merge::kOffer),
            Probe::kIgnored);
}

TEST(RingMerge, ALiveRingOffersItselfToTheConfiguredNodesOutsideIt) {
  const auto t0 = std::chrono::steady_clock::now();
  RingMembership m(1, {0, 2, 3}, /*admit_joiners=*/true);
  EXPECT_TRUE(m.offers().empty()) << "everyone is in the view";
  m.start(t0, 1s);
  EXPECT_TRUE(m.offers().empty()) << "not while re-forming";
  m.on_probe(2, 0, 5, t0, 1s);
  m.decide();
  EXPECT_EQ(m.offers(), (std::vector<uint32_t>{0, 3}));
}

TEST(RingMerge, AReformingOfOneRingIsNoMerge) {
  // A joiner that a member took in and this node did not (vouched for) is no merge:
  // it took that member's state, so the synchronization points are one.
  const auto t0 = std::chrono::steady_clock::now();
  RingMembership m(0, {1, 2}, /*admit_joiners=*/true);
  m.start(t0, 1s);
  m.on_probe(1, 0, 5, t0, 1s);
  m.decide();  // {0, 1} at epoch 1
  m.start(t0, 1s);
  m.on_probe(1, 1, 5, t0, 1s, false, std::vector<uint32_t>{0, 1, 2});
  m.on_probe(2, 2, 5, t0, 1s, false, std::vector<uint32_t>{0, 1, 2});
  ASSERT_TRUE(m.ready(t0));
  const auto change = m.decide();
  EXPECT_EQ(m.members(), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_FALSE(change.merged);
}

// A union that still owes its first round re-forms with merging probes, and a node
// probes again when its union grows: a copy can reach a member after it decided that
// re-forming. Heard, each late copy started another re-forming whose probes came late
// in turn: six re-formings in 30 ms after a heal, every connect of the union's first
// round refused until the round's deadline (Experiments.PartitionHeals, CI).
TEST(RingMerge, ALateCopyOfAMergingProbeStartsNoReforming) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    SCOPED_TRACE(seed);
    ProbeWorld w(7);
    w.split(6, 1, 0);  // the union of 0-5 at epoch 1; 6 is configured, outside
    w.nodes[0].start(w.t0, w.wait);
    std::vector<ProbeWorld::Message> copies;
    for (uint32_t to = 1; to < 6; ++to)
      copies.push_back(
          {0, to, w.nodes[0].epoch(), false, w.nodes[0].probe_list(), Merge::kMerging});
    w.queue = copies;
    std::mt19937 rng(seed);
    w.run(rng);  // node 6, outside, does not re-form
    for (uint32_t id = 0; id < 6; ++id) {
      ASSERT_TRUE(w.nodes[id].ready(w.t0)) << "node " << id;
      w.nodes[id].decide();
    }
    for (const auto& copy : copies) {
      EXPECT_EQ(w.deliver(copy), Probe::kIgnored) << "to node " << copy.to;
      EXPECT_FALSE(w.nodes[copy.to].reforming()) << "node " << copy.to;
    }
    EXPECT_TRUE(w.queue.empty());
    for (uint32_t id = 0; id < 6; ++id) EXPECT_EQ(w.nodes[id].epoch(), 2u) << "node " << id;
  }
}

// Links come back one by one: node 0 decided epoch 10 having heard node 1 at epoch 3;
// node 1, cut from the others meanwhile, decided epoch 4 and now re-forms. Its merging
// probe is older than node 0's epoch but newer than the one node 0 heard: fresh, and
// heard (without it node 0 left node 1 out). A copy of the epoch-3 probe is not.
TEST(RingMerge, AnOlderMergingProbeIsHeardUnlessNodeZeroHeardThatEpochOfItsSender) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<uint32_t> all{0, 1, 2, 3};
  RingMembership m(0, {1, 2, 3}, /*admit_joiners=*/true);
  m.start(t0, 1s);
  m.on_probe(1, 3, 9, t0, 1s, false, all, Merge::kMerging);
  for (uint32_t id : {2u, 3u}) m.on_probe(id, 9, 9, t0, 1s, false, all, Merge::kMerging);
  ASSERT_TRUE(m.ready(t0));
  m.decide();
  ASSERT_EQ(m.epoch(), 10u);
  EXPECT_EQ(m.on_probe(1, 3, 9, t0, 1s, false, all, Merge::kMerging), Probe::kIgnored)
      << "a late copy";
  EXPECT_FALSE(m.reforming());
  EXPECT_EQ(m.on_probe(1, 4, 12, t0, 1s, false, all, Merge::kMerging), Probe::kStarted)
      << "node 1's probe of a re-forming since";
}

}  // namespace
}  // namespace gossip::sgd

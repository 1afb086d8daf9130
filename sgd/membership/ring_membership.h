#pragma once
// Who is in an elastic ring (sgd/membership/peer_ring.h): the view of the members, and the
// re-forming that replaces it when a peer breaks a round. Pure logic over the
// probes heard and the clock, so that the agreement rule is tested without sockets.
//
// A member whose round fails (or that hears a probe of its view) starts re-forming:
// it probes every member of its view and listens for `wait`. It then takes as its
// new view itself and every member it heard, and the epoch after the highest one it
// heard. A live member's ring round fails within moments of the first (each failure
// closes the ring's connections, which fails the neighbors' rounds), and a member
// between rounds answers a probe at once, so the live members hear each other and
// agree; a member that stays silent for the whole wait is left out.
//
// A peer whose probe is of an older epoch is not heard, nor is one that is not in
// the view, with two exceptions when joiners are admitted. A configured peer that
// probes at epoch 0, marked as a join, asks back in (a restarted process, or a live
// node the others left out, which starts over at epoch 0). It is heard like a member
// (and must be sent our probe, since it is not in our view); it has taken a live
// member's state first (sgd/membership/state_transfer.h), so it brings no stale replica. And a
// configured peer that a member heard in this re-forming lists in its view (every
// probe carries its view's members) is vouched for: that member took it in while this
// node did not (it heard the join, this node decided before the joiner's probe came).
// This node then waits for it too, probes it, and hears it (also when its probe came
// before the member's). Without that the two views
// stayed apart for good: each re-forming, this node heard all of its own members at
// once and decided without the joiner, whose probes at the new epoch were not a join.
// A node left out by every member is vouched for by none, and asks back in as above.
// A member whose probe does not list this node is answered with this node's probe
// (answers()): it may have dropped the first, which came before it re-formed.
//
// Two rings that trained apart (a partition that healed) merge. A live ring offers
// itself now and then to the configured peers outside its view (offers()); a node of
// another ring of two or more, whose view shares no node with the offer's, starts a
// merging re-forming: it vouches for the offerer and its members (the offer may be old;
// the offerer's probe, which answers, is heard). A merging node's probes list the union
// it expects (its view and the outsiders it vouched for or heard) and say so
// (kMerging), and such a probe from outside the view that lists this node brings it
// into the merge too, so every node of both rings hears every other and they decide one
// view. The nodes that decide a view with members of another ring learn it
// (Change::merged): their synchronization points differ, and the union's first round
// averages the models themselves (sgd/membership/peer_ring.h). A member's merging probe
// is heard at an epoch older than this node's too: where links came back one by one, a
// member may have merged with nodes of a higher epoch before the others, and must hear
// them again; but not a late copy, of an epoch no newer than that member's probe this
// node last decided on. A node alone in its view merges by no offer: it was left out,
// and asks back in by taking a member's state, as a restarted node does; nor does a
// node asking back in.
//
// Nodes that the others left out may not know it yet: their view still holds the
// others, who ignore their probes and never send them a ring address for it. An
// offer from a member of the view that does not list this node says so at once: the
// node takes the offer's members out of its view, and what remains merges with them
// (or, alone, asks back in).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "sgd/collectives/ring_schedule.h"

namespace gossip::sgd {

class RingMembership {
 public:
  using Clock = std::chrono::steady_clock;

  // `peers`: the configured peers, without self.
  RingMembership(uint32_t self, const std::vector<uint32_t>& peers, bool admit_joiners = false);

  // A node that joined by seeds: a configured peer from now on, taken in when it asks
  // back in (daemon/admission.h).
  void add_configured(uint32_t id);

  const RingOrder& order() const { return order_; }
  const std::vector<uint32_t>& members() const { return order_.ids; }
  bool member(uint32_t id) const;
  uint64_t epoch() const { return epoch_; }
  // Names the view (epoch and members); ring addresses and ring sessions carry it,
  // so that nodes holding different views refuse each other instead of mixing.
  uint64_t view_id() const { return view_id_; }

  bool reforming() const { return reform_.has_value(); }
  // Starts re-forming, listening until now + wait. True when it started now (the
  // caller then probes every member); false when already re-forming.
  bool start(Clock::time_point now, std::chrono::milliseconds wait);
  // A probe of `peer`, whose next round is `next_round`. kStarted: it started
  // re-forming here (the caller probes too); kIgnored: not a member, or a stale epoch.
  enum class Probe { kIgnored, kHeard, kStarted };
  // What a probe says of merging (proto::RingProbe::merge).
  enum class Merge { kNone, kOffer, kMerging };
  // A configured peer outside the view that asks back in (admitted joiners only).
  bool joiner(uint32_t peer, uint64_t epoch, bool joining = true) const;
  // `joining`: the probe of a restarted node asking back in. A node that asks back in
  // itself (rejoining()) hears only the members, not other restarted nodes: the
  // members take all of them in, and the next re-forming agrees again.
  // `their_view`: the members the probe lists (ids that are not configured peers are
  // ignored).
  // `merge`: an offer is heard only from a ring apart from this one, a merging
  // probe from outside the view only when it lists this node.
  // `holds_result`: the probe says its sender holds its last round's result.
  Probe on_probe(uint32_t peer, uint64_t epoch, uint64_t next_round, Clock::time_point now,
                 std::chrono::milliseconds wait, bool joining = false,
                 std::span<const uint32_t> their_view = {}, Merge merge = Merge::kNone,
                 bool holds_result = false);
  // The configured peers outside the view that a live ring offers a merge to: none
  // while re-forming, asking back in, or alone.
  std::vector<uint32_t> offers() const;
  // The re-forming under way merges rings: this node's probes say so and list probe_list().
  bool merging() const { return reform_ && reform_->merging; }
  // What this node's probes list: its view, and while merging the outsiders it
  // vouched for or heard.
  std::vector<uint32_t> probe_list() const;
  // Whether to send `peer` our probe again after hearing its probe, which lists
  // `their_view`: a member of our view that does not count this node. It re-forms
  // too, and it may have dropped our probe, which came before it started (from
  // outside its view, a probe is kept only while re-forming); it hears us now that a
  // member vouched for us. Without the answer, it waited out every re-forming and
  // decided without this node, which its other members took in: two views for good.
  bool answers(uint32_t peer, std::span<const uint32_t> their_view) const;
  // The peers outside the view that this node must probe now, each once a re-forming:
  // those vouched for and not yet probed, and those heard outside the view (joiners,
  // vouched ones), which would not hear this node otherwise.
  std::vector<uint32_t> take_to_probe();
  // Starts re-forming as a node asking back in (until decide()): a restarted one, or
  // one the others left out. Its view becomes the configured peers at epoch 0, as a
  // restarted process's is, so that it hears every member whatever its epoch.
  void start_rejoin(Clock::time_point now, std::chrono::milliseconds wait);
  // Alone in its view although peers are configured: the others left it out.
  bool alone() const { return order_.ids.size() == 1 && !configured_.empty(); }
  bool rejoining() const { return rejoining_; }
  // A member said bye (it stops, or left with gossipctl leave): the re-forming under
  // way does not wait for it.
  void said_bye(uint32_t peer);
  // Every other member (but those that said bye) and every peer vouched for heard, or
  // the wait over.
  bool ready(Clock::time_point now) const;

  struct Change {
    std::vector<uint32_t> lost;                // members left out
    std::vector<uint32_t> joined;              // joiners taken in
    std::map<uint32_t, uint64_t> next_rounds;  // of every member heard
    // Members whose probe said they hold no result of the round before their next
    // (restarted, left out, merged): never the member that sends one
    // (sgd/membership/peer_ring.h).
    std::set<uint32_t> without_result;
    // Members of another ring were taken in (a merge): the members' synchronization
    // points differ. `before`: this node's view before, self included.
    bool merged = false;
    std::vector<uint32_t> before;
    // Members heard by a merging probe -> their next round: a member that owes a
    // union its first round (it merged with nodes since gone) says so at every
    // re-forming, and the owner aligns on it (sgd/membership/peer_ring.h).
    std::map<uint32_t, uint64_t> merging_claims;
    uint64_t highest_claim() const {
      uint64_t out = 0;
      for (const auto& [id, next] : merging_claims) out = std::max(out, next);
      return out;
    }
  };
  // Ends re-forming: the new view is self and the members heard (asserts reforming()).
  Change decide();

 private:
  void set_view(std::vector<uint32_t> ids, uint64_t epoch);

  uint32_t self_;
  std::vector<uint32_t> configured_;  // sorted, without self
  bool admit_joiners_;
  RingOrder order_;
  uint64_t epoch_ = 0;
  uint64_t view_id_ = 0;
  struct Reform {
    Clock::time_point until;
    uint64_t highest_epoch = 0;
    std::map<uint32_t, uint64_t> heard;        // member -> its next round
    std::map<uint32_t, uint64_t> heard_epoch;  // member -> the epoch it probed at
    std::set<uint32_t> vouched;                // outside the view, listed by a member heard
    std::set<uint32_t> probed;                 // outside the view, sent our probe
    // Configured peers outside the view whose probe came before a member vouched for
    // them: heard once one does (the probe is not sent twice).
    struct Pending {
      uint64_t epoch = 0, next_round = 0;
      bool holds_result = false;
    };
    std::map<uint32_t, Pending> pending;
    std::set<uint32_t> gone;  // members that said bye
    bool merging = false;
    std::set<uint32_t> merged_in;  // outside the view, heard by a merging probe or offer
    std::map<uint32_t, uint64_t> merging_claims;  // members heard by a merging probe
    std::set<uint32_t> without_result;            // their last probe said so
  };
  // A merging probe from `peer` (an offer, or kMerging from outside the view) starts a
  // merging re-forming: what it lists is vouched for, and `peer` heard (an offer's
  // sender only vouched for: its own probe is waited for).
  Probe hear_merge(uint32_t peer, uint64_t epoch, uint64_t next_round, Clock::time_point now,
                   std::chrono::milliseconds wait, std::span<const uint32_t> their_view,
                   bool holds_result, bool offer);
  void vouch_for(std::span<const uint32_t> their_view);
  // An offer from `peer`, a member of this node's view, that does not list this node:
  // their ring went on without it.
  bool left_out_by(uint32_t peer, uint64_t epoch, std::span<const uint32_t> their_view) const;
  // Takes the members `their_view` lists out of this node's view (same epoch).
  void leave_out(std::span<const uint32_t> their_view);
  bool configured(uint32_t id) const;
  std::optional<Reform> reform_;
  bool rejoining_ = false;
  // Each peer's epoch in the last probe of it this node decided on: a merging probe no
  // newer is a late copy (on_probe()).
  std::map<uint32_t, uint64_t> last_heard_epoch_;
};

}  // namespace gossip::sgd

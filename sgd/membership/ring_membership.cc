#include "sgd/membership/ring_membership.h"

#include <algorithm>
#include <cassert>

namespace gossip::sgd {

RingMembership::RingMembership(uint32_t self, const std::vector<uint32_t>& peers,
                               bool admit_joiners)
    : self_(self), configured_(peers), admit_joiners_(admit_joiners) {
  std::sort(configured_.begin(), configured_.end());
  std::vector<uint32_t> ids = peers;
  ids.push_back(self);
  set_view(std::move(ids), 0);
}

void RingMembership::set_view(std::vector<uint32_t> ids, uint64_t epoch) {
  std::vector<uint32_t> others;
  for (uint32_t id : ids)
    if (id != self_) others.push_back(id);
  order_ = ring_order(self_, others);
  epoch_ = epoch;
  // FNV-1a over the epoch and the sorted ids: equal on every node with the same view.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(epoch);
  for (uint32_t id : order_.ids) mix(id);
  view_id_ = h;
}

void RingMembership::add_configured(uint32_t id) {
  if (id == self_ || configured(id)) return;
  configured_.insert(std::upper_bound(configured_.begin(), configured_.end(), id), id);
}

bool RingMembership::member(uint32_t id) const {
  return std::binary_search(order_.ids.begin(), order_.ids.end(), id);
}

bool RingMembership::start(Clock::time_point now, std::chrono::milliseconds wait) {
  if (reform_) return false;
  reform_.emplace();
  reform_->until = now + wait;
  reform_->highest_epoch = epoch_;
  return true;
}

void RingMembership::vouch_for(std::span<const uint32_t> their_view) {
  auto& r = *reform_;
  for (uint32_t id : their_view) {
    if (id == self_ || member(id) || !configured(id) || !r.vouched.insert(id).second) continue;
    if (auto p = r.pending.find(id); p != r.pending.end()) {
      r.heard[id] = p->second.next_round;
      r.heard_epoch[id] = p->second.epoch;
      if (!p->second.holds_result) r.without_result.insert(id);
      r.highest_epoch = std::max(r.highest_epoch, p->second.epoch);
      if (r.merging) r.merged_in.insert(id);
      r.pending.erase(p);
    }
  }
}

RingMembership::Probe RingMembership::hear_merge(uint32_t peer, uint64_t epoch, uint64_t next_round,
                                                 Clock::time_point now,
                                                 std::chrono::milliseconds wait,
                                                 std::span<const uint32_t> their_view,
                                                 bool holds_result, bool offer) {
  const bool started = start(now, wait);
  auto& r = *reform_;
  r.merging = true;
  if (offer) {
    // An offer is vouched for, not heard: it may have waited in a queue for as long as
    // the link was cut, and its round is the round it was sent at. The offerer's own
    // probe, which answers ours, brings its round now; taken from the offer, the two
    // sides agreed on different first rounds of the union (200 and 206) and re-formed
    // once more.
    vouch_for(their_view);
    return started ? Probe::kStarted : Probe::kHeard;
  }
  r.heard[peer] = next_round;
  r.heard_epoch[peer] = epoch;
  if (holds_result)
    r.without_result.erase(peer);
  else
    r.without_result.insert(peer);
  r.highest_epoch = std::max(r.highest_epoch, epoch);
  if (!member(peer)) r.merged_in.insert(peer);
  vouch_for(their_view);
  return started ? Probe::kStarted : Probe::kHeard;
}

std::vector<uint32_t> RingMembership::offers() const {
  std::vector<uint32_t> out;
  if (!admit_joiners_ || reform_ || rejoining_ || order_.ids.size() < 2) return out;
  for (uint32_t id : configured_)
    if (!member(id)) out.push_back(id);
  return out;
}

std::vector<uint32_t> RingMembership::probe_list() const {
  std::vector<uint32_t> out = order_.ids;
  if (merging()) {
    out.insert(out.end(), reform_->vouched.begin(), reform_->vouched.end());
    for (const auto& [id, next] : reform_->heard) out.push_back(id);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return out;
}

RingMembership::Probe RingMembership::on_probe(uint32_t peer, uint64_t epoch, uint64_t next_round,
                                               Clock::time_point now,
                                               std::chrono::milliseconds wait, bool joining,
                                               std::span<const uint32_t> their_view, Merge merge,
                                               bool holds_result) {
  const auto lists = [&](uint32_t id) {
    return std::find(their_view.begin(), their_view.end(), id) != their_view.end();
  };
  // Merges are between rings of two or more that admit joiners; a node alone was left
  // out (it takes a member's state instead) and one asking back in hears members only.
  const auto may_merge = [&] {
    return admit_joiners_ && !rejoining_ && !joining && peer != self_ && configured(peer) &&
           !member(peer) && order_.ids.size() >= 2;
  };
  if (merge == Merge::kOffer) {
    if (left_out_by(peer, epoch, their_view)) {
      // Their ring decided without this node while its view still holds them: it
      // leaves them out of its view in turn (a view that does not count this node is
      // no view to wait on), and what remains is a ring apart from theirs. Waiting
      // instead for their ring addresses, which they never send for this view, took
      // two reform waits before the round failed, then a re-forming, then the next
      // offer: past a 10 s round deadline under churn (Experiments.Churn, CI).
      leave_out(their_view);
      if (order_.ids.size() < 2) {
        start(now, wait);  // alone: decided at once, and it asks back in (left_out())
        return Probe::kStarted;
      }
    }
    // Only from a ring apart from this one: a view that shares a node with ours is no
    // other ring.
    const bool apart = their_view.size() >= 2 &&
                       std::none_of(their_view.begin(), their_view.end(),
                                    [&](uint32_t id) { return id == self_ || member(id); });
    if (!may_merge() || !apart) return Probe::kIgnored;
    return hear_merge(peer, epoch, next_round, now, wait, their_view, holds_result, /*offer=*/true);
  }
  if (merge == Merge::kMerging && may_merge() && lists(self_))
    return hear_merge(peer, epoch, next_round, now, wait, their_view, holds_result,
                      /*offer=*/false);
  const bool vouched = reform_ && reform_->vouched.count(peer) > 0;
  if (peer != self_ && reform_ && !member(peer) && !vouched && !joining && configured(peer)) {
    reform_->pending[peer] = {epoch, next_round, holds_result};
    return Probe::kIgnored;
  }
  // A member's merging probe of an older epoch is heard (it may have merged with others
  // first), unless it is a late copy: of an epoch no newer than the probe of that member
  // this node heard last. A node's epoch grows with each re-forming it decides, so such
  // a probe is of a re-forming this node has decided already (a merging node probes
  // again when its union grows). Heard, each late copy started another re-forming, whose
  // probes came late in turn: six re-formings in 30 ms after a partition healed, every
  // connect of the union's first round refused, until the round's deadline
  // (Experiments.PartitionHeals, CI).
  const auto last = last_heard_epoch_.find(peer);
  const bool late_copy = last != last_heard_epoch_.end() && epoch <= last->second;
  if (peer == self_ || (!member(peer) && !joiner(peer, epoch, joining) && !vouched) ||
      (member(peer) && epoch < epoch_ && (merge != Merge::kMerging || late_copy)))
    return Probe::kIgnored;
  if (rejoining_ && joining) return Probe::kIgnored;
  const bool started = start(now, wait);
  auto& r = *reform_;
  r.heard[peer] = next_round;
  r.heard_epoch[peer] = epoch;
  if (holds_result)
    r.without_result.erase(peer);
  else
    r.without_result.insert(peer);
  r.highest_epoch = std::max(r.highest_epoch, epoch);
  // A member's merging probe brings this node into the merge (as long as it is not
  // asking back in: the members it hears take it in as a joiner).
  if (merge == Merge::kMerging && member(peer) && !rejoining_ && admit_joiners_) {
    r.merging = true;
    r.merging_claims[peer] = next_round;
  }
  if (r.merging && !member(peer) && !joining) r.merged_in.insert(peer);
  if (member(peer) || r.merging) vouch_for(their_view);
  return started ? Probe::kStarted : Probe::kHeard;
}

bool RingMembership::left_out_by(uint32_t peer, uint64_t epoch,
                                 std::span<const uint32_t> their_view) const {
  // An offer goes only to nodes outside the offerer's view, and only between its
  // re-formings: from a member of ours, at our epoch or later, whose view lists
  // itself and not this node, it says that their ring went on without this node. An
  // older one is a view this node has already moved past; one of a ring of fewer than
  // two is no ring's (offers() makes none), and would only take the offerer out of
  // this node's view without a re-forming.
  const auto lists = [&](uint32_t id) {
    return std::find(their_view.begin(), their_view.end(), id) != their_view.end();
  };
  return admit_joiners_ && !reform_ && !rejoining_ && peer != self_ && member(peer) &&
         epoch >= epoch_ && their_view.size() >= 2 && lists(peer) && !lists(self_);
}

void RingMembership::leave_out(std::span<const uint32_t> their_view) {
  std::vector<uint32_t> ids;
  for (uint32_t id : order_.ids)
    if (id == self_ || std::find(their_view.begin(), their_view.end(), id) == their_view.end())
      ids.push_back(id);
  set_view(std::move(ids), epoch_);
}

bool RingMembership::answers(uint32_t peer, std::span<const uint32_t> their_view) const {
  return reform_ && !rejoining_ && peer != self_ && member(peer) && !their_view.empty() &&
         std::find(their_view.begin(), their_view.end(), self_) == their_view.end();
}

std::vector<uint32_t> RingMembership::take_to_probe() {
  std::vector<uint32_t> out;
  if (!reform_) return out;
  auto add = [&](uint32_t id) {
    if (!member(id) && reform_->probed.insert(id).second) out.push_back(id);
  };
  for (uint32_t id : reform_->vouched) add(id);
  for (const auto& [id, next] : reform_->heard) add(id);
  return out;
}

bool RingMembership::configured(uint32_t id) const {
  return std::binary_search(configured_.begin(), configured_.end(), id);
}

void RingMembership::start_rejoin(Clock::time_point now, std::chrono::milliseconds wait) {
  std::vector<uint32_t> all = configured_;
  all.push_back(self_);
  set_view(std::move(all), 0);
  reform_.reset();
  start(now, wait);
  rejoining_ = true;
}

bool RingMembership::joiner(uint32_t peer, uint64_t epoch, bool joining) const {
  return admit_joiners_ && joining && epoch == 0 && !member(peer) && configured(peer);
}

void RingMembership::said_bye(uint32_t peer) {
  if (reform_ && member(peer) && !reform_->heard.count(peer)) reform_->gone.insert(peer);
}

bool RingMembership::ready(Clock::time_point now) const {
  if (!reform_) return false;
  // Joiners among the heard do not count towards "every member"; those gone do.
  size_t members_heard = reform_->gone.size();
  for (const auto& [id, next] : reform_->heard) members_heard += member(id) ? 1 : 0;
  if (now >= reform_->until) return true;
  for (uint32_t id : reform_->vouched)
    if (!reform_->heard.count(id)) return false;
  return members_heard + 1 == order_.ids.size();
}

RingMembership::Change RingMembership::decide() {
  assert(reform_);
  Change change;
  change.next_rounds = reform_->heard;
  change.without_result = reform_->without_result;
  std::vector<uint32_t> ids{self_};
  for (const auto& [id, next] : reform_->heard) ids.push_back(id);  // members and joiners
  for (uint32_t id : order_.ids)
    if (id != self_ && !reform_->heard.count(id)) change.lost.push_back(id);
  for (const auto& [id, next] : reform_->heard)
    if (!member(id)) change.joined.push_back(id);
  change.before = order_.ids;
  for (const auto& [id, e] : reform_->heard_epoch)
    last_heard_epoch_[id] = std::max(last_heard_epoch_[id], e);
  for (const auto& [id, next] : reform_->merging_claims)
    if (reform_->heard.count(id)) change.merging_claims[id] = reform_->heard.at(id);
  change.merged = std::any_of(reform_->merged_in.begin(), reform_->merged_in.end(),
                              [&](uint32_t id) { return reform_->heard.count(id) > 0; });
  // Saturated: a peer's epoch is its word, and a wrap to 0 would take this view for a
  // restarted one's.
  const uint64_t epoch = reform_->highest_epoch + (reform_->highest_epoch < UINT64_MAX ? 1 : 0);
  reform_.reset();
  rejoining_ = false;
  set_view(std::move(ids), epoch);
  return change;
}

}  // namespace gossip::sgd

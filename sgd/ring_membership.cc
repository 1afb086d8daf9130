#include "sgd/ring_membership.h"

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
  reform_ = Reform{now + wait, epoch_, {}, {}, {}, {}, {}};
  return true;
}

RingMembership::Probe RingMembership::on_probe(uint32_t peer, uint64_t epoch, uint64_t next_round,
                                               Clock::time_point now,
                                               std::chrono::milliseconds wait, bool joining,
                                               std::span<const uint32_t> their_view) {
  const bool vouched = reform_ && reform_->vouched.count(peer) > 0;
  if (peer != self_ && reform_ && !member(peer) && !vouched && !joining && configured(peer)) {
    reform_->pending[peer] = {epoch, next_round};
    return Probe::kIgnored;
  }
  if (peer == self_ || (!member(peer) && !joiner(peer, epoch, joining) && !vouched) ||
      (member(peer) && epoch < epoch_))
    return Probe::kIgnored;
  if (rejoining_ && joining) return Probe::kIgnored;
  const bool started = start(now, wait);
  auto& r = *reform_;
  r.heard[peer] = next_round;
  r.highest_epoch = std::max(r.highest_epoch, epoch);
  if (member(peer))
    for (uint32_t id : their_view) {
      if (id == self_ || member(id) || !configured(id) || !r.vouched.insert(id).second) continue;
      if (auto p = r.pending.find(id); p != r.pending.end()) {
        r.heard[id] = p->second.second;
        r.highest_epoch = std::max(r.highest_epoch, p->second.first);
        r.pending.erase(p);
      }
    }
  return started ? Probe::kStarted : Probe::kHeard;
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
  std::vector<uint32_t> ids{self_};
  for (const auto& [id, next] : reform_->heard) ids.push_back(id);  // members and joiners
  for (uint32_t id : order_.ids)
    if (id != self_ && !reform_->heard.count(id)) change.lost.push_back(id);
  for (const auto& [id, next] : reform_->heard)
    if (!member(id)) change.joined.push_back(id);
  const uint64_t epoch = reform_->highest_epoch + 1;
  reform_.reset();
  rejoining_ = false;
  set_view(std::move(ids), epoch);
  return change;
}

}  // namespace gossip::sgd

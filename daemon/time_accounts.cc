#include "daemon/time_accounts.h"

#include <algorithm>

namespace gossip::daemon {

namespace {

double seconds(TimeAccounts::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void TimeAccounts::attached(uint32_t slot, Clock::time_point now) {
  if (slot >= slots_.size()) return;
  slots_[slot] = Slot{true, false, now, now};
}

void TimeAccounts::detached(uint32_t slot, Clock::time_point now) {
  if (slot >= slots_.size() || !slots_[slot].attached) return;
  wait_ends(slot, now);
  closed_attached_ += seconds(now - slots_[slot].attached_at);
  slots_[slot].attached = false;
}

void TimeAccounts::wait_begins(uint32_t slot, Clock::time_point now) {
  if (slot >= slots_.size() || !slots_[slot].attached || slots_[slot].waiting) return;
  slots_[slot].waiting = true;
  slots_[slot].wait_since = now;
}

void TimeAccounts::wait_ends(uint32_t slot, Clock::time_point now) {
  if (slot >= slots_.size() || !slots_[slot].waiting) return;
  slots_[slot].waiting = false;
  closed_wait_ += seconds(now - slots_[slot].wait_since);
}

double TimeAccounts::open_wait(Clock::time_point now) const {
  double open = 0;
  for (const Slot& s : slots_)
    if (s.waiting) open += seconds(now - s.wait_since);
  return closed_wait_ + open;
}

void TimeAccounts::round_begins(Clock::time_point now, uint32_t participants,
                                uint64_t payload_sent) {
  in_round_ = true;
  round_start_ = now;
  round_participants_ = participants;
  round_payload_start_ = payload_sent;
  round_wait_start_ = open_wait(now);
}

void TimeAccounts::round_ends(Clock::time_point now, uint64_t payload_sent) {
  if (!in_round_) return;
  in_round_ = false;
  const double d = seconds(now - round_start_);
  ++rounds_.rounds;
  rounds_.round_seconds += d;
  const auto bucket = std::lower_bound(kRoundBuckets.begin(), kRoundBuckets.end(), d);
  ++rounds_.round_buckets[static_cast<size_t>(bucket - kRoundBuckets.begin())];
  rounds_.last_round_seconds = d;
  rounds_.last_round_payload_bytes = payload_sent - std::min(payload_sent, round_payload_start_);
  const double possible = d * round_participants_;
  const double waited = open_wait(now) - round_wait_start_;
  rounds_.last_round_overlap = possible > 0 ? std::clamp(1.0 - waited / possible, 0.0, 1.0) : 0.0;
}

TimeAccounts::Snapshot TimeAccounts::snapshot(Clock::time_point now) const {
  Snapshot s = rounds_;
  s.trainer_wait_seconds = open_wait(now);
  s.trainer_attached_seconds = closed_attached_;
  for (const Slot& slot : slots_)
    if (slot.attached) s.trainer_attached_seconds += seconds(now - slot.attached_at);
  return s;
}

}  // namespace gossip::daemon

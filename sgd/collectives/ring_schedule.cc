#include "sgd/collectives/ring_schedule.h"

#include <algorithm>
#include <cassert>

namespace gossip::sgd {

RingSchedule::RingSchedule(uint32_t n, uint32_t rank, uint64_t numel, uint64_t chunk_elems)
    : n_(n), rank_(rank), numel_(numel), chunk_elems_(chunk_elems) {
  assert(n >= 1 && n <= kMaxRanks && rank < n && chunk_elems >= 1);
}

Segment RingSchedule::segment(uint32_t s) const {
  const uint64_t base = numel_ / n_;
  const uint64_t extra = numel_ % n_;
  return {s * base + std::min<uint64_t>(s, extra), base + (s < extra ? 1 : 0)};
}

uint32_t RingSchedule::send_segment(RingPhase phase, uint32_t step) const {
  // (r - k) or (r + 1 - k) mod n, kept non-negative.
  const uint64_t shift = phase == RingPhase::kReduceScatter ? 0 : 1;
  return static_cast<uint32_t>((rank_ + shift + n_ - step % n_) % n_);
}

uint32_t RingSchedule::recv_segment(RingPhase phase, uint32_t step) const {
  // What the left neighbor (rank - 1) sends at the same step.
  return static_cast<uint32_t>((send_segment(phase, step) + n_ - 1) % n_);
}

uint64_t RingSchedule::chunks(uint32_t s) const {
  const uint64_t len = segment(s).numel;
  return (len + chunk_elems_ - 1) / chunk_elems_;
}

Segment RingSchedule::chunk(uint32_t s, uint64_t c) const {
  const Segment seg = segment(s);
  const uint64_t off = c * chunk_elems_;
  assert(off < seg.numel);
  return {seg.offset + off, std::min(chunk_elems_, seg.numel - off)};
}

uint32_t RingSchedule::sequence(RingPhase phase, uint32_t step, uint64_t chunk) const {
  assert(chunk < kMaxChunks);
  const uint64_t slot = (phase == RingPhase::kReduceScatter ? 0 : steps()) + step;
  return static_cast<uint32_t>((slot << kChunkBits) | chunk);
}

uint64_t RingSchedule::message_count() const {
  uint64_t total = 0;
  for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather})
    for (uint32_t step = 0; step < steps(); ++step) total += chunks(send_segment(phase, step));
  return total;
}

RingOrder ring_order(uint32_t self, const std::vector<uint32_t>& peer_ids) {
  RingOrder order;
  order.ids = peer_ids;
  order.ids.push_back(self);
  std::sort(order.ids.begin(), order.ids.end());
  order.rank = static_cast<uint32_t>(std::find(order.ids.begin(), order.ids.end(), self) -
                                     order.ids.begin());
  return order;
}

}  // namespace gossip::sgd

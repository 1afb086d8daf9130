// The ring schedule without I/O: segments partition the buffer, every rank's
// receive at a step is its left neighbor's send, what is received at step k is
// sent at step k + 1, and a simulated ring built on the schedule alone computes
// the exact sum on every rank for every n and length, however it is chunked.

#include "sgd/collectives/ring_schedule.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

namespace gossip::sgd {
namespace {

TEST(RingSchedule, SegmentsPartitionTheBufferAsEvenlyAsPossible) {
  for (uint32_t n : {1u, 2u, 3u, 7u, 16u})
    for (uint64_t numel : {0ull, 1ull, 2ull, 15ull, 16ull, 17ull, 1000003ull}) {
      RingSchedule s(n, 0, numel, 4);
      uint64_t next = 0;
      for (uint32_t i = 0; i < n; ++i) {
        const Segment seg = s.segment(i);
        EXPECT_EQ(seg.offset, next) << "n=" << n << " numel=" << numel << " segment " << i;
        EXPECT_TRUE(seg.numel == numel / n || seg.numel == numel / n + 1);
        next += seg.numel;
      }
      EXPECT_EQ(next, numel);
    }
}

TEST(RingSchedule, ChunksCoverEachSegmentInOrder) {
  RingSchedule s(3, 1, 1001, 64);  // segments of 334, 334, 333
  for (uint32_t seg = 0; seg < 3; ++seg) {
    uint64_t next = s.segment(seg).offset;
    for (uint64_t c = 0; c < s.chunks(seg); ++c) {
      const Segment ck = s.chunk(seg, c);
      EXPECT_EQ(ck.offset, next);
      EXPECT_LE(ck.numel, 64u);
      EXPECT_GT(ck.numel, 0u);
      next += ck.numel;
    }
    EXPECT_EQ(next, s.segment(seg).offset + s.segment(seg).numel);
  }
  EXPECT_EQ(s.chunks(0), 6u);  // ceil(334 / 64)
  RingSchedule tiny(4, 0, 2, 64);
  EXPECT_EQ(tiny.chunks(3), 0u);  // numel < n: empty segments have no chunks
}

TEST(RingSchedule, EachReceiveIsTheLeftNeighborsSendAndIsForwardedNextStep) {
  for (uint32_t n : {2u, 3u, 5u, 8u, 16u}) {
    for (uint32_t r = 0; r < n; ++r) {
      RingSchedule me(n, r, 100, 8);
      RingSchedule left(n, (r + n - 1) % n, 100, 8);
      for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather})
        for (uint32_t k = 0; k < me.steps(); ++k) {
          EXPECT_EQ(me.recv_segment(phase, k), left.send_segment(phase, k));
          if (k + 1 < me.steps()) {
            EXPECT_EQ(me.recv_segment(phase, k), me.send_segment(phase, k + 1));
          }
        }
      // The last reduce-scatter receive completes the owned segment, which the
      // all-gather sends first.
      EXPECT_EQ(me.recv_segment(RingPhase::kReduceScatter, me.steps() - 1), me.owned_segment());
      EXPECT_EQ(me.send_segment(RingPhase::kAllGather, 0), me.owned_segment());
      // Every rank owns a different segment.
      std::set<uint32_t> sent;
      for (uint32_t k = 0; k < me.steps(); ++k)
        sent.insert(me.send_segment(RingPhase::kReduceScatter, k));
      EXPECT_EQ(sent.size(), n - 1) << "a segment sent twice in one phase";
    }
  }
}

TEST(RingSchedule, SequencesAreUniqueAndMessageCountIsTwoNMinusOneSegmentsWorth) {
  RingSchedule s(4, 2, 1000, 32);
  std::set<uint32_t> seen;
  uint64_t count = 0;
  for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather})
    for (uint32_t k = 0; k < s.steps(); ++k)
      for (uint64_t c = 0; c < s.chunks(s.send_segment(phase, k)); ++c) {
        EXPECT_TRUE(seen.insert(s.sequence(phase, k, c)).second);
        ++count;
      }
  EXPECT_EQ(count, s.message_count());
  EXPECT_EQ(count, 2u * 3u * 8u);  // 2 phases x 3 steps x ceil(250 / 32) chunks
}

// At the most ranks gossipd takes, the (phase, step) slots and the chunks still name
// every message apart: the first and last slots, with the first and the last chunk.
TEST(RingSchedule, SequencesStayApartAtTheLargestRingAndChunkCount) {
  const uint32_t n = RingSchedule::kMaxRanks;
  const RingSchedule s(n, n - 1, uint64_t{n} * 4, 1);
  std::set<uint32_t> seen;
  for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather})
    for (uint32_t k : {0u, 1u, s.steps() - 2, s.steps() - 1})
      for (uint64_t c : {uint64_t{0}, uint64_t{1}, RingSchedule::kMaxChunks - 1})
        EXPECT_TRUE(seen.insert(s.sequence(phase, k, c)).second) << k << " " << c;
  EXPECT_EQ(seen.size(), 2u * 4u * 3u);
  // The last slot's last chunk is the largest name: nothing wrapped past 32 bits.
  EXPECT_EQ(s.sequence(RingPhase::kAllGather, s.steps() - 1, RingSchedule::kMaxChunks - 1),
            ((2u * (n - 1) - 1) << RingSchedule::kChunkBits) | (RingSchedule::kMaxChunks - 1));
}

TEST(RingSchedule, OrderSortsIdsAndFindsNeighbors) {
  RingOrder o = ring_order(5, {9, 2, 7});
  EXPECT_EQ(o.ids, (std::vector<uint32_t>{2, 5, 7, 9}));
  EXPECT_EQ(o.rank, 1u);
  EXPECT_EQ(o.left_id(), 2u);
  EXPECT_EQ(o.right_id(), 7u);
  RingOrder last = ring_order(9, {2, 5, 7});
  EXPECT_EQ(last.right_id(), 2u);  // wraps around
  RingOrder alone = ring_order(3, {});
  EXPECT_EQ(alone.left_id(), 3u);
  EXPECT_EQ(alone.right_id(), 3u);
}

// The ring run in memory on the schedule alone: every message is a copy of the
// sender's chunk, delivered in the order the schedule sends them.
void simulate(uint32_t n, uint64_t numel, uint64_t chunk) {
  std::vector<std::vector<int64_t>> data(n, std::vector<int64_t>(numel));
  std::vector<int64_t> want(numel, 0);
  for (uint32_t r = 0; r < n; ++r)
    for (uint64_t i = 0; i < numel; ++i) {
      data[r][i] = int64_t{r + 1} * 1000003 + static_cast<int64_t>(i) * 7;
      want[i] += data[r][i];
    }
  std::vector<RingSchedule> s;
  for (uint32_t r = 0; r < n; ++r) s.emplace_back(n, r, numel, chunk);
  for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather})
    for (uint32_t k = 0; k + 1 < n; ++k) {
      // All sends of a step happen before its receives are applied (what the pipeline
      // guarantees chunk by chunk).
      std::vector<std::vector<std::vector<int64_t>>> outbox(n);
      for (uint32_t r = 0; r < n; ++r) {
        const uint32_t seg = s[r].send_segment(phase, k);
        for (uint64_t c = 0; c < s[r].chunks(seg); ++c) {
          const Segment ck = s[r].chunk(seg, c);
          outbox[r].emplace_back(data[r].begin() + ck.offset,
                                 data[r].begin() + ck.offset + ck.numel);
        }
      }
      for (uint32_t r = 0; r < n; ++r) {
        const auto& in = outbox[(r + n - 1) % n];
        const uint32_t seg = s[r].recv_segment(phase, k);
        ASSERT_EQ(in.size(), s[r].chunks(seg));
        for (uint64_t c = 0; c < in.size(); ++c) {
          const Segment ck = s[r].chunk(seg, c);
          ASSERT_EQ(in[c].size(), ck.numel);
          for (uint64_t i = 0; i < ck.numel; ++i) {
            if (phase == RingPhase::kReduceScatter)
              data[r][ck.offset + i] += in[c][i];
            else
              data[r][ck.offset + i] = in[c][i];
          }
        }
      }
    }
  for (uint32_t r = 0; r < n; ++r)
    EXPECT_EQ(data[r], want) << "n=" << n << " numel=" << numel << " rank " << r;
}

TEST(RingSchedule, SimulatedRingSumsExactlyOnEveryRank) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 8u, 16u})
    for (uint64_t numel : std::vector<uint64_t>{0, 1, n - 1, n + 1, 1000})
      for (uint64_t chunk : {1ull, 3ull, 64ull}) simulate(n, numel, chunk);
}

}  // namespace
}  // namespace gossip::sgd

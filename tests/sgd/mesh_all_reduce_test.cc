// The mesh all-reduces (tree, butterfly, master; sgd/collectives/) over the TCP
// transport's mesh links: N ranks as threads of this process, each with its own
// transport, on loopback sockets. Results are checked against sums computed here
// independently, and every rank must end with the same bits, for rank counts that
// are and are not powers of two.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compression/codec_spec.h"
#include "compression/error_feedback.h"
#include "peers/ring_channel.h"
#include "sgd/collectives/algorithm.h"
#include "sgd/collectives/butterfly_all_reduce.h"
#include "sgd/collectives/tree_all_reduce.h"
#include "tests/sgd/all_reduce_checks.h"

namespace gossip::sgd {
namespace {

using testing::expect_all_ok;
using testing::expect_same_bits;
using testing::random_data;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Rank {
  std::unique_ptr<peers::TrafficCounters> traffic;
  std::unique_ptr<peers::RingTransport> transport;
  std::vector<std::unique_ptr<peers::RingChannel>> channels;
  std::vector<peers::RingChannel*> links;  // by rank
  std::unique_ptr<MeshAllReduce> algorithm;
};

uint32_t id(uint32_t r) { return 10 + r; }

void run_all(uint32_t n, const std::function<void(uint32_t)>& f) {
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) threads.emplace_back(f, r);
  for (auto& t : threads) t.join();
}

class MeshTest : public ::testing::TestWithParam<Algorithm> {
 protected:
  // n ranks linked to their partners under the algorithm; session 1 unless `sessions`
  // says otherwise (rank r's session: what it presents and what it expects).
  std::vector<Status> start(uint32_t n, std::vector<uint64_t> sessions = {},
                            std::chrono::milliseconds timeout = 5s) {
    ranks_.clear();
    ranks_.resize(n);
    std::vector<uint32_t> all;
    for (uint32_t r = 0; r < n; ++r) all.push_back(id(r));
    for (uint32_t r = 0; r < n; ++r) {
      ranks_[r].traffic = std::make_unique<peers::TrafficCounters>(all);
      peers::RingTransportOptions o;
      o.traffic = ranks_[r].traffic.get();
      auto t = peers::make_ring_transport("tcp", o);
      EXPECT_TRUE(t.is_ok()) << t.status().message();
      ranks_[r].transport = std::move(t).value();
      ranks_[r].algorithm = make_mesh_all_reduce(GetParam());
    }
    std::vector<Status> results(n);
    run_all(n, [&](uint32_t r) {
      std::vector<peers::MeshEnd> ends;
      const auto partners = mesh_partners(GetParam(), n, r);
      for (uint32_t q : partners)
        ends.push_back({.peer = id(q),
                        .host = "127.0.0.1",
                        .port = ranks_[q].transport->port(),
                        .session = sessions.empty() ? 1 : sessions[r],
                        .peer_session = sessions.empty() ? 1 : sessions[r]});
      auto chs = ranks_[r].transport->connect_mesh(id(r), ends, {Clock::now() + timeout, nullptr});
      results[r] = chs.status();
      if (!chs.is_ok()) return;
      ranks_[r].channels = std::move(chs).value();
      ranks_[r].links.assign(n, nullptr);
      for (size_t i = 0; i < partners.size(); ++i)
        ranks_[r].links[partners[i]] = ranks_[r].channels[i].get();
    });
    return results;
  }

  std::vector<Status> mean(std::vector<std::vector<float>>& data, uint64_t round,
                           const Compression& c = {},
                           std::vector<compression::ErrorFeedback*> ef = {},
                           uint64_t chunk_elems = 4096, uint64_t gather_below = 32 << 10,
                           std::chrono::milliseconds timeout = 10s) {
    const uint32_t n = static_cast<uint32_t>(data.size());
    std::vector<Status> st(n);
    run_all(n, [&](uint32_t r) {
      RingOptions o;
      o.size = n;
      o.rank = r;
      o.round = round;
      o.chunk_elems = chunk_elems;
      o.gather_below_bytes = gather_below;
      o.wait = {Clock::now() + timeout, nullptr};
      o.compression = c;
      if (!ef.empty()) o.compression.error_feedback = ef[r];
      st[r] = ranks_[r].algorithm->mean(ranks_[r].links, data[r], o);
    });
    return st;
  }

  std::vector<Rank> ranks_;
};

TEST(MeshPartners, AreSymmetricAndButterflyRanksMapBothWays) {
  for (Algorithm a : {Algorithm::kTree, Algorithm::kButterfly, Algorithm::kMaster})
    for (uint32_t n = 1; n <= 33; ++n)
      for (uint32_t r = 0; r < n; ++r)
        for (uint32_t q : mesh_partners(a, n, r)) {
          ASSERT_LT(q, n);
          ASSERT_NE(q, r);
          const auto back = mesh_partners(a, n, q);
          ASSERT_TRUE(std::find(back.begin(), back.end(), r) != back.end())
              << algorithm_name(a) << " n=" << n << ": " << r << " links " << q << " but not back";
        }
  for (uint32_t n = 1; n <= 33; ++n) {
    const Butterfly b(n);
    EXPECT_EQ(b.group() + b.extras(), n);
    uint32_t members = 0;
    for (uint32_t r = 0; r < n; ++r)
      if (auto v = b.member(r)) {
        ++members;
        EXPECT_EQ(b.rank_of(*v), r);
      }
    EXPECT_EQ(members, b.group());
  }
  EXPECT_EQ(mesh_partners(Algorithm::kMaster, 5, 0), (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(mesh_partners(Algorithm::kTree, 7, 1), (std::vector<uint32_t>{0, 3, 4}));
  // 6 = 4 + 2: ranks 0 and 2 hand over to 1 and 3; members 1, 3, 4, 5.
  EXPECT_EQ(mesh_partners(Algorithm::kButterfly, 6, 0), (std::vector<uint32_t>{1}));
  EXPECT_EQ(mesh_partners(Algorithm::kButterfly, 6, 1), (std::vector<uint32_t>{0, 3, 4}));
  EXPECT_EQ(parse_algorithm("butterfly"), Algorithm::kButterfly);
  EXPECT_FALSE(parse_algorithm("bfly").has_value());
}

TEST_P(MeshTest, MeanMatchesAnIndependentSumForAnyLengthAndRankCount) {
  for (uint32_t n : {2u, 3u, 4u, 5u, 6u, 8u}) {
    expect_all_ok(start(n));
    uint64_t round = 0;
    // Lengths below n and not multiples of anything; small ones both as whole vectors
    // (butterfly's recursive doubling) and through the chunked path.
    for (const auto& [numel, gather_below] :
         std::vector<std::pair<uint64_t, uint64_t>>{{0, 0},
                                                    {1, 0},
                                                    {n - 1, 0},
                                                    {n + 1, 0},
                                                    {1, 1 << 20},
                                                    {n + 1, 1 << 20},
                                                    {5000, 1 << 20},
                                                    {300007, 32 << 10}}) {
      auto data = random_data(n, numel, 100 * n + numel);
      std::vector<double> want(numel, 0.0), scale(numel, 0.0);
      for (const auto& v : data)
        for (uint64_t i = 0; i < numel; ++i) {
          want[i] += v[i];
          scale[i] += std::fabs(v[i]);
        }
      expect_all_ok(mean(data, round++, {}, {}, 4096, gather_below));
      for (uint64_t i = 0; i < numel; ++i) {
        const double tol = 1e-6 * scale[i] / n + 1e-30;
        ASSERT_NEAR(data[0][i], want[i] / n, tol)
            << "n=" << n << " numel=" << numel << " element " << i;
      }
      expect_same_bits(data);
    }
  }
}

TEST_P(MeshTest, CompressedHopsStayCloseAndIdentical) {
  for (uint32_t n : {3u, 4u}) {
    expect_all_ok(start(n));
    testing::check_compressed_hops(n, [&](auto&&... a) { return mean(a...); });
  }
}

TEST_P(MeshTest, SparseContributionsAreGatheredAndSummedInRankOrder) {
  for (uint32_t n : {3u, 4u, 5u}) {
    expect_all_ok(start(n));
    for (const char* spec : {"topk:0.01", "randk:0.05"})
      testing::check_sparse_contributions(n, spec, [&](auto&&... a) { return mean(a...); });
  }
}

TEST_P(MeshTest, ADeadRankFailsTheOthersWithinTheTimeoutAndLeavesTheirData) {
  const uint32_t n = 5;
  expect_all_ok(start(n));
  auto data = random_data(n, 200000, 3);
  const auto t0 = Clock::now();
  std::vector<Status> st(n);
  run_all(n, [&](uint32_t r) {
    if (r == 1) {  // dies: its connections close before it sends anything
      ranks_[r].channels.clear();
      return;
    }
    RingOptions o;
    o.size = n;
    o.rank = r;
    o.chunk_elems = 4096;
    o.wait = {Clock::now() + 2s, nullptr};
    const auto before = data[r];
    st[r] = ranks_[r].algorithm->mean(ranks_[r].links, data[r], o);
    EXPECT_EQ(data[r], before) << "rank " << r << ": a failed mean must leave the data as it was";
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 4.0) << "2x the timeout";
  for (uint32_t r : {0u, 2u, 3u, 4u})
    EXPECT_FALSE(st[r].is_ok()) << "rank " << r << " succeeded without rank 1";
}

TEST_P(MeshTest, ARankOfAnotherSessionIsRefused) {
  for (const Status& st : start(2, {1, 2}, 1s)) {
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), Status::Code::kTimeout) << st.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MeshTest,
                         ::testing::Values(Algorithm::kTree, Algorithm::kButterfly,
                                           Algorithm::kMaster),
                         [](const auto& info) { return std::string(algorithm_name(info.param)); });

}  // namespace
}  // namespace gossip::sgd

#include "compression/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <set>
#include <thread>

namespace gossip::compression {
namespace {

TEST(ThreadPool, CoversTheRangeExactlyOnceWithAnyThreadCount) {
  for (size_t threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {0, 1, 15, 16, 17, 1000, 100003}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, 16, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i], 1) << threads << " threads, n " << n << " i " << i;
    }
  }
}

TEST(ThreadPool, RunsOnSeveralThreadsAndIsReusable) {
  ThreadPool pool(2);
  for (int round = 0; round < 50; ++round) {
    std::mutex mu;
    std::set<std::thread::id> ids;
    pool.parallel_for(1 << 16, 1 << 10, [&](size_t, size_t) {
      std::lock_guard lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    ASSERT_EQ(ids.size(), 2u) << "round " << round;
  }
}

TEST(ThreadPool, SplitIsDeterministicAlignedAndRespectsTheGrain) {
  auto a = ThreadPool::split(1000, 100, 4);
  EXPECT_EQ(a, ThreadPool::split(1000, 100, 4));
  EXPECT_EQ(a.size(), 4u);
  for (auto [b, e] : a) EXPECT_EQ(b % 16, 0u);
  EXPECT_EQ(a.back().second, 1000u);
  EXPECT_EQ(ThreadPool::split(1000, 600, 4).size(), 1u) << "too small to split";
  EXPECT_TRUE(ThreadPool::split(0, 1, 4).empty());
}

TEST(ThreadPool, FreeFunctionRunsInlineWithoutAPool) {
  size_t calls = 0, total = 0;
  parallel_for(nullptr, 12345, 16, [&](size_t b, size_t e) {
    ++calls;
    total += e - b;
  });
  EXPECT_EQ(calls, 1u);
  EXPECT_EQ(total, 12345u);
}

}  // namespace
}  // namespace gossip::compression

// The NCCL all-reduce: option checks and the no-device paths run everywhere; the
// rest needs a GPU (two for the 2-rank test: NCCL refuses two ranks on one GPU)
// and skips with nccl_available()'s reason where there is none.

#include "sgd/collectives/nccl/nccl_all_reduce.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compression/codec.h"

namespace gossip::sgd {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

#define SKIP_WITHOUT_GPU()                               \
  do {                                                   \
    const Status avail = nccl_available();               \
    if (!avail.is_ok()) GTEST_SKIP() << avail.message(); \
  } while (0)

CollectiveOptions within(std::chrono::milliseconds timeout) {
  CollectiveOptions o;
  o.deadline = Clock::now() + timeout;
  return o;
}

// A 1-rank communicator on device 0 (NCCL allows a single rank): the mean is the identity.
std::unique_ptr<NcclAllReduce> single_rank(size_t staging_bytes) {
  auto id = nccl_unique_id();
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  if (!id) return nullptr;
  auto ar = NcclAllReduce::create({.rank = 0,
                                   .size = 1,
                                   .unique_id = *id,
                                   .device = 0,
                                   .staging_bytes = staging_bytes,
                                   .deadline = Clock::now() + 60s});
  EXPECT_TRUE(ar.is_ok()) << ar.status().message();
  return ar ? std::move(*ar) : nullptr;
}

std::vector<float> pattern(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 1009) - 17.0f;
  return v;
}

TEST(NcclAllReduceTest, RefusesCompression) {
  CollectiveOptions o = within(1s);
  EXPECT_TRUE(nccl_accepts(o).is_ok());
  const auto none = compression::make_none();
  o.compression.codec = none.get();
  EXPECT_TRUE(nccl_accepts(o).is_ok());
  const auto fp16 = compression::make_fp16();
  o.compression.codec = fp16.get();
  const Status st = nccl_accepts(o);
  EXPECT_EQ(st.code(), Status::Code::kInvalid);
  EXPECT_EQ(st.message(), "nccl reduces fp32 only; compression needs the tcp or rdma ring");
}

TEST(NcclAllReduceTest, RejectsInvalidOptions) {
  const auto deadline = Clock::now() + 1s;
  for (const NcclOptions& o :
       {NcclOptions{.rank = 0, .size = 0, .deadline = deadline},
        NcclOptions{.rank = 2, .size = 2, .deadline = deadline},
        NcclOptions{.rank = 0, .size = 1, .device = -1, .deadline = deadline},
        NcclOptions{.rank = 0, .size = 1, .staging_bytes = 4, .deadline = deadline}}) {
    auto ar = NcclAllReduce::create(o);
    ASSERT_FALSE(ar.is_ok());
    EXPECT_EQ(ar.status().code(), Status::Code::kInvalid) << ar.status().message();
  }
}

// Without a device: a Status with the reason, not a crash; with one: an id.
TEST(NcclAllReduceTest, UniqueIdNeedsADevice) {
  const Status avail = nccl_available();
  auto id = nccl_unique_id();
  if (avail.is_ok()) {
    ASSERT_TRUE(id.is_ok()) << id.status().message();
    EXPECT_TRUE(std::any_of(id->begin(), id->end(), [](char c) { return c != 0; }));
  } else {
    ASSERT_FALSE(id.is_ok());
    EXPECT_FALSE(avail.message().empty());
    EXPECT_EQ(id.status().message(), avail.message());
    auto ar = NcclAllReduce::create({.rank = 0, .size = 1, .deadline = Clock::now() + 1s});
    ASSERT_FALSE(ar.is_ok());
    EXPECT_EQ(ar.status().message(), avail.message());
  }
}

TEST(NcclAllReduceTest, SingleRankHostRoundTrip) {
  SKIP_WITHOUT_GPU();
  constexpr size_t kStaging = 4096;  // 512 floats a slot: the larger sizes go in chunks
  auto ar = single_rank(kStaging);
  ASSERT_NE(ar, nullptr);
  for (size_t n : {size_t{0}, size_t{1}, size_t{511}, size_t{512}, size_t{513}, size_t{1025},
                   size_t{1000003}}) {
    const std::vector<float> want = pattern(n, 0.5f);
    std::vector<float> data = want;
    const Status st = ar->all_reduce_mean(data, 0, within(60s));
    ASSERT_TRUE(st.is_ok()) << "n=" << n << ": " << st.message();
    EXPECT_EQ(data, want) << "n=" << n;
  }
  // Compression is refused through the object too, and leaves it usable.
  const auto fp16 = compression::make_fp16();
  CollectiveOptions o = within(10s);
  o.compression.codec = fp16.get();
  std::vector<float> data(8, 1.0f);
  EXPECT_EQ(ar->all_reduce_mean(data, 0, o).code(), Status::Code::kInvalid);
  EXPECT_FALSE(ar->broken());
}

TEST(NcclAllReduceTest, SingleRankDefaultStaging) {
  SKIP_WITHOUT_GPU();
  auto ar = single_rank(NcclOptions{}.staging_bytes);
  ASSERT_NE(ar, nullptr);
  const std::vector<float> want = pattern(1000003, 0.25f);
  std::vector<float> data = want;
  const Status st = ar->all_reduce_mean(data, 0, within(60s));
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(data, want);
}

TEST(NcclAllReduceTest, SingleRankDeviceRoundTrip) {
  SKIP_WITHOUT_GPU();
  auto ar = single_rank(4096);
  ASSERT_NE(ar, nullptr);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000003}}) {
    const std::vector<float> want = pattern(n, 2.0f);
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), cudaSuccess);
    float* d = static_cast<float*>(p);
    ASSERT_EQ(cudaMemcpy(d, want.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    const Status st = ar->all_reduce_mean_device(d, n, stream, within(60s));
    EXPECT_TRUE(st.is_ok()) << "n=" << n << ": " << st.message();
    std::vector<float> got(n);
    EXPECT_EQ(cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, want) << "n=" << n;
    EXPECT_EQ(cudaFree(d), cudaSuccess);
  }
  // Host memory handed to the device entry point is refused before NCCL sees it.
  std::vector<float> host(16, 1.0f);
  EXPECT_EQ(ar->all_reduce_mean_device(host.data(), host.size(), stream, within(10s)).code(),
            Status::Code::kInvalid);
  EXPECT_FALSE(ar->broken());
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// Rank 1 never joins: init must give up at the deadline (after aborting), not hang.
TEST(NcclAllReduceTest, InitTimesOutWhenAPeerIsMissing) {
  SKIP_WITHOUT_GPU();
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.is_ok()) << id.status().message();
  const auto start = Clock::now();
  auto ar = NcclAllReduce::create({.rank = 0,
                                   .size = 2,
                                   .unique_id = *id,
                                   .device = 0,
                                   .staging_bytes = 4096,
                                   .deadline = start + 2s});
  ASSERT_FALSE(ar.is_ok());
  EXPECT_EQ(ar.status().code(), Status::Code::kTimeout) << ar.status().message();
  EXPECT_NE(ar.status().message().find("ncclCommInitRankConfig"), std::string::npos)
      << ar.status().message();
  EXPECT_LT(Clock::now() - start, 30s);
}

// Two ranks as two threads on devices 0 and 1: the mean, then a round rank 1 does
// not join: rank 0 times out, aborts, and refuses further calls.
TEST(NcclAllReduceTest, TwoRanksOnTwoGpus) {
  SKIP_WITHOUT_GPU();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2)
    GTEST_SKIP() << "needs 2 CUDA devices (NCCL refuses two ranks on one GPU); this node has "
                 << devices;
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.is_ok()) << id.status().message();
  constexpr size_t kN = 1000003;
  std::array<std::unique_ptr<NcclAllReduce>, 2> ranks;
  std::array<Status, 2> created, reduced;
  std::array<std::vector<float>, 2> data;
  std::array<std::thread, 2> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      auto ar = NcclAllReduce::create({.rank = r,
                                       .size = 2,
                                       .unique_id = *id,
                                       .device = static_cast<int>(r),
                                       .staging_bytes = 1 << 16,
                                       .deadline = Clock::now() + 60s});
      created[r] = ar.status();
      if (!ar) return;
      ranks[r] = std::move(*ar);
      data[r] = pattern(kN, static_cast<float>(r + 1));  // i and 2i: the mean 1.5i is exact
      reduced[r] = ranks[r]->all_reduce_mean(data[r], 0, within(60s));
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(created[r].is_ok()) << "rank " << r << ": " << created[r].message();
    ASSERT_TRUE(reduced[r].is_ok()) << "rank " << r << ": " << reduced[r].message();
  }
  const std::vector<float> a = pattern(kN, 1.0f), b = pattern(kN, 2.0f);
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_EQ(data[0][i], (a[i] + b[i]) / 2) << "i=" << i;
    ASSERT_EQ(data[1][i], data[0][i]) << "i=" << i;
  }

  std::vector<float> alone = pattern(1000, 1.0f);
  const std::vector<float> before = alone;
  const Status st = ranks[0]->all_reduce_mean(alone, 1, within(1s));
  EXPECT_EQ(st.code(), Status::Code::kTimeout) << st.message();
  EXPECT_EQ(alone, before);
  EXPECT_TRUE(ranks[0]->broken());
  const Status again = ranks[0]->all_reduce_mean(alone, 2, within(1s));
  EXPECT_EQ(again.code(), Status::Code::kClosed) << again.message();
}

}  // namespace
}  // namespace gossip::sgd

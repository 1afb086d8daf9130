// Models in bf16 and fp16 across real gossipd processes on loopback: the trainers'
// replicas hold 16-bit elements, the daemons average in fp32 and round the result
// back to nearest even; a gradient bucket is read and written by its range only, so
// what the trainer writes beside it meanwhile survives; a trainer of another dtype
// is refused with both; a NaN in a 16-bit replica stops at its own daemon.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <latch>
#include <thread>

#include "compression/half.h"
#include "gossip/client.h"
#include "harness.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

using compression::bf16_to_float;
using compression::float_to_bf16;
using compression::float_to_fp16;
using compression::fp16_to_float;
using namespace std::chrono_literals;

constexpr size_t kNumel = 1000;

uint16_t to_bits(DType d, float x) {
  return d == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
}
float to_float(DType d, uint16_t h) {
  return d == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
}

uint16_t* elements(Model& m, size_t tensor) {
  return reinterpret_cast<uint16_t*>(m.bytes[tensor].data());
}

// What trainer t of node `node` writes at element k: representable in both formats.
float value(int node, size_t k) { return static_cast<float>((k % 97) * (node + 1)) / 64.0f; }

class SixteenBit : public ::testing::TestWithParam<DType> {};

// Local SGD: each replica is the mean rounded to the model's dtype; the mean is not
// representable at many elements, so the rounding is tested and not just copied.
TEST_P(SixteenBit, ReplicasHoldTheMeanRoundedToTheirDtype) {
  const DType dtype = GetParam();
  Cluster cluster(2, {"--period", "1", "--round-timeout", "30"});
  cluster.start_all();
  std::vector<std::vector<uint16_t>> after(2);
  std::vector<std::string> errors(2);
  {
    std::vector<std::jthread> threads;
    for (int node = 0; node < 2; ++node)
      threads.emplace_back([&, node] {
        auto client = connect_to(cluster, node);
        if (!client) return;
        auto model = client->attach({{"w", kNumel, dtype}, {"b", 3, dtype}});
        if (!model) {
          errors[node] = model.status().message();
          return;
        }
        if (!model->tensors.empty() || model->bytes[0].size() != 2 * kNumel) {
          errors[node] = "a 16-bit model has no float spans and 2 bytes an element";
          return;
        }
        uint16_t* w = elements(*model, 0);
        for (size_t k = 0; k < kNumel; ++k) w[k] = to_bits(dtype, value(node, k) + 1.0f / 1024);
        auto r = client->sync();
        if (!r) {
          errors[node] = r.status().message();
          return;
        }
        after[node].assign(w, w + kNumel);
      });
  }
  for (int node = 0; node < 2; ++node) ASSERT_EQ(errors[node], "") << cluster.log(node);
  size_t rounded = 0;
  for (size_t k = 0; k < kNumel; ++k) {
    const float a = to_float(dtype, to_bits(dtype, value(0, k) + 1.0f / 1024));
    const float b = to_float(dtype, to_bits(dtype, value(1, k) + 1.0f / 1024));
    const float mean = (a + b) / 2;
    ASSERT_EQ(after[0][k], to_bits(dtype, mean)) << "element " << k;
    ASSERT_EQ(after[1][k], after[0][k]) << "element " << k;
    rounded += to_float(dtype, after[0][k]) != mean;
  }
  EXPECT_GT(rounded, kNumel / 10) << "the means were representable: nothing was rounded";
  EXPECT_NE(
      cluster.log(0).find(std::string("parameters (") + (dtype == DType::kBF16 ? "bf16" : "f16")),
      std::string::npos)
      << cluster.log(0);
}

// Synchronous SGD with buckets: the daemon reads bucket [0, 500) when it is handed
// in and writes its mean back there only; what the trainer writes at [500, 1000)
// meanwhile (the next bucket's gradients) is what it then hands in.
TEST_P(SixteenBit, ABucketIsReadAndWrittenByItsRangeOnly) {
  const DType dtype = GetParam();
  Cluster cluster(2, {"--strategy", "allreduce", "--round-timeout", "30"});
  cluster.start_all();
  std::vector<std::vector<uint16_t>> after(2);
  std::vector<std::string> errors(2);
  std::latch attached(2);
  {
    std::vector<std::jthread> threads;
    for (int node = 0; node < 2; ++node)
      threads.emplace_back([&, node] {
        auto client = connect_to(cluster, node);
        if (!client) return;
        auto model = client->attach({{"g", kNumel, dtype}});
        attached.count_down();
        if (!model) {
          errors[node] = model.status().message();
          return;
        }
        attached.wait();
        uint16_t* g = elements(*model, 0);
        for (size_t k = 0; k < 500; ++k) g[k] = to_bits(dtype, value(node, k));
        if (Status st = client->send_bucket(0, 500, false); !st) {
          errors[node] = st.message();
          return;
        }
        // The next bucket's gradients, written while the first one is averaged.
        for (size_t k = 500; k < kNumel; ++k) g[k] = to_bits(dtype, value(node, k) * 2);
        if (Status st = client->send_bucket(500, 500, true); !st) {
          errors[node] = st.message();
          return;
        }
        auto r = client->wait_buckets();
        if (!r) {
          errors[node] = r.status().message();
          return;
        }
        after[node].assign(g, g + kNumel);
      });
  }
  for (int node = 0; node < 2; ++node) ASSERT_EQ(errors[node], "") << cluster.log(node);
  for (size_t k = 0; k < kNumel; ++k) {
    const float scale = k < 500 ? 1.0f : 2.0f;
    const float mean = (to_float(dtype, to_bits(dtype, value(0, k) * scale)) +
                        to_float(dtype, to_bits(dtype, value(1, k) * scale))) /
                       2;
    ASSERT_EQ(after[0][k], to_bits(dtype, mean)) << "element " << k;
    ASSERT_EQ(after[1][k], after[0][k]) << "element " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Arena, SixteenBit, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) {
                           return std::string(info.param == DType::kBF16 ? "Bf16" : "Fp16");
                         });

TEST(SixteenBitArena, ATrainerOfAnotherDtypeIsRefusedWithBoth) {
  Cluster cluster(1, {});
  cluster.start_all();
  auto first = connect_to(cluster, 0);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->attach({{"w", 64, DType::kBF16}}).is_ok());
  auto second = connect_to(cluster, 0);
  ASSERT_TRUE(second);
  auto refused = second->attach({{"w", 64}});
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("node has bf16[64], trainer has f32[64]"),
            std::string::npos)
      << refused.status().message();
  auto mixed = second->attach({{"w", 64, DType::kBF16}, {"b", 2, DType::kF32}});
  ASSERT_FALSE(mixed.is_ok());
  EXPECT_NE(mixed.status().message().find("one dtype for the whole model"), std::string::npos)
      << mixed.status().message();
}

// A bf16 NaN (an overflowing fp16 step, say) is caught by its own daemon's guard in
// fp32, and never reaches the other node.
TEST(SixteenBitArena, ANanInABf16ReplicaStopsAtItsDaemon) {
  Cluster cluster(2, {"--period", "1", "--round-timeout", "30"});
  cluster.start_all();
  std::vector<std::vector<uint16_t>> after(2);
  std::vector<std::string> errors(2);
  {
    std::vector<std::jthread> threads;
    for (int node = 0; node < 2; ++node)
      threads.emplace_back([&, node] {
        auto client = connect_to(cluster, node);
        if (!client) return;
        auto model = client->attach({{"w", 64, DType::kBF16}});
        if (!model) {
          errors[node] = model.status().message();
          return;
        }
        uint16_t* w = elements(*model, 0);
        for (size_t k = 0; k < 64; ++k) w[k] = float_to_bf16(1.0f + node);
        if (node == 1) w[5] = 0x7fc0;  // NaN
        auto r = client->sync();
        if (!r) {
          errors[node] = r.status().message();
          return;
        }
        after[node].assign(w, w + 64);
      });
  }
  for (int node = 0; node < 2; ++node) ASSERT_EQ(errors[node], "") << cluster.log(node);
  for (int node = 0; node < 2; ++node)
    for (size_t k = 0; k < 64; ++k)
      ASSERT_TRUE(std::isfinite(bf16_to_float(after[node][k])))
          << "node " << node << " element " << k << "\n"
          << cluster.log(node);
  EXPECT_NE(cluster.log(1).find("NaN/Inf value(s), the first at"), std::string::npos)
      << cluster.log(1);
}

}  // namespace
}  // namespace gossip::testing

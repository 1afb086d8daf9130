#pragma once
// What the all-reduce tests (ring, mesh) check and generate alike.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "compression/codec_spec.h"
#include "compression/error_feedback.h"
#include "sgd/collectives/all_reduce.h"

namespace gossip::sgd::testing {

// n vectors of numel N(0, 1) values, the same for a seed.
inline std::vector<std::vector<float>> random_data(uint32_t n, uint64_t numel, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::vector<float>> d(n, std::vector<float>(numel));
  for (auto& v : d)
    for (auto& x : v) x = dist(rng);
  return d;
}

inline void expect_all_ok(const std::vector<Status>& st) {
  for (size_t r = 0; r < st.size(); ++r)
    ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].message();
}

inline void expect_same_bits(const std::vector<std::vector<float>>& d) {
  for (size_t r = 1; r < d.size(); ++r)
    ASSERT_TRUE(d[r].empty() || std::memcmp(d[r].data(), d[0].data(), d[0].size() * 4) == 0)
        << "rank " << r << " ended with other bits than rank 0";
}

// One mean on every rank of `data` for `round`, with the compression and each rank's
// error feedback (none when empty), in chunks of `chunk_elems`.
using MeanOf = std::function<std::vector<Status>(
    std::vector<std::vector<float>>& data, uint64_t round, const Compression& c,
    std::vector<compression::ErrorFeedback*> ef, uint64_t chunk_elems)>;

// fp16, bf16 and int8 hop by hop: every rank ends with the same bits, within the
// codec's quantization of the mean (relative L2: fp16 keeps 11 bits, bf16 8, int8 7
// of the block's absmax, per hop).
inline void check_compressed_hops(uint32_t n, const MeanOf& mean) {
  uint64_t round = 0;
  for (const char* spec : {"fp16", "bf16", "int8"}) {
    auto codec = compression::make_codec(spec);
    ASSERT_TRUE(codec.is_ok());
    const uint64_t numel = 100003;
    auto data = random_data(n, numel, 11);
    std::vector<double> want(numel, 0.0);
    for (const auto& v : data)
      for (uint64_t i = 0; i < numel; ++i) want[i] += v[i] / n;
    expect_all_ok(mean(data, round++, {codec->codec.get(), nullptr, nullptr}, {}, 1000));
    expect_same_bits(data);
    double err = 0, norm = 0;
    for (uint64_t i = 0; i < numel; ++i) {
      err += (data[0][i] - want[i]) * (data[0][i] - want[i]);
      norm += want[i] * want[i];
    }
    EXPECT_LT(std::sqrt(err / norm), std::string(spec) == "fp16" ? 1e-3 : 0.05)
        << spec << " n=" << n;
  }
}

// A codec whose contributions travel whole (top-k with error feedback, rand-k whose
// indices come from the sender's seed): the result is exactly the mean of the
// contributions, each encoded and decoded here on its own and summed in rank order.
inline void check_sparse_contributions(uint32_t n, const std::string& spec, const MeanOf& mean) {
  auto codec = compression::make_codec(spec);
  ASSERT_TRUE(codec.is_ok());
  const uint64_t numel = 20000, chunk = 5000;
  std::vector<std::unique_ptr<compression::ErrorFeedback>> residual;
  std::vector<compression::ErrorFeedback*> ef;
  for (uint32_t r = 0; r < n; ++r) {
    residual.push_back(std::make_unique<compression::ErrorFeedback>(*codec->codec, numel));
    ef.push_back(residual.back().get());
  }
  for (uint64_t round = 0; round < 2; ++round) {
    auto data = random_data(n, numel, 50 + round);
    std::vector<float> want(numel, 0.0f);
    for (uint32_t r = 0; r < n; ++r) {
      compression::ErrorFeedback copy = *residual[r];
      for (uint64_t c = 0; c * chunk < numel; ++c) {
        std::vector<std::byte> payload;
        std::vector<float> sent(chunk);
        ASSERT_TRUE(copy.encode(std::span<const float>(data[r]).subspan(c * chunk, chunk),
                                c * chunk, {chunk_seed(round, r, c), nullptr}, payload, sent)
                        .is_ok());
        for (uint64_t i = 0; i < chunk; ++i) want[c * chunk + i] += sent[i];
      }
    }
    for (float& x : want) x /= static_cast<float>(n);
    expect_all_ok(mean(data, round, {codec->codec.get(), nullptr, nullptr}, ef, chunk));
    expect_same_bits(data);
    ASSERT_EQ(std::memcmp(data[0].data(), want.data(), numel * 4), 0)
        << spec << " n=" << n << " round " << round;
  }
}

}  // namespace gossip::sgd::testing

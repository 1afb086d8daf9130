#include "experiments/trainer/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "experiments/trainer/batch_sampler.h"
#include "experiments/trainer/dataset.h"
#include "experiments/trainer/idx_reader.h"
#include "experiments/trainer/rng.h"

namespace gossip::trainer {
namespace {

using Shards = std::vector<std::vector<uint32_t>>;

const std::vector<uint8_t>& train_labels() {
  static const std::vector<uint8_t> labels = [] {
    auto idx = read_idx(std::string(kDefaultDataDir) + "/train-labels-idx1-ubyte.gz");
    EXPECT_TRUE(idx.is_ok()) << idx.status().message();
    return idx.is_ok() ? idx->data : std::vector<uint8_t>{};
  }();
  return labels;
}

Shards shards_of(const Partition& partition, uint32_t nodes, uint64_t seed) {
  auto shards = make_shards(train_labels(), kNumClasses, partition, nodes, seed);
  EXPECT_TRUE(shards.is_ok()) << shards.status().message();
  return shards.is_ok() ? *shards : Shards{};
}

// Every index appears in exactly one shard.
void expect_disjoint_cover(const Shards& shards, size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& shard : shards) {
    EXPECT_FALSE(shard.empty());
    for (uint32_t i : shard) {
      ASSERT_LT(i, n);
      ++seen[i];
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<ptrdiff_t>(n));
}

std::array<double, kNumClasses> label_fractions(const std::vector<uint32_t>& shard) {
  std::array<double, kNumClasses> f{};
  for (uint32_t i : shard) f[train_labels()[i]] += 1.0 / static_cast<double>(shard.size());
  return f;
}

// Total variation distance between a shard's label distribution and the uniform one
// of the whole (balanced) training set: 0 for a perfect iid shard, 0.9 for one class.
double skew(const std::vector<uint32_t>& shard) {
  double tv = 0;
  for (double f : label_fractions(shard)) tv += std::abs(f - 0.1);
  return tv / 2;
}

TEST(Partition, ParsesTheValidForms) {
  auto iid = parse_partition("iid");
  ASSERT_TRUE(iid.is_ok());
  EXPECT_EQ(iid->kind, Partition::Kind::kIid);
  auto dirichlet = parse_partition("dirichlet:0.1");
  ASSERT_TRUE(dirichlet.is_ok());
  EXPECT_EQ(dirichlet->kind, Partition::Kind::kDirichlet);
  EXPECT_DOUBLE_EQ(dirichlet->alpha, 0.1);
  EXPECT_EQ(dirichlet->to_string(), "dirichlet:0.1");
  EXPECT_TRUE(parse_partition("dirichlet:100").is_ok());
}

TEST(Partition, RejectsBadFormsNamingTheFlagAndTheValidForms) {
  for (const char* bad :
       {"", "IID", "dirichlet", "dirichlet:", "dirichlet:abc", "dirichlet:0", "dirichlet:-1",
        "dirichlet:nan", "dirichlet:inf", "dirichlet:0.1x", "skew:0.1"}) {
    auto parsed = parse_partition(bad);
    ASSERT_FALSE(parsed.is_ok()) << "accepted '" << bad << "'";
    const std::string& message = parsed.status().message();
    EXPECT_NE(message.find("--partition"), std::string::npos) << message;
    EXPECT_NE(message.find("iid"), std::string::npos) << message;
    EXPECT_NE(message.find("dirichlet:ALPHA"), std::string::npos) << message;
  }
}

TEST(Partition, IidShardsAreDisjointEqualAndCoverTheSet) {
  const size_t n = train_labels().size();
  ASSERT_EQ(n, 60000u);
  for (uint32_t nodes : {1u, 4u, 7u}) {
    const Shards shards = shards_of(Partition{}, nodes, 42);
    ASSERT_EQ(shards.size(), nodes);
    expect_disjoint_cover(shards, n);
    for (const auto& shard : shards) {
      EXPECT_LE(shard.size(), n / nodes + 1);
      EXPECT_GE(shard.size(), n / nodes);
      EXPECT_TRUE(std::is_sorted(shard.begin(), shard.end()));
      if (nodes > 1) {
        EXPECT_LT(skew(shard), 0.03) << "an iid shard is label-skewed";
      }
    }
  }
}

TEST(Partition, IidIsDeterministicForASeed) {
  EXPECT_EQ(shards_of(Partition{}, 4, 7), shards_of(Partition{}, 4, 7));
  EXPECT_NE(shards_of(Partition{}, 4, 7), shards_of(Partition{}, 4, 8));
}

TEST(Partition, DirichletShardsAreLabelSkewed) {
  const Partition dirichlet{Partition::Kind::kDirichlet, 0.1};
  const uint32_t nodes = 8;
  const Shards shards = shards_of(dirichlet, nodes, 3);
  ASSERT_EQ(shards.size(), nodes);
  expect_disjoint_cover(shards, train_labels().size());
  double mean_skew = 0;
  for (const auto& shard : shards) mean_skew += skew(shard) / nodes;
  // With alpha = 0.1 a node holds mostly one or two classes (iid: about 0.01).
  EXPECT_GT(mean_skew, 0.5);

  // The histograms differ from node to node: the dominant class is not always the same.
  std::set<size_t> dominant;
  for (const auto& shard : shards) {
    const auto f = label_fractions(shard);
    dominant.insert(static_cast<size_t>(std::max_element(f.begin(), f.end()) - f.begin()));
  }
  EXPECT_GE(dominant.size(), 3u);

  // A large alpha approaches iid.
  double mean_skew_100 = 0;
  for (const auto& shard : shards_of(Partition{Partition::Kind::kDirichlet, 100}, nodes, 3)) {
    mean_skew_100 += skew(shard) / nodes;
  }
  EXPECT_LT(mean_skew_100, 0.1);
}

TEST(Partition, DirichletIsDeterministicForASeed) {
  const Partition dirichlet{Partition::Kind::kDirichlet, 0.1};
  EXPECT_EQ(shards_of(dirichlet, 5, 11), shards_of(dirichlet, 5, 11));
  EXPECT_NE(shards_of(dirichlet, 5, 11), shards_of(dirichlet, 5, 12));
}

TEST(Partition, DirichletGivesEveryNodeAShardEvenWhenExtreme) {
  const Shards shards = shards_of(Partition{Partition::Kind::kDirichlet, 0.01}, 200, 1);
  ASSERT_EQ(shards.size(), 200u);
  expect_disjoint_cover(shards, train_labels().size());
  for (const auto& shard : shards) EXPECT_GE(shard.size(), 10u);
}

TEST(Partition, RefusesImpossibleSplits) {
  const std::vector<uint8_t> labels = {0, 1, 2};
  EXPECT_FALSE(make_shards(labels, kNumClasses, Partition{}, 0, 1).is_ok());
  EXPECT_FALSE(make_shards(labels, kNumClasses, Partition{}, 4, 1).is_ok());
  EXPECT_FALSE(
      make_shards(std::vector<uint8_t>{0, 11}, kNumClasses, {Partition::Kind::kDirichlet, 1}, 1, 1)
          .is_ok());
  auto three = make_shards(labels, kNumClasses, {Partition::Kind::kDirichlet, 0.1}, 3, 1);
  ASSERT_TRUE(three.is_ok()) << three.status().message();
  for (const auto& shard : *three) EXPECT_EQ(shard.size(), 1u);
}

TEST(BatchSampler, VisitsTheWholeShardEachEpoch) {
  const std::vector<uint32_t> shard = {3, 5, 8, 13, 21, 34, 55};
  BatchSampler sampler(shard, 9);
  std::vector<uint32_t> drawn;
  for (int i = 0; i < 7; ++i) {
    auto batch = sampler.next(2);  // batches cross epoch boundaries
    drawn.insert(drawn.end(), batch.begin(), batch.end());
  }
  for (size_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<uint32_t> one(drawn.begin() + 7 * epoch, drawn.begin() + 7 * (epoch + 1));
    std::sort(one.begin(), one.end());
    EXPECT_EQ(one, shard) << "epoch " << epoch;
  }
  // A batch larger than the shard repeats samples rather than failing.
  BatchSampler small({4}, 1);
  auto batch = small.next(3);
  EXPECT_EQ(std::vector<uint32_t>(batch.begin(), batch.end()), (std::vector<uint32_t>{4, 4, 4}));
}

TEST(TrainerRng, DistributionsHaveTheRightMoments) {
  Rng rng(5);
  for (double shape : {0.1, 0.5, 1.0, 3.0}) {
    double sum = 0;
    const int n = 40000;
    for (int i = 0; i < n; ++i) sum += rng.gamma(shape);
    EXPECT_NEAR(sum / n, shape, 0.05 * shape + 0.01) << "Gamma(" << shape << ") mean";
  }
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < 40000; ++i) {
    const double z = rng.normal();
    sum += z;
    sum_sq += z * z;
  }
  EXPECT_NEAR(sum / 40000, 0.0, 0.03);
  EXPECT_NEAR(sum_sq / 40000, 1.0, 0.03);
  // Same seed, same numbers: every node must draw the same split.
  Rng a(77), b(77);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.below(1000), b.below(1000));
}

}  // namespace
}  // namespace gossip::trainer

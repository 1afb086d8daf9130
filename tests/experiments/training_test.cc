// Short training runs of the library (no daemon): the model must learn quickly, and a
// run must be reproducible from its seed.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "experiments/trainer/dataset.h"
#include "experiments/trainer/mlp.h"
#include "experiments/trainer/partition.h"
#include "experiments/trainer/trainer.h"

namespace gossip::trainer {
namespace {

class MlpTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto train = load_fashion_mnist(kDefaultDataDir, Split::kTrain);
    ASSERT_TRUE(train.is_ok()) << train.status().message();
    auto test = load_fashion_mnist(kDefaultDataDir, Split::kTest);
    ASSERT_TRUE(test.is_ok()) << test.status().message();
    train_ = new Dataset(std::move(*train));
    test_ = new Dataset(std::move(*test));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
  }

  static std::vector<uint32_t> everything() {
    std::vector<uint32_t> all(train_->size());
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }

  std::vector<std::span<float>> views(std::vector<float>& storage) {
    storage.assign(Mlp::num_parameters(), 0.0f);
    std::vector<std::span<float>> v;
    size_t offset = 0;
    for (const auto& shape : Mlp::layout()) {
      v.emplace_back(storage.data() + offset, shape.numel());
      offset += shape.numel();
    }
    return v;
  }

  static Dataset* train_;
  static Dataset* test_;
};

Dataset* MlpTraining::train_ = nullptr;
Dataset* MlpTraining::test_ = nullptr;

TEST_F(MlpTraining, ThreeHundredStepsBeatChanceClearly) {
  std::vector<float> storage;
  auto trainer = Trainer::create(*train_, everything(), views(storage), TrainerOptions{});
  ASSERT_TRUE(trainer.is_ok()) << trainer.status().message();
  trainer->model().init(0);
  const Evaluation before = trainer->evaluate(*test_);
  EXPECT_LT(before.accuracy, 0.3);

  const auto t0 = std::chrono::steady_clock::now();
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const float loss = trainer->step();
    if (step < 20) first += loss / 20;
    if (step >= 280) last += loss / 20;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Evaluation after = trainer->evaluate(*test_);
  EXPECT_GT(after.accuracy, 0.75) << "after 300 steps";
  EXPECT_LT(after.loss, before.loss);
  EXPECT_LT(last, first);
  RecordProperty("accuracy", std::to_string(after.accuracy));
  RecordProperty("seconds", std::to_string(seconds));
}

TEST_F(MlpTraining, AShardTrainsToo) {
  auto shards = make_shards(train_->labels, kNumClasses, Partition{}, 4, 1);
  ASSERT_TRUE(shards.is_ok());
  std::vector<float> storage;
  TrainerOptions options;
  options.node = 2;
  auto trainer = Trainer::create(*train_, (*shards)[2], views(storage), options);
  ASSERT_TRUE(trainer.is_ok()) << trainer.status().message();
  trainer->model().init(1);
  for (int step = 0; step < 300; ++step) trainer->step();
  EXPECT_GT(trainer->evaluate(*test_).accuracy, 0.7);
}

TEST_F(MlpTraining, IsReproducibleFromTheSeedAndSamplesPerNode) {
  auto run = [&](uint32_t node, std::vector<float>& storage) {
    TrainerOptions options;
    options.seed = 5;
    options.node = node;
    auto trainer = Trainer::create(*train_, everything(), views(storage), options);
    ASSERT_TRUE(trainer.is_ok()) << trainer.status().message();
    trainer->model().init(options.seed);
    for (int step = 0; step < 10; ++step) trainer->step();
  };
  std::vector<float> a, b, c;
  run(0, a);
  run(0, b);
  run(1, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);  // same init, different batches
}

TEST_F(MlpTraining, RefusesABadShard) {
  std::vector<float> storage;
  EXPECT_FALSE(Trainer::create(*train_, {}, views(storage), TrainerOptions{}).is_ok());
  EXPECT_FALSE(Trainer::create(*train_, {60000}, views(storage), TrainerOptions{}).is_ok());
  TrainerOptions zero_batch;
  zero_batch.batch = 0;
  EXPECT_FALSE(Trainer::create(*train_, {1}, views(storage), zero_batch).is_ok());
}

}  // namespace
}  // namespace gossip::trainer

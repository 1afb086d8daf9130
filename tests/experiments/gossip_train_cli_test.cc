// Black-box tests of the gossip-train program: its flags, exit codes and output files
// are a contract with the launch and plotting scripts.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "tests/bin_dir.h"

namespace gossip::trainer {
namespace {

using ::gossip::trainer::testing::TempDir;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) result.push_back(line);
  return result;
}

Outcome gossip_train(const TempDir& dir, const std::string& args) {
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  const std::string command =
      ::gossip::test_bin_dir() + "/gossip-train " + args + " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  Outcome outcome;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.out = slurp(out);
  outcome.err = slurp(err);
  return outcome;
}

TEST(GossipTrain, HelpListsTheFlags) {
  TempDir dir;
  const Outcome o = gossip_train(dir, "--help");
  EXPECT_EQ(o.exit_code, 0);
  for (const char* flag :
       {"--endpoint", "--standalone", "--node", "--nodes", "--steps", "--batch", "--lr",
        "--momentum", "--weight-decay", "--seed", "--partition", "--eval-every", "--csv",
        "--result", "--data-dir", "--name", "--local-rank", "--timeout-s"}) {
    EXPECT_NE(o.out.find(flag), std::string::npos) << flag;
  }
}

TEST(GossipTrain, BadFlagsExitWithTwo) {
  TempDir dir;
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"", "--endpoint"},
      {"--standalone --partition skew", "dirichlet:ALPHA"},
      {"--standalone --partition dirichlet:-1", "--partition"},
      {"--standalone --node 2 --nodes 2", "--node 2"},
      {"--standalone --nodes 0", "--nodes"},
      {"--standalone --steps ten", "--steps"},
      {"--standalone --steps 0", "--steps"},
      {"--standalone --batch 0", "--batch"},
      {"--standalone --lr -1", "--lr"},
      {"--standalone --momentum 1", "--momentum"},
      {"--standalone --lr-schedule linear", "--lr-schedule"},
      {"--standalone --model rnn", "--model rnn"},
      {"--standalone --endpoint ipc:///tmp/x.sock", "--endpoint"},
      {"--standalone --no-such-flag", "--no-such-flag"},
  };
  for (const auto& c : cases) {
    const Outcome o = gossip_train(dir, c.args);
    EXPECT_EQ(o.exit_code, 2) << c.args << "\n" << o.err;
    EXPECT_NE(o.err.find(c.says), std::string::npos) << c.args << "\n" << o.err;
  }
}

TEST(GossipTrain, MissingDataIsARuntimeError) {
  TempDir dir;
  const Outcome o = gossip_train(dir, "--standalone --data-dir " + dir.file("nothing"));
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("Fashion-MNIST not found at " + dir.file("nothing") +
                       "/train-images-idx3-ubyte.gz"),
            std::string::npos)
      << o.err;
}

TEST(GossipTrain, AResultNowhereToGoFailsBeforeTraining) {
  TempDir dir;
  const std::string result = dir.file("absent/node0.json");
  const Outcome o = gossip_train(dir, "--standalone --result " + result);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("--result " + result), std::string::npos) << o.err;
}

TEST(GossipTrain, NoDaemonIsARuntimeError) {
  TempDir dir;
  const Outcome o =
      gossip_train(dir, "--endpoint ipc://" + dir.file("gossipd-0.sock") + " --timeout-s 1");
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_FALSE(o.err.empty());
}

TEST(GossipTrain, StandaloneWritesCsvResultAndSummary) {
  TempDir dir;
  const std::string csv = dir.file("node0.csv"), result = dir.file("node0.json");
  const Outcome o = gossip_train(
      dir, "--standalone --steps 250 --eval-every 100 --csv " + csv + " --result " + result);
  ASSERT_EQ(o.exit_code, 0) << o.err;

  const auto out = lines(o.out);
  ASSERT_EQ(out.size(), 1u) << o.out;
  EXPECT_NE(out[0].find("250 steps"), std::string::npos) << out[0];

  // A row every 100 steps and one at the end.
  const auto rows = lines(slurp(csv));
  ASSERT_EQ(rows.size(), 4u) << slurp(csv);
  EXPECT_EQ(rows[0],
            "step,wall_seconds,loss,test_accuracy,payload_sent,payload_recv,wire_sent,wire_recv");
  const std::regex row(R"((\d+),([0-9.]+),([0-9.e-]+),(0\.\d+|1),0,0,0,0)");
  for (size_t i = 1; i < rows.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(rows[i], m, row)) << rows[i];
    EXPECT_EQ(std::stoi(m[1]), i < 3 ? 100 * static_cast<int>(i) : 250);
  }

  const auto json = lines(slurp(result));
  ASSERT_EQ(json.size(), 1u);
  const std::regex shape(
      R"(\{"node":0,"steps":250,"accuracy_local":(0\.\d+),"accuracy_average":(0\.\d+),)"
      R"("loss":[0-9.e-]+,"test_loss":[0-9.e-]+,"payload_sent":0,"payload_recv":0,)"
      R"("wire_sent":0,"wire_recv":0,"wall_seconds":[0-9.]+,"wait_seconds":0\.0,)"
      R"("attached_seconds":0\.0,"eval_seconds":[0-9.]+\})");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(json[0], m, shape)) << json[0];
  EXPECT_EQ(m[1], m[2]) << "standalone: local and average are one evaluation";
  EXPECT_GT(std::stod(m[1]), 0.7);
  EXPECT_FALSE(std::filesystem::exists(result + ".tmp"));
}

// The CNN (issue 23's large workload) learns the real data set: 150 steps of batch 64
// from the He init reach 78 % (74 % at 40). Where it lands past that depends on the
// rounding of the sums: 150 steps gave 81.6 % with the portable SSE2 kernels, 81.0 % with
// AVX2 (GOSSIP_TRAINER_FOR_THIS_CPU) and 79.98 % with AVX2 and FMA (2026-12-05), where a
// bar of 80 % failed.
// Each step is ~20 times the MLP's. In the Training suite, which CI runs on the optimized
// build (scripts/optimized-tests.sh).
TEST(Training, TheCnnLearnsFashionMnistAlone) {
#ifndef NDEBUG
  GTEST_SKIP() << "takes minutes in an unoptimized build";
#endif
  TempDir dir;
  const std::string result = dir.file("result.json");
  const Outcome o =
      gossip_train(dir, "--standalone --model cnn --steps 150 --eval-every 0 --result " + result);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::smatch m;
  const std::string json = slurp(result);
  ASSERT_TRUE(std::regex_search(json, m, std::regex(R"("accuracy_average":([0-9.]+))"))) << json;
  EXPECT_GE(std::stod(m[1]), 0.78) << json;
}

// The documented recipe for the single-node baseline (experiments/trainer/README.md):
// about 13 s on 2 busy cores in an optimized build.
TEST(GossipTrain, StandaloneRecipeReachesEightyEightPercent) {
#ifndef NDEBUG
  GTEST_SKIP() << "takes minutes in an unoptimized build";
#endif
  TempDir dir;
  const std::string result = dir.file("result.json");
  const Outcome o = gossip_train(
      dir, "--standalone --steps 6000 --lr-schedule cosine --eval-every 0 --result " + result);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::smatch m;
  const std::string json = slurp(result);
  ASSERT_TRUE(std::regex_search(json, m, std::regex(R"("accuracy_average":([0-9.]+))"))) << json;
  EXPECT_GE(std::stod(m[1]), 0.88) << json;
}

}  // namespace
}  // namespace gossip::trainer

// `gossipctl simulate` as a user runs it (docs/simulation.md): the summary, the CSV,
// and the options it refuses, naming them.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/bin_dir.h"
#include "tests/cli/test_support.h"

namespace gossip::cli {
namespace {

using testing::run_program;
using testing::TempDir;

const std::string kGossipctl = ::gossip::test_bin_dir() + "/gossipctl";

// A trainer stopping for 1.6 s in a ring of 8 on gossipd's default waits: the run goes
// through, the mean does not move, and each round has its row.
TEST(SimulateCommand, APausedTrainerIsWaitedForAndTheMeanStays) {
  TempDir dir;
  const std::string out = dir.path() + "/run";
  auto r = run_program(
      {kGossipctl, "simulate", "--nodes",  "8",  "--topology",     "ring", "--model", "mixing",
       "--numel",  "100",      "--rounds", "24", "--step-time-ms", "10",   "--links", "latency=1ms",
       "--pause",  "3@16:1.6", "--out",    out},
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("simulated 8 nodes, gossip on ring, 24 rounds of 100 parameters"),
            std::string::npos)
      << r.out;
  std::ifstream csv(out + "/rounds.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "round,nodes,time_s,consensus,suboptimality,wire_bytes_per_node,train_loss");
  int rows = 0;
  double last_time = 0, suboptimality = 1;
  while (std::getline(csv, line)) {
    ++rows;
    unsigned round = 0, nodes = 0;
    double time_s = 0, consensus = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%u,%u,%lf,%lf,%lf", &round, &nodes, &time_s, &consensus,
                          &suboptimality),
              5)
        << line;
    EXPECT_EQ(nodes, 8u) << line;
    last_time = time_s;
  }
  EXPECT_EQ(rows, 24);
  EXPECT_LT(suboptimality, 1e-10) << "for consensus alone, how far the mean moved";
  EXPECT_GT(last_time, 1.6) << "the pause is virtual time";
}

// A node killed before round 5 restarts (virtual time), takes a neighbor's model and
// runs the last rounds with the others: the summary says so, and the last rows count
// every node again. Its machine back within the dead-after (3 s), its neighbors had
// waited for it: no round goes without it. Back after it, some do; and so do some when
// its process died, even back within a second: its connections dropped, and its
// neighbors went on without it.
TEST(SimulateCommand, AKilledNodeThatRestartsIsInTheLastRounds) {
  TempDir dir;
  const std::string out = dir.path() + "/run";
  struct Case {
    const char* after;
    const char* dies_as;
    bool rounds_without;
  };
  for (const Case& c :
       {Case{"1", "machine", false}, Case{"5", "machine", true}, Case{"1", "process", true}}) {
    SCOPED_TRACE(std::string(c.dies_as) + ", back after " + c.after + " s");
    auto r = run_program({kGossipctl,  "simulate",    "--nodes",  "8",   "--topology",     "ring",
                          "--numel",   "100",         "--rounds", "60",  "--step-time-ms", "100",
                          "--links",   "latency=1ms", "--kill",   "3@5", "--rejoin-after", c.after,
                          "--dies-as", c.dies_as,     "--out",    out},
                         dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("1 deaths"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1 restarts took a peer's model (400 bytes in all)"), std::string::npos)
        << r.out;
    std::ifstream csv(out + "/rounds.csv");
    std::string line, last;
    std::getline(csv, line);
    unsigned without = 0;
    while (std::getline(csv, line)) {
      unsigned round = 0, nodes = 0;
      ASSERT_EQ(std::sscanf(line.c_str(), "%u,%u", &round, &nodes), 2) << line;
      without += nodes < 8 ? 1 : 0;
      last = line;
    }
    EXPECT_EQ(without > 0, c.rounds_without) << without << " rounds without it";
    EXPECT_EQ(last.rfind("59,8,", 0), 0u) << last;
  }
}

TEST(SimulateCommand, BadOptionsAreRefusedNamingThem) {
  TempDir dir;
  const auto refused = [&](std::vector<std::string> args, const std::string& says) {
    args.insert(args.begin(), {kGossipctl, "simulate", "--nodes", "4", "--rounds", "2"});
    auto r = run_program(args, dir.path());
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  };
  refused({"--pause", "3@16"}, "--pause 3@16: expected NODE@ROUND:SECONDS");
  refused({"--pause", "9@1:1"}, "--pause 9@1: there is no node 9");
  refused({"--dead-after", "1", "--heartbeat", "1"},
          "--dead-after 1000 ms: at least two heartbeats");
  refused({"--kill", "x"}, "--kill x: expected NODE@ROUND");
  refused({"--slow", "3"}, "--slow 3: expected NODE:FACTOR");
  refused({"--partition", "0-1@5"}, "--partition 0-1@5: expected FIRST-LAST@FROM-UNTIL");
  refused({"--partition", "2-9@1-2"}, "--partition 2-9@1-2: there is no node 9");
  refused({"--partition", "0-1@3-2"}, "FROM before UNTIL");
  refused({"--partition", "-1--1@1-2"}, "expected FIRST-LAST@FROM-UNTIL");  // not 4294967295
  refused({"--partition", "0-1@inf-5"}, "FROM before UNTIL");
  refused({"--pause", "0@-1:1"}, "--pause 0@-1:1: expected NODE@ROUND:SECONDS");
  refused({"--kill", "-1@2"}, "--kill -1@2: expected NODE@ROUND");
  // NaN passes a range check; a huge number overflows the nanoseconds it becomes.
  refused({"--patience", "nan"}, "--patience: nan: a number > 0 and at most 1000000");
  refused({"--patience-factor", "2000"}, "--patience-factor: 2000: a number >= 0 and at most 1000");
  refused({"--round-timeout", "1e10"}, "--round-timeout: 1e10: a number > 0 and at most 1000000");
  refused({"--dead-after-factor", "nan"},
          "--dead-after-factor: nan: a number >= 0 and at most 1000000");
  refused({"--step-time-ms", "-5"}, "--step-time-ms: -5: a number >= 0 and at most 1000000000");
  refused({"--step-time-ms", "1e9", "--slow", "0:1e6"}, "whose steps take at most 1e6 s");
  refused({"--links", "latency=1e300s"}, "latency=1e300s: at most 1e6 s");
  refused({"--slow", "7:5"}, "--slow 7:5: a node below 4");
  refused({"--round-timeout-factor", "nan"},
          "--round-timeout-factor nan: expected auto or a number in 0..1e6");
  refused({"--round-timeout-factor", "-1"},
          "--round-timeout-factor -1: expected auto or a number in 0..1e6");
  refused({"--round-timeout-floor", "0"}, "--round-timeout-floor: 0: a number > 0");
  refused({"--model", "mlp", "--numel", "5"}, "--numel with --model mlp: the MLP has its own");
  refused({"--model", "mlp", "--data-partition", "skewed"}, "--data-partition");
  refused({"--model", "mlp", "--batch", "0"}, "--batch and --local-steps: at least 1");
  refused({"--model", "mlp", "--batch", "1000000000"},
          "--batch 1000000000 and --local-steps 1: at most 60000");
  refused({"--strategy", "local-sgd", "--allreduce-algorithm", "hypercube"},
          "--allreduce-algorithm 'hypercube'");
  refused({"--elastic", "maybe"}, "--elastic");
  refused({"--churn", "101"}, "--churn: 101: a number >= 0 and at most 100");
  refused({"--churn", "nan"}, "--churn: nan");
  refused({"--rejoin-after", "-1", "--churn", "5"}, "--rejoin-after: -1: a number >= 0");
  refused({"--rejoin-after", "2"}, "--rejoin-after: nothing dies");
  refused({"--joins", "3", "--churn", "5", "--rejoin-after", "2"}, "--joins runs no training");
  refused({"--joins", "3", "--kill", "1@1"}, "--joins runs no training");
  refused({"--joins", "300"}, "--joins: Value 300 not in range");
  refused({"--joins", "2", "--join-quorum", "some"}, "--join-quorum");
  refused({"--joins", "2", "--join-every", "0"}, "--join-every: 0: a number > 0");
}

}  // namespace
}  // namespace gossip::cli

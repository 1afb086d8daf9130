// Attacks on a real cluster (tests/security/attacker.cc): each test trains the real
// Fashion-MNIST with gossipctl cluster while a hostile process attacks it, and shows
// the cluster unharmed (the same accuracy as an undisturbed run, within 1 point, and
// no stall) and the attack refused and counted. docs/security.md lists the findings.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_run.h"
#include "harness.h"

namespace gossip::testing {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  double accuracy = -1;
  double seconds = 0;
  std::string daemon_log;  // node 0's
  std::string attacker_log;
  std::string json;  // gossipctl cluster's summary
};

// The undisturbed run of `args`, once per test binary: every attack compares against
// the same one. Only the synchronous runs without a trim are deterministic (fixed seed);
// under --trim who is left out of a round after the grace depends on timing.
const Outcome& undisturbed(const std::vector<std::string>& args) {
  static std::map<std::vector<std::string>, Outcome> runs;
  auto it = runs.find(args);
  if (it != runs.end()) return it->second;
  Outcome o;
  auto [json, seconds] = run_cluster(args, &o.daemon_log);
  o.accuracy = number_field(json, "accuracy_average_model");
  o.seconds = seconds;
  return runs.emplace(args, std::move(o)).first->second;
}

// `args` run while `attacker_args` (gossip-attacker's, after which --parent names
// gossipctl) attacks from the moment gossipctl starts.
Outcome attacked(const std::vector<std::string>& args, std::vector<std::string> attacker_args) {
  Outcome o;
  const auto log = std::filesystem::temp_directory_path() /
                   ("gossip-attacker-" + std::to_string(::getpid()) + ".log");
  std::unique_ptr<ChildProcess> attacker;
  auto [json, seconds] = run_cluster(args, &o.daemon_log, [&](pid_t gossipctl) {
    attacker_args.insert(attacker_args.begin(), binary("gossip-attacker"));
    attacker_args.push_back("--parent");
    attacker_args.push_back(std::to_string(gossipctl));
    attacker = std::make_unique<ChildProcess>(attacker_args, log);
  });
  if (attacker) {
    attacker->signal(SIGTERM);
    attacker->wait(5s);
    o.attacker_log = attacker->log();
  }
  std::filesystem::remove(log);
  o.accuracy = number_field(json, "accuracy_average_model");
  o.seconds = seconds;
  return o;
}

const std::vector<std::string> kRing = {"--nodes", "3",   "--strategy", "allreduce",
                                        "--steps", "300", "--seed",     "1"};

// Finding 1: a stranger that connects to every port the daemons listen on and says
// nothing. The ring's listener used to read one hello at a time without a timeout:
// the cluster failed at its first step after the round timeout. Now every connection
// has 2 s to say hello while the listener goes on accepting.
TEST(Attacks, IdleStrangersOnEveryPortStallNoRing) {
  // The trainers start 2 s after their daemons, so that the ring's first rendezvous
  // comes after the attacker (which looks for ports every 20 ms) is on every port:
  // on a loaded machine it could come later than the ring, which then never reads
  // its connection. A stranger is only a threat to a rendezvous.
  const auto late = std::filesystem::temp_directory_path() /
                    ("late-trainer-" + std::to_string(::getpid()) + ".sh");
  {
    std::ofstream script(late);
    script << "#!/bin/sh\nsleep 2\nexec '" << binary("gossip-train") << "' \"$@\"\n";
  }
  std::filesystem::permissions(late, std::filesystem::perms::owner_all);
  std::vector<std::string> args = kRing;
  args.insert(args.end(), {"--trainer", late.string()});
  const Outcome& calm = undisturbed(args);
  const Outcome hit = attacked(args, {"idle-connect"});
  std::filesystem::remove(late);
  EXPECT_NE(hit.attacker_log.find("port "), std::string::npos)
      << "the attacker found no port: the test shows nothing\n"
      << hit.attacker_log;
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.01);
  EXPECT_LT(hit.seconds, calm.seconds + 15) << "the strangers held the ring up";
  EXPECT_NE(hit.daemon_log.find("ring: refused a connection: no hello within"), std::string::npos)
      << hit.daemon_log;
}

// Finding 2: a stranger speaking ZeroMQ to every daemon sends one message that never
// ends. libzmq buffers a message's parts until its last, so the daemons' memory grew
// at line rate (37 MiB sent grew one from 11 MB to 44 MB, unbounded). Now the
// inbound watchdog (peers/inbound_watchdog.h) cuts a connection that holds more
// than a message's worth (256 MiB); the attacker connects again and again.
TEST(Attacks, AnEndlessMessageIsCutAtAMessagesWorth) {
  const std::vector<std::string> args = {"--nodes", "3",   "--strategy", "gossip",
                                         "--steps", "300", "--seed",     "1"};
  const Outcome& calm = undisturbed(args);
  // Node 9 is no member: as node 1, ROUTER_HANDOVER (plain mode has no keys) would
  // give the stranger node 1's link instead (docs/security.md, what plain mode is).
  const Outcome hit = attacked(args, {"multipart-flood", "--as-node", "9"});
  EXPECT_NE(hit.attacker_log.find("flooding port"), std::string::npos)
      << "the attacker found no port: the test shows nothing\n"
      << hit.attacker_log;
  EXPECT_NE(hit.attacker_log.find("closed the connection"), std::string::npos) << hit.attacker_log;
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.01);
  EXPECT_LT(hit.seconds, calm.seconds * 3 + 20) << "(the attacker burns one of the two cores)";
  EXPECT_NE(hit.daemon_log.find("cut an incoming connection that held"), std::string::npos)
      << hit.daemon_log << hit.attacker_log;
  // A daemon's own memory, a message's worth and what arrives between two checks.
  std::istringstream lines(hit.attacker_log);
  long worst = 0;
  for (std::string line; std::getline(lines, line);)
    if (const auto at = line.find("peak memory "); at != std::string::npos)
      worst = std::max(worst, std::atol(line.c_str() + at + 12));
  EXPECT_GT(worst, 0) << hit.attacker_log;
  EXPECT_LT(worst, 1024) << "MiB at the peak\n" << hit.attacker_log;
}

// A malicious authenticated peer (gossipd-byzantine as node 7 of 8, its trainer
// attached) that sends, in turn, push-sum weights of 1e300 and 1e-310, NaN models,
// models scaled by 1e4, rounds 10^6 ahead and malformed chunks. Findings 3 (a NaN
// weight or model used to poison push-sum for good), 6 (one malformed chunk failed
// the round even with robust mixing on) and 7 (a far-ahead round used to make the
// nodes skip ahead, and the cluster with them).
// Seven, a count prime to push-sum's three-round cycle: node 0, which hears node 7
// every third round, meets every lie.
constexpr const char* kEveryLie = "huge-weight,tiny-weight,nan,scale,far-round,malformed,honest";
// The 8-node gossip and push-sum runs below sync every 4 steps, not every step: their 75
// rounds still meet every lie several times, and a run takes about half the CPU time
// (17 CPU-seconds instead of 30 for trimmed gossip, 2026-12-07), most of which was the
// 4.5 GB the eight nodes sent each other over loopback.

// `args` run with node `node` played by gossipd-byzantine, lying as `attack` says.
Outcome with_byzantine_node(std::vector<std::string> args, const char* attack = kEveryLie,
                            int node = 7, bool expect_ok = true) {
  ::setenv("GOSSIP_ATTACK", attack, 1);
  args.insert(args.end(),
              {"--gossipd-on", std::to_string(node) + "=" + binary("gossipd-byzantine")});
  Outcome o;
  auto [json, seconds] = run_cluster(args, &o.daemon_log, nullptr, expect_ok);
  o.json = json;
  ::unsetenv("GOSSIP_ATTACK");
  if (expect_ok) o.accuracy = number_field(json, "accuracy_average_model");
  o.seconds = seconds;
  return o;
}

TEST(Attacks, AByzantinePeerCannotPoisonPushSum) {
  const std::vector<std::string> args = {"--nodes",  "8", "--strategy", "push-sum", "--clip", "on",
                                         "--period", "4", "--steps",    "300",      "--seed", "1"};
  const Outcome& calm = undisturbed(args);
  const Outcome hit = with_byzantine_node(args);
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.01);
  EXPECT_LT(hit.seconds, calm.seconds * 1.5 + 10);
  // Node 0 hears node 7 every third round (one-peer exponential graph).
  for (const char* refused : {"push-sum weight 1e+300 outside", "push-sum weight 1e-310 outside",
                              "is nan", "not skipping ahead for it"})
    EXPECT_NE(hit.daemon_log.find(refused), std::string::npos) << refused << "\n" << hit.daemon_log;
}

TEST(Attacks, AByzantinePeerCannotPoisonTrimmedGossip) {
  const std::vector<std::string> args = {"--nodes",  "8", "--strategy", "gossip", "--trim", "1",
                                         "--period", "4", "--steps",    "300",    "--seed", "1"};
  const Outcome& calm = undisturbed(args);
  const Outcome hit = with_byzantine_node(args);
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.01);
  EXPECT_LT(hit.seconds, calm.seconds * 1.5 + 10);
  // Node 0's ring neighbors are 1 and 7.
  for (const char* refused : {"is nan", "too far ahead", "which this node does not take"})
    EXPECT_NE(hit.daemon_log.find(refused), std::string::npos) << refused << "\n" << hit.daemon_log;
}

// Corrupted messages without robust mixing: gossip on a ring (no --trim), node 7 of
// 8 sending chunks cut short, grown, past the model's end, with an element count or
// a codec that does not fit, one round in four. Each is refused and leaves node 7 out
// of that round; before, the first one failed its neighbors' round and their
// trainers stopped ("synchronization failed"). experiments/soak.py runs it for 20
// minutes among kills and partitions.
TEST(Attacks, CorruptedChunksDoNotStopAnUntrimmedGossipCluster) {
  const std::vector<std::string> args = {"--nodes", "8",       "--strategy", "gossip", "--period",
                                         "4",       "--steps", "300",        "--seed", "1"};
  const Outcome& calm = undisturbed(args);
  const Outcome hit = with_byzantine_node(args, "garble,honest,honest,honest");
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.01);
  EXPECT_LT(hit.seconds, calm.seconds * 1.5 + 10);
  // Node 0's ring neighbors are 1 and 7.
  for (const char* refused :
       {"dropped message from peer 7: model-chunk says numel=", "but the model has 235152 elements",
        "peer 7 sends int8 payloads; this node decodes none"})
    EXPECT_NE(hit.daemon_log.find(refused), std::string::npos) << refused << "\n" << hit.daemon_log;
  EXPECT_EQ(hit.daemon_log.find("rounds in a row"), std::string::npos) << hit.daemon_log;
}

// Local SGD under --trim 1 (transport allgather: a ring's partial sums cannot be
// trimmed): the same liar as node 7 of 8. Its NaN and scaled models are trimmed
// away coordinate by coordinate, and its far-round chunks leave it out of the round
// after the grace, where the untrimmed cluster failed. Every 8 steps: each of the 37
// rounds sends every model to all seven others, and they still meet each lie five times.
TEST(Attacks, AByzantinePeerCannotPoisonTrimmedLocalSgd) {
  const std::vector<std::string> args = {
      "--nodes",   "8",      "--strategy", "local-sgd", "--period", "8",      "--transport",
      "allgather", "--trim", "1",          "--steps",   "300",      "--seed", "1"};
  const Outcome& calm = undisturbed(args);
  const Outcome hit = with_byzantine_node(args);
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.01);
  for (const char* refused : {"hold NaN or Inf: left out of the round", "chunk for round"})
    EXPECT_NE(hit.daemon_log.find(refused), std::string::npos) << refused << "\n" << hit.daemon_log;
  // No round waited for the liar to its deadline (what a wall-time bound against the
  // calm run, timed apart on a shared machine, checked by chance).
  EXPECT_EQ(hit.daemon_log.find("no complete model"), std::string::npos) << hit.daemon_log;
}

// Finding 9: a node with a valid key of its own (node 2's, as if compromised) that
// connects to node 0 again and again as node 1. ROUTER_HANDOVER handed it node 1's
// routing id, cutting node 1's link each time; now, under CURVE, a routing id
// carries a token only node 1 and node 0 can compute, so the attacker's is a
// stranger's, refused, and node 1's link stays. A sync every 4 steps: the attack needs
// the links up for the run, not the models' traffic.
TEST(Attacks, AValidKeyCannotTakeOverAnotherNodesLink) {
  const std::vector<std::string> args = {"--nodes", "3",        "--strategy", "gossip",
                                         "--curve", "--period", "4",          "--steps",
                                         "300",     "--seed",   "1"};
  const Outcome& calm = undisturbed(args);
  const Outcome hit = attacked(args, {"hijack", "--key-of", "2", "--claim", "1"});
  EXPECT_NE(hit.attacker_log.find("claiming node 1"), std::string::npos)
      << "the attacker found no cluster: the test shows nothing\n"
      << hit.attacker_log;
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.01);
  EXPECT_LT(hit.seconds, calm.seconds + 15);
  EXPECT_NE(hit.daemon_log.find("unknown sender 'node-1'"), std::string::npos) << hit.daemon_log;
  EXPECT_EQ(hit.daemon_log.find("peer 1 missed"), std::string::npos) << hit.daemon_log;
}

// Finding 8: what the all-gather received was summed unchecked, so one NaN chunk
// made every node's model NaN. Now a chunk with NaN or Inf is left out of the mean
// (and a result that still holds one is replaced by the node's last good model).
TEST(Attacks, AByzantinePeerCannotPoisonTheAllGather) {
  const std::vector<std::string> args = {"--nodes",  "4",   "--strategy",  "local-sgd",
                                         "--period", "4",   "--transport", "allgather",
                                         "--steps",  "600", "--seed",      "1"};
  const Outcome& calm = undisturbed(args);
  const Outcome hit = with_byzantine_node(args, "nan", 3);
  // The liar's quarter of the updates is out of every mean, so the three honest nodes'
  // mean lands about a point under the calm run of four (84.72 % against 85.76 % with
  // the trainer's AVX2 kernels, 2026-12-05, the same bits every run; where the bound was
  // a point, that failed). A poisoned run would be NaN, or at chance.
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.02);
  EXPECT_NE(hit.daemon_log.find("hold NaN or Inf: left out of the mean"), std::string::npos)
      << hit.daemon_log;
}

// Finding 19: a ring member that scales every value it sends (its contribution, the
// partial sums and the means it passes on) by 1e4, as node 3 of 4 under synchronous
// SGD. Unbounded, the lie goes through and the run diverges. Under --clip on every
// member announces its chunks' norms first, and node 0 (after node 3 on the ring)
// pulls what node 3 sends back to the norms its contributors announced.
TEST(Attacks, AByzantinePeerCannotPoisonTheClippedRing) {
  std::vector<std::string> args = {"--nodes", "4",   "--strategy", "allreduce",
                                   "--steps", "300", "--seed",     "1"};
  const Outcome open = with_byzantine_node(args, "ring-scale", 3, /*expect_ok=*/false);
  EXPECT_NE(open.json.find("\"ok\": false"), std::string::npos) << open.json;
  EXPECT_NE(open.json.find("diverged"), std::string::npos) << open.json;
  args.insert(args.end(), {"--clip", "on"});
  const Outcome& calm = undisturbed(args);
  const Outcome hit = with_byzantine_node(args, "ring-scale", 3);
  EXPECT_NEAR(hit.accuracy, calm.accuracy, 0.02);
  EXPECT_NE(hit.daemon_log.find("pulled back to their bounds (robust mode), the first: peer 3 "
                                "(left)"),
            std::string::npos)
      << hit.daemon_log;
}

}  // namespace
}  // namespace gossip::testing

// gossipd's configuration as validate_config checks it: every strategy's options, the
// cluster's sizes and topologies, and the reason each bad combination is refused.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "tests/daemon/config_test_util.h"

namespace gossip::daemon {
namespace {

// ---------------------------------------------------------------------------------------
// validate_config on configs built in code.

DaemonConfig valid_config() {
  DaemonConfig c;
  c.source = "test";
  c.node_id = 0;
  c.listen = "tcp://127.0.0.1:7000";
  c.run_dir = "/tmp/gossipd";
  c.peers = {{1, "tcp://127.0.0.1:7001"}};
  return c;
}

TEST(ValidateConfig, AcceptsAValidConfig) { EXPECT_TRUE(validate_config(valid_config()).is_ok()); }

DaemonConfig gossip_config(std::string strategy, std::string topology, int nodes) {
  DaemonConfig c = valid_config();
  c.strategy.name = std::move(strategy);
  c.strategy.topology = std::move(topology);
  c.peers.clear();
  for (int i = 1; i < nodes; ++i)
    c.peers.push_back({static_cast<uint32_t>(i), "tcp://127.0.0.1:" + std::to_string(7000 + i)});
  return c;
}

TEST(ValidateConfig, ClusterSizesAreBounded) {
  auto with_nodes = [](std::string strategy, std::string transport, int nodes) {
    DaemonConfig c = gossip_config(std::move(strategy), "", nodes);
    c.strategy.transport = std::move(transport);
    for (size_t i = 0; i < c.peers.size(); ++i)  // distinct endpoints past 65535 ports
      c.peers[i].endpoint = "tcp://10." + std::to_string((i + 1) / 256) + "." +
                            std::to_string((i + 1) % 256) + ".1:7000";
    return validate_config(c);
  };
  // The ring's message names hold as many ranks as gossipd takes nodes.
  EXPECT_TRUE(with_nodes("local-sgd", "tcp", static_cast<int>(kMaxNodes)).is_ok());
  EXPECT_TRUE(with_nodes("allreduce", "auto", 200).is_ok());
  const Status many = with_nodes("local-sgd", "allgather", static_cast<int>(kMaxNodes) + 1);
  EXPECT_FALSE(many.is_ok());
  EXPECT_NE(many.message().find("4097 nodes; at most 4096"), std::string::npos) << many.message();
}

TEST(ValidateConfig, ATrimmedLocalSgdGathersEveryModelFromEnoughNodes) {
  DaemonConfig c = gossip_config("local-sgd", "", 8);
  c.strategy.trim = 1;
  c.strategy.transport = "allgather";
  EXPECT_TRUE(validate_config(c).is_ok());
  c.strategy.transport = "tcp";
  EXPECT_TRUE(fails_with(validate_config(c),
                         {"key 'strategy.trim'", "a ring sums as it goes", "transport allgather"}));
  c.strategy.transport = "allgather";
  c.strategy.trim = 4;
  EXPECT_TRUE(fails_with(validate_config(c),
                         {"key 'strategy.trim'", "more than 8 nodes, this cluster has 8"}));
  c = gossip_config("choco", "", 8);
  c.strategy.trim = 1;
  EXPECT_TRUE(fails_with(validate_config(c), {"not for strategy choco"}));
}

TEST(ValidateConfig, TheRingsRobustModeRunsOnAnUncompressedRing) {
  DaemonConfig c = gossip_config("allreduce", "", 4);
  c.strategy.transport = "tcp";
  c.strategy.clip = "on";
  EXPECT_TRUE(validate_config(c).is_ok());
  c.strategy.codec = "fp16";
  EXPECT_TRUE(fails_with(validate_config(c),
                         {"key 'strategy.clip'", "bounds uncompressed rounds", "codec is fp16"}));
  c.strategy.codec = "none";
  c.strategy.allreduce_algorithm = "butterfly";
  EXPECT_TRUE(fails_with(validate_config(c), {"key 'strategy.clip'", "not the butterfly"}));
  c.strategy.allreduce_algorithm = "auto";
  c.strategy.transport = "allgather";
  EXPECT_TRUE(fails_with(validate_config(c), {"key 'strategy.clip'", "not transport allgather"}));
  c = gossip_config("local-sgd", "", 4);
  c.strategy.transport = "tcp";
  c.strategy.clip = "on";
  EXPECT_TRUE(validate_config(c).is_ok());
  c = gossip_config("choco", "", 4);
  c.strategy.clip = "on";
  EXPECT_TRUE(fails_with(validate_config(c), {"clipped mixing is not for strategy choco"}));
}

TEST(ValidateConfig, BanningAPeerNeedsKeys) {
  DaemonConfig c = gossip_config("gossip", "", 4);
  c.peers[1].banned = true;
  EXPECT_TRUE(
      fails_with(validate_config(c), {"key 'peers[1].banned'", "banning peer 2 needs CURVE"}));
  auto flags = from_args({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir", "/tmp",
                          "--peer", "1=tcp://127.0.0.1:7001", "--ban-peer", "5"});
  EXPECT_TRUE(fails_with(flags, {"--ban-peer 5", "no peer 5"}));
}

// Joining under CURVE: every seed is named with its public key, a seed's key needs
// this node's own, and admitting joiners by key needs CURVE.
TEST(ConfigArgs, AJoinUnderCurveNamesEachSeedsKey) {
  const std::string key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  const std::string secret = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
  const std::vector<std::string> base = {"--listen", "tcp://127.0.0.1:7009", "--run-dir", "/tmp"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return from_args(more);
  };
  auto one_without_key = with({"--join", key + "@tcp://10.0.0.1:7000,tcp://10.0.0.2:7000",
                               "--secret-key", secret, "--admit-keys", "/tmp/keys"});
  EXPECT_TRUE(fails_with(one_without_key, {"seed tcp://10.0.0.2:7000 needs its public key",
                                           "write KEY@tcp://10.0.0.2:7000"}));
  EXPECT_TRUE(fails_with(with({"--join", key + "@tcp://10.0.0.1:7000", "--secret-key", secret}),
                         {"node.join under CURVE needs node.admit_keys"}));
  auto good = with({"--join", key + "@tcp://10.0.0.1:7000", "--secret-key", secret, "--admit-keys",
                    "/tmp/keys"});
  ASSERT_TRUE(good.is_ok()) << good.status().message();
  const auto seeds = join_seeds(*good);
  ASSERT_EQ(seeds.size(), 1u);
  EXPECT_EQ(seeds[0].endpoint, "tcp://10.0.0.1:7000");
  EXPECT_EQ(seeds[0].public_key, key);
  EXPECT_TRUE(fails_with(with({"--join", key + "@tcp://10.0.0.1:7000"}),
                         {"seed tcp://10.0.0.1:7000 has a public key", "node.secret_key"}));
  EXPECT_TRUE(fails_with(with({"--join", "short@tcp://10.0.0.1:7000"}), {"--join"}));
  EXPECT_TRUE(fails_with(from_args({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir",
                                    "/tmp", "--admit-keys", "/tmp/keys"}),
                         {"--admit-keys", "needs CURVE"}));
}

TEST(ValidateConfig, GossipAcceptsEveryTopologyThatFits) {
  for (const char* strategy : {"gossip", "push-sum"})
    for (const char* topology : {"", "ring", "torus", "exponential", "one-peer-exponential",
                                 "random-regular:3", "complete"}) {
      auto st = validate_config(gossip_config(strategy, topology, 8));
      EXPECT_TRUE(st.is_ok()) << strategy << " " << topology << ": " << st.message();
    }
  EXPECT_EQ(gossip_config("push-sum", "", 8).topology_spec(), "one-peer-exponential");
  EXPECT_EQ(gossip_config("gossip", "", 8).topology_spec(), "ring");
}

TEST(ValidateConfig, GossipRefusesATopologyThatDoesNotFitOrAnUnknownOne) {
  EXPECT_TRUE(fails_with(validate_config(gossip_config("gossip", "hypercube", 8)),
                         {"key 'strategy.topology'", "hypercube"}));
  EXPECT_TRUE(fails_with(validate_config(gossip_config("gossip", "random-regular:3", 5)),
                         {"key 'strategy.topology'"}));
  EXPECT_TRUE(fails_with(validate_config(gossip_config("choco", "one-peer-exponential", 8)),
                         {"key 'strategy.topology'", "static topology"}));
}

TEST(ValidateConfig, GossipNeedsNodeIdsZeroToNMinusOne) {
  auto c = gossip_config("gossip", "ring", 4);
  c.peers[1].id = 9;  // ids 0, 1, 9, 3: 2 is missing
  EXPECT_TRUE(fails_with(validate_config(c), {"key 'peers'", "gossip needs node ids 0..n-1", "2"}));
  // Local SGD averages over whoever is listed and needs no such numbering.
  c.strategy.name = "local-sgd";
  EXPECT_TRUE(validate_config(c).is_ok());
}

TEST(ValidateConfig, AnElasticRingIsForTheRingAllReduceOnly) {
  auto c = valid_config();
  c.strategy.name = "local-sgd";
  c.strategy.transport = "tcp";
  c.strategy.elastic = "on";
  EXPECT_TRUE(validate_config(c).is_ok());
  c.strategy.transport = "allgather";
  EXPECT_TRUE(fails_with(validate_config(c), {"key 'strategy.elastic'", "transport allgather"}));
  c.strategy.transport = "nccl";
  EXPECT_TRUE(fails_with(validate_config(c), {"key 'strategy.elastic'", "transport nccl"}));
  auto g = gossip_config("gossip", "ring", 4);
  g.strategy.elastic = "on";
  EXPECT_TRUE(fails_with(validate_config(g), {"key 'strategy.elastic'", "not strategy gossip"}));
  EXPECT_TRUE(fails_with(from_args({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir",
                                    "/tmp", "--elastic", "yes"}),
                         {"flag '--elastic'", "off, on", "yes"}));
}

// The options of issue 19: each is refused, naming the key and the reason, where it
// does not apply or does not parse.
TEST(ValidateConfig, AllReduceAlgorithmsParameterServersAndSmaOptions) {
  const std::vector<std::string> base = {"--id",      "0",    "--listen", "tcp://127.0.0.1:7000",
                                         "--run-dir", "/tmp", "--peer",   "1=tcp://127.0.0.1:7001"};
  const auto args = [&](std::vector<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more.begin(), more.end());
    return from_args(a);
  };
  EXPECT_TRUE(args({"--allreduce-algorithm", "butterfly"}).is_ok());
  EXPECT_TRUE(fails_with(args({"--allreduce-algorithm", "bfly"}),
                         {"flag '--allreduce-algorithm'", "auto, ring, tree, butterfly, master"}));
  EXPECT_TRUE(fails_with(args({"--allreduce-algorithm", "tree", "--transport", "rdma"}),
                         {"flag '--allreduce-algorithm'", "tcp transport"}));
  EXPECT_TRUE(fails_with(args({"--allreduce-algorithm", "tree", "--strategy", "gossip"}),
                         {"flag '--allreduce-algorithm'", "not strategy gossip"}));
  EXPECT_TRUE(fails_with(args({"--allreduce-table", "/nonexistent/table"}),
                         {"cannot read the all-reduce table '/nonexistent/table'"}));
  TempDir dir;
  const std::string table = dir.write("table", "# ok\n4 64K tree\n8 1M sideways\n");
  EXPECT_TRUE(
      fails_with(args({"--allreduce-table", table}), {"table:3", "unknown algorithm 'sideways'"}));
  const std::string good = dir.write("good", "4 64K tree\n128 1G butterfly\n");
  EXPECT_TRUE(args({"--allreduce-table", good}).is_ok());

  // The sparse reduce-scatter (issue 23): said outright, it must be what runs.
  EXPECT_TRUE(
      args({"--sparse-allreduce", "reduce-scatter", "--codec", "topk:0.01+quant:2"}).is_ok());
  EXPECT_TRUE(args({"--sparse-allreduce", "all-gather", "--codec", "sign"}).is_ok());
  EXPECT_TRUE(fails_with(args({"--sparse-allreduce", "gtopk"}),
                         {"flag '--sparse-allreduce'", "auto, reduce-scatter, all-gather"}));
  EXPECT_TRUE(fails_with(args({"--sparse-allreduce", "reduce-scatter", "--codec", "randk:0.01"}),
                         {"flag '--sparse-allreduce'", "the codec is randk:0.01"}));
  EXPECT_TRUE(fails_with(args({"--sparse-allreduce", "reduce-scatter", "--codec", "topk:0.01",
                               "--transport", "allgather"}),
                         {"flag '--sparse-allreduce'", "transport allgather"}));
  EXPECT_TRUE(fails_with(args({"--sparse-allreduce", "reduce-scatter", "--codec", "topk:0.01",
                               "--allreduce-algorithm", "butterfly"}),
                         {"flag '--sparse-allreduce'", "not the butterfly all-reduce"}));

  EXPECT_TRUE(args({"--strategy", "ps", "--servers", "2", "--ps-mode", "ssp:4"}).is_ok());
  EXPECT_TRUE(fails_with(args({"--strategy", "ps", "--ps-mode", "ssp"}),
                         {"--ps-mode", "bsp, async or ssp:S"}));
  EXPECT_TRUE(fails_with(args({"--strategy", "ps", "--servers", "3"}),
                         {"flag '--servers'", "3 servers, but the cluster has 2 nodes"}));
  EXPECT_TRUE(fails_with(
      args({"--servers", "2"}),
      {"flag '--servers'", "parameter servers (strategy ps)", "not strategy local-sgd"}));
  EXPECT_TRUE(fails_with(args({"--strategy", "ps", "--ps-fetch", "4"}),
                         {"flag '--ps-fetch'", "bsp pulls after every push"}));
  EXPECT_TRUE(args({"--strategy", "ps", "--ps-replicas", "1"}).is_ok());
  EXPECT_TRUE(fails_with(args({"--strategy", "ps", "--ps-replicas", "2"}),
                         {"flag '--ps-replicas'", "2 replicas of each shard need 3 nodes"}));
  EXPECT_TRUE(fails_with(args({"--ps-replicas", "1"}),
                         {"flag '--ps-replicas'", "parameter servers (strategy ps)"}));
  EXPECT_TRUE(fails_with(args({"--strategy", "ps", "--ps-optimizer", "lamb"}),
                         {"flag '--ps-optimizer'", "sgd, momentum, adam"}));
  EXPECT_TRUE(args({"--strategy", "sma", "--learners-per-device", "2"}).is_ok());
  EXPECT_TRUE(fails_with(args({"--learners-per-device", "2"}),
                         {"flag '--learners-per-device'", "(strategy sma)"}));
  EXPECT_TRUE(fails_with(args({"--strategy", "sma", "--sma-alpha", "2"}), {"flag '--sma-alpha'"}));
  // SMA's own check (sgd/strategies/sma/options.cc): alpha against the learners.
  EXPECT_TRUE(
      args({"--strategy", "sma", "--learners-per-device", "4", "--sma-alpha", "0.25"}).is_ok());
  EXPECT_TRUE(
      fails_with(args({"--strategy", "sma", "--learners-per-device", "4", "--sma-alpha", "0.5"}),
                 {"flag '--sma-alpha'", "0.5 x 4 learners is over 1"}));
}

TEST(ValidateConfig, RefusesEachBadField) {
  {
    auto c = valid_config();
    c.strategy.period = 0;
    EXPECT_TRUE(fails_with(validate_config(c), {"test: key 'strategy.period'", "got 0"}));
  }
  {
    auto c = valid_config();
    c.listen.clear();
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'node.listen'"}));
  }
  {
    auto c = valid_config();
    c.run_dir.clear();
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'node.run_dir'"}));
  }
  {
    auto c = valid_config();
    c.strategy.name = "all-reduce";
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'strategy.name'", "local-sgd"}));
  }
  {
    auto c = valid_config();
    c.strategy.round_timeout_s = 0;
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'strategy.round_timeout'"}));
  }
  {
    auto c = valid_config();
    c.max_trainers = 0;
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'node.max_trainers'"}));
  }
  {
    auto c = valid_config();
    c.strategy.period = uint64_t{1} << 63;  // beyond what TOML can say
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'strategy.period'"}));
  }
  {
    auto c = valid_config();
    c.peers.push_back({1, "tcp://127.0.0.1:7009"});
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'peers[1].id'", "duplicate"}));
  }
  {
    auto c = valid_config();
    c.peers[0].endpoint = "tcp://h:0";
    EXPECT_TRUE(fails_with(validate_config(c), {"key 'peers[0].endpoint'", "port 0"}));
  }
  {
    auto c = valid_config();
    c.source.clear();
    c.strategy.outer.momentum = 1.5;
    EXPECT_TRUE(fails_with(validate_config(c), {"config: key 'strategy.outer.momentum'"}));
  }
}

}  // namespace
}  // namespace gossip::daemon

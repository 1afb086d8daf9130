// gossipd's configuration: the TOML file, the flags, and the messages of every bad case.

#include "daemon/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tests/bin_dir.h"
#include "tests/daemon/config_test_util.h"

namespace gossip::daemon {
namespace {

// A config with every key; bad cases below change one line of it.
constexpr std::string_view kFull = R"([node]
id = 0
listen = "tcp://127.0.0.1:7000"
run_dir = "/tmp/gossipd"
seed = 7
log_level = "debug"
max_trainers = 4

[[peers]]
id = 1
endpoint = "tcp://127.0.0.1:7001"

[[peers]]
id = 2
endpoint = "tcp://127.0.0.1:7002"

[strategy]
name = "local-sgd"
period = 4
post_local = 10
round_timeout = 30.5
chunk_bytes = 65536

[strategy.outer]
optimizer = "nesterov"
lr = 0.7
momentum = 0.5
)";

constexpr std::string_view kMinimal = R"([node]
id = 3
listen = "tcp://10.0.0.3:7000"
run_dir = "/run/gossipd"
)";

// `text` with its one occurrence of `from` replaced by `to`.
std::string with(std::string_view text, std::string_view from, std::string_view to) {
  std::string out(text);
  const size_t at = out.find(from);
  EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the document";
  if (at != std::string::npos) out.replace(at, from.size(), to);
  EXPECT_EQ(out.find(from, at + to.size()), std::string::npos)
      << "test bug: '" << from << "' twice";
  return out;
}

// ---------------------------------------------------------------------------------------
// Good files.

TEST(ConfigFile, FullDocumentSetsEveryValue) {
  auto c = parse_config(std::string(kFull), "node.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->source, "node.toml");
  EXPECT_EQ(c->node_id, 0u);
  EXPECT_EQ(c->listen, "tcp://127.0.0.1:7000");
  EXPECT_EQ(c->run_dir, "/tmp/gossipd");
  EXPECT_EQ(c->seed, 7u);
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->max_trainers, 4u);
  ASSERT_EQ(c->peers.size(), 2u);
  EXPECT_EQ(c->peers[0].id, 1u);
  EXPECT_EQ(c->peers[0].endpoint, "tcp://127.0.0.1:7001");
  EXPECT_EQ(c->peers[1].id, 2u);
  EXPECT_EQ(c->peers[1].endpoint, "tcp://127.0.0.1:7002");
  EXPECT_EQ(c->strategy.name, "local-sgd");
  EXPECT_EQ(c->strategy.period, 4u);
  EXPECT_EQ(c->strategy.post_local, 10u);
  EXPECT_DOUBLE_EQ(c->strategy.round_timeout_s, 30.5);
  EXPECT_EQ(c->strategy.chunk_bytes, 65536u);
  EXPECT_EQ(c->strategy.outer.kind, "nesterov");
  EXPECT_DOUBLE_EQ(c->strategy.outer.lr, 0.7);
  EXPECT_DOUBLE_EQ(c->strategy.outer.momentum, 0.5);
  EXPECT_EQ(c->nodes(), 3u);
  EXPECT_EQ(c->ipc_endpoint(), "ipc:///tmp/gossipd/gossipd-0.sock");
  EXPECT_TRUE(validate_config(*c).is_ok());
}

TEST(ConfigFile, MinimalDocumentTakesTheDefaults) {
  auto c = parse_config(std::string(kMinimal), "min.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const DaemonConfig defaults;
  EXPECT_EQ(c->node_id, 3u);
  EXPECT_EQ(c->listen, "tcp://10.0.0.3:7000");
  EXPECT_EQ(c->run_dir, "/run/gossipd");
  EXPECT_EQ(c->seed, defaults.seed);
  EXPECT_EQ(c->log_level, "info");
  EXPECT_EQ(c->max_trainers, defaults.max_trainers);
  EXPECT_EQ(c->strategy.name, "local-sgd");
  EXPECT_EQ(c->strategy.period, defaults.strategy.period);
  EXPECT_EQ(c->strategy.post_local, 0u);
  EXPECT_DOUBLE_EQ(c->strategy.round_timeout_s, defaults.strategy.round_timeout_s);
  EXPECT_EQ(c->strategy.chunk_bytes, defaults.strategy.chunk_bytes);
  EXPECT_EQ(c->strategy.outer.kind, "none");
  EXPECT_DOUBLE_EQ(c->strategy.outer.lr, 1.0);
  EXPECT_DOUBLE_EQ(c->strategy.outer.momentum, 0.9);
}

// The adaptive timeouts are on by default where a late peer costs a round, not the run.
TEST(ConfigArgs, TheTimeoutFactorsAreAutoByDefaultAndChosenByTheStrategy) {
  const std::vector<std::string> base = {
      "--id",      "0",   "--listen", "tcp://127.0.0.1:7000", "--peer", "1=tcp://127.0.0.1:7001",
      "--run-dir", "/tmp"};
  const auto strategy_of = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    auto c = from_args(args);
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.is_ok() ? c->strategy : StrategyConfig{};
  };
  StrategyConfig s = strategy_of({"--strategy", "gossip"});
  EXPECT_TRUE(std::isnan(s.round_timeout_factor)) << "auto";
  EXPECT_DOUBLE_EQ(s.round_timeout_factor_in_force(), kAutoRoundTimeoutFactor);
  EXPECT_DOUBLE_EQ(s.dead_after().factor, kAutoDeadAfterFactor);
  s = strategy_of({"--strategy", "local-sgd"});
  EXPECT_DOUBLE_EQ(s.round_timeout_factor_in_force(), 0.0) << "a late round fails the ring";
  s = strategy_of({"--strategy", "local-sgd", "--elastic", "on"});
  EXPECT_DOUBLE_EQ(s.round_timeout_factor_in_force(), 0.0) << "a try, a re-form and a retry";
  s = strategy_of({"--strategy", "ps", "--servers", "1"});
  EXPECT_DOUBLE_EQ(s.round_timeout_factor_in_force(), 0.0);
  EXPECT_DOUBLE_EQ(s.dead_after().factor, 0.0);
  // Given, a number is what it says; "auto" can be given too.
  s = strategy_of(
      {"--strategy", "gossip", "--round-timeout-factor", "0", "--dead-after-factor", "2"});
  EXPECT_DOUBLE_EQ(s.round_timeout_factor_in_force(), 0.0);
  EXPECT_DOUBLE_EQ(s.dead_after().factor, 2.0);
  s = strategy_of({"--strategy", "local-sgd", "--round-timeout-factor", "4"});
  EXPECT_DOUBLE_EQ(s.round_timeout_factor_in_force(), 4.0);
  s = strategy_of(
      {"--strategy", "gossip", "--round-timeout-factor", "1", "--round-timeout-factor", "auto"});
  EXPECT_DOUBLE_EQ(s.round_timeout_factor_in_force(), kAutoRoundTimeoutFactor);
  auto toml = parse_config(
      std::string(kMinimal) + "\n[strategy]\nround_timeout_factor = \"auto\"\n", "auto.toml");
  ASSERT_TRUE(toml.is_ok()) << toml.status().message();
  EXPECT_TRUE(std::isnan(toml->strategy.round_timeout_factor));
  // NaN is not a way to say auto: the flag takes numbers and the word.
  for (const char* bad : {"nan", "-1", "automatic"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--round-timeout-factor", bad});
    auto c = from_args(args);
    ASSERT_FALSE(c.is_ok()) << bad;
    EXPECT_NE(c.status().message().find("a number >= 0, or auto"), std::string::npos)
        << c.status().message();
  }
}

// A live peer that waits is heard once a heartbeat: a dead-after under two of them
// would take it for dead. Refused where heartbeats are what it watches; the ring's
// re-form wait (local SGD) is no heartbeat's.
TEST(ConfigArgs, ADeadAfterUnderTwoHeartbeatsIsRefusedWhereHeartbeatsAreWatched) {
  const std::vector<std::string> base = {"--id",         "0",
                                         "--listen",     "tcp://127.0.0.1:7000",
                                         "--peer",       "1=tcp://127.0.0.1:7001",
                                         "--run-dir",    "/tmp",
                                         "--dead-after", "1.5",
                                         "--heartbeat",  "1"};
  for (const char* strategy : {"gossip", "push-sum", "ps"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--strategy", strategy});
    auto c = from_args(args);
    ASSERT_FALSE(c.is_ok()) << strategy;
    EXPECT_NE(c.status().message().find("--dead-after"), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("less than two heartbeats (heartbeat 1 s)"),
              std::string::npos)
        << c.status().message();
  }
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--strategy", "local-sgd"});
  auto ring = from_args(args);
  EXPECT_TRUE(ring.is_ok()) << ring.status().message();
  args = base;
  args.insert(args.end(), {"--strategy", "gossip", "--heartbeat", "0.5"});
  auto fine = from_args(args);
  EXPECT_TRUE(fine.is_ok()) << fine.status().message();
}

TEST(ConfigFile, SingleNodeClusterIsValid) {
  auto c = parse_config(std::string(kMinimal), "one.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE(c->peers.empty());
  EXPECT_EQ(c->nodes(), 1u);
  EXPECT_TRUE(c->remote_peers().empty());
  EXPECT_EQ(c->ipc_endpoint(), "ipc:///run/gossipd/gossipd-3.sock");

  auto empty_list = parse_config(std::string(kMinimal) + "peers = []\n", "one.toml");
  // `peers = []` after [node] would be node.peers; put it at the top instead.
  EXPECT_TRUE(fails_with(empty_list, {"one.toml", "node.peers", "unknown key"}));
  auto top = parse_config("peers = []\n" + std::string(kMinimal), "one.toml");
  ASSERT_TRUE(top.is_ok()) << top.status().message();
  EXPECT_EQ(top->nodes(), 1u);
}

TEST(ConfigFile, SelfEntryInPeersIsAllowedAndNotARemotePeer) {
  // One peer list shared by every node: node 1's own entry is in it, unsorted.
  const std::string text = R"([node]
id = 1
listen = "tcp://127.0.0.1:7001"
run_dir = "/tmp/g/"

[[peers]]
id = 2
endpoint = "tcp://127.0.0.1:7002"

[[peers]]
id = 1
endpoint = "tcp://127.0.0.1:7001"

[[peers]]
id = 0
endpoint = "tcp://127.0.0.1:7000"
)";
  auto c = parse_config(text, "shared.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->peers.size(), 3u);
  EXPECT_EQ(c->nodes(), 3u);
  const auto remote = c->remote_peers();
  ASSERT_EQ(remote.size(), 2u);
  EXPECT_EQ(remote[0].id, 0u);
  EXPECT_EQ(remote[0].endpoint, "tcp://127.0.0.1:7000");
  EXPECT_EQ(remote[1].id, 2u);
  EXPECT_EQ(c->ipc_endpoint(), "ipc:///tmp/g/gossipd-1.sock");
}

TEST(ConfigFile, OtherAcceptedForms) {
  // Integers where numbers are expected, inline tables, dotted keys, hostnames, IPv6.
  const std::string text = R"(
node = { id = 5, listen = "tcp://[::1]:7005", run_dir = "rel/dir" }
strategy.period = 2
strategy.round_timeout = 5
strategy.outer = { optimizer = "none", lr = 2, momentum = 0 }
peers = [ { id = 6, endpoint = "tcp://node-6.example.org:65535" } ]
)";
  auto c = parse_config(text, "forms.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->node_id, 5u);
  EXPECT_EQ(c->listen, "tcp://[::1]:7005");
  EXPECT_EQ(c->strategy.period, 2u);
  EXPECT_DOUBLE_EQ(c->strategy.round_timeout_s, 5.0);
  EXPECT_DOUBLE_EQ(c->strategy.outer.lr, 2.0);
  EXPECT_DOUBLE_EQ(c->strategy.outer.momentum, 0.0);
  ASSERT_EQ(c->peers.size(), 1u);
  EXPECT_EQ(c->peers[0].endpoint, "tcp://node-6.example.org:65535");
  EXPECT_EQ(c->ipc_endpoint(), "ipc://rel/dir/gossipd-5.sock");
}

TEST(ConfigFile, BoundaryValuesAreAccepted) {
  std::string text = with(kFull, "chunk_bytes = 65536", "chunk_bytes = 268435456");
  text = with(text, "max_trainers = 4", "max_trainers = 64");
  text = with(text, "period = 4", "period = 1");
  text = with(text, "post_local = 10", "post_local = 0");
  text = with(text, "id = 0\n", "id = 4294967295\n");
  text = with(text, "momentum = 0.5", "momentum = 0.0");
  auto c = parse_config(text, "edge.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->strategy.chunk_bytes, 268435456u);
  EXPECT_EQ(c->node_id, 4294967295u);

  text = with(kFull, "chunk_bytes = 65536", "chunk_bytes = 4096");
  text = with(text, "max_trainers = 4", "max_trainers = 1");
  EXPECT_TRUE(parse_config(text, "edge.toml").is_ok());
}

TEST(ConfigFile, TheExampleFileIsValid) {
  ASSERT_FALSE(test_source_dir().empty()) << kSourceDirMissing;
  auto c = load_config_file(test_source_dir() + "/daemon/gossipd.example.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->node_id, 0u);
  EXPECT_EQ(c->listen, "tcp://127.0.0.1:7000");
  EXPECT_EQ(c->strategy.period, 4u);
  EXPECT_EQ(c->nodes(), 3u);
  EXPECT_EQ(c->strategy.outer.kind, "none");
}

TEST(ConfigFile, LoadsFromDisk) {
  TempDir dir;
  const std::string path = dir.write("node.toml", kFull);
  auto c = load_config_file(path);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->source, path);
  EXPECT_EQ(c->strategy.period, 4u);
}

// ---------------------------------------------------------------------------------------
// Bad files: each message names the source, the key and what is wrong.

struct BadCase {
  const char* name;
  std::string text;
  std::vector<std::string_view> parts;  // besides the source "node.toml"
};

std::vector<BadCase> bad_cases() {
  const std::string_view k = kFull;
  return {
      // Syntax.
      {"SyntaxError", with(k, "period = 4", "period = = 4"), {"node.toml:19:", "TOML parse error"}},
      {"UnclosedTable", "[node\nid = 0\n", {"node.toml:1:", "TOML parse error"}},
      {"DuplicateKey",
       with(k, "period = 4", "period = 4\nperiod = 5"),
       {"node.toml:20:", "TOML parse error"}},
      // Unknown keys and tables.
      {"UnknownKey",
       with(k, "listen =", "lsten ="),
       {"key 'node.lsten'", "unknown key", "did you mean 'listen'?", "line 3"}},
      {"UnknownStrategyKey",
       with(k, "period = 4", "period = 4\nperiods = 4"),
       {"key 'strategy.periods'", "unknown key"}},
      {"UnknownOuterKey",
       with(k, "lr = 0.7", "learning_rate = 0.7"),
       {"key 'strategy.outer.learning_rate'", "unknown key"}},
      {"UnknownTable",
       with(k, "[strategy.outer]", "[strategy.outr]"),
       {"key 'strategy.outr'", "unknown table", "did you mean 'outer'?"}},
      {"UnknownTopLevelTable",
       std::string(k) + "[metrics]\nport = 9100\n",
       {"key 'metrics'", "unknown table", "valid keys at the top level: node, strategy, peers"}},
      {"UnknownTopLevelKey", "verbose = true\n" + std::string(k), {"key 'verbose'", "unknown key"}},
      {"UnknownPeerKey",
       with(k, "id = 2\n", "id = 2\npubkey = \"abc\"\n"),
       {"key 'peers[1].pubkey'", "unknown key", "id, endpoint"}},
      // Wrong types.
      {"IdIsAString", with(k, "id = 0\n", "id = \"0\"\n"), {"key 'node.id'", "got string '0'"}},
      {"PeriodIsAFloat",
       with(k, "period = 4", "period = 4.5"),
       {"key 'strategy.period'", "must be an integer >= 1, got floating-point 4.5"}},
      {"ListenIsAnInteger",
       with(k, "listen = \"tcp://127.0.0.1:7000\"", "listen = 7000"),
       {"key 'node.listen'", "got integer 7000"}},
      {"LrIsAString",
       with(k, "lr = 0.7", "lr = \"0.7\""),
       {"key 'strategy.outer.lr'", "got string '0.7'"}},
      {"MaxTrainersIsABool",
       with(k, "max_trainers = 4", "max_trainers = true"),
       {"key 'node.max_trainers'", "got boolean true"}},
      {"LogLevelIsAnArray",
       with(k, "log_level = \"debug\"", "log_level = [\"debug\"]"),
       {"key 'node.log_level'", "got an array"}},
      {"NodeIsNotATable", "node = 3\n", {"key 'node'", "must be a table, got integer 3"}},
      {"StrategyIsNotATable",
       "strategy = 3\n" + std::string(kMinimal),
       {"key 'strategy'", "must be a table"}},
      {"UnknownEmptyTable", std::string(kMinimal) + "[x]\n", {"key 'x'", "unknown table"}},
      {"PeersIsATable",
       std::string(kMinimal) + "[peers]\nid = 1\n",
       {"key 'peers'", "must be an array of tables"}},
      {"PeerIsNotATable",
       "peers = [1]\n" + std::string(kMinimal),
       {"key 'peers[0]'", "must be a table"}},
      {"PeerIdIsAString",
       with(k, "id = 1\n", "id = \"1\"\n"),
       {"key 'peers[0].id'", "got string '1'"}},
      {"PeerEndpointIsAnInteger",
       with(k, "endpoint = \"tcp://127.0.0.1:7002\"", "endpoint = 7002"),
       {"key 'peers[1].endpoint'", "got integer 7002"}},
      // Values out of range.
      {"NegativePeriod",
       with(k, "period = 4", "period = -3"),
       {"node.toml: key 'strategy.period': must be an integer >= 1, got -3"}},
      {"ZeroPeriod", with(k, "period = 4", "period = 0"), {"key 'strategy.period'", "got 0"}},
      {"NegativePostLocal",
       with(k, "post_local = 10", "post_local = -1"),
       {"key 'strategy.post_local'", "must be an integer >= 0, got -1"}},
      {"ZeroRoundTimeout",
       with(k, "round_timeout = 30.5", "round_timeout = 0.0"),
       {"key 'strategy.round_timeout'", "must be a number > 0, got 0"}},
      {"NegativeRoundTimeout",
       with(k, "round_timeout = 30.5", "round_timeout = -1"),
       {"key 'strategy.round_timeout'", "got -1"}},
      {"InfiniteRoundTimeout",
       with(k, "round_timeout = 30.5", "round_timeout = inf"),
       {"key 'strategy.round_timeout'", "got inf"}},
      {"SmallChunk",
       with(k, "chunk_bytes = 65536", "chunk_bytes = 4092"),
       {"key 'strategy.chunk_bytes'", "4096..268435456", "got 4092"}},
      {"ChunkNotAMultipleOf4",
       with(k, "chunk_bytes = 65536", "chunk_bytes = 65538"),
       {"key 'strategy.chunk_bytes'", "multiple of 4", "got 65538"}},
      {"HugeChunk",
       with(k, "chunk_bytes = 65536", "chunk_bytes = 268435460"),
       {"key 'strategy.chunk_bytes'", "got 268435460"}},
      {"ZeroMaxTrainers",
       with(k, "max_trainers = 4", "max_trainers = 0"),
       {"key 'node.max_trainers'", "must be an integer in 1..64, got 0"}},
      {"TooManyTrainers",
       with(k, "max_trainers = 4", "max_trainers = 65"),
       {"key 'node.max_trainers'", "got 65"}},
      {"NegativeNodeId", with(k, "id = 0\n", "id = -1\n"), {"key 'node.id'", "got -1"}},
      {"NodeIdOver32Bits",
       with(k, "id = 0\n", "id = 4294967296\n"),
       {"key 'node.id'", "0..4294967295", "got 4294967296"}},
      {"NegativePeerId", with(k, "id = 2\n", "id = -2\n"), {"key 'peers[1].id'", "got -2"}},
      {"NegativeSeed", with(k, "seed = 7", "seed = -7"), {"key 'node.seed'", "got -7"}},
      {"MomentumOne",
       with(k, "momentum = 0.5", "momentum = 1.0"),
       {"key 'strategy.outer.momentum'", "must be a number in [0, 1), got 1"}},
      {"NegativeMomentum",
       with(k, "momentum = 0.5", "momentum = -0.1"),
       {"key 'strategy.outer.momentum'", "got -0.1"}},
      {"ZeroLr",
       with(k, "lr = 0.7", "lr = 0"),
       {"key 'strategy.outer.lr'", "must be a number > 0, got 0"}},
      {"NanLr", with(k, "lr = 0.7", "lr = nan"), {"key 'strategy.outer.lr'", "got nan"}},
      {"EmptyRunDir",
       with(k, "run_dir = \"/tmp/gossipd\"", "run_dir = \"\""),
       {"key 'node.run_dir'", "must not be empty"}},
      {"RunDirTooLongForASocket",
       with(k, "/tmp/gossipd", "/tmp/" + std::string(120, 'd')),
       {"key 'node.run_dir'", "Unix socket path"}},
      // Names.
      {"UnknownStrategy",
       with(k, "name = \"local-sgd\"", "name = \"sgd\""),
       {"key 'strategy.name'",
        "must be one of (local-sgd, gossip, choco, push-sum, async-gossip, allreduce, ps, sma), "
        "got 'sgd'"}},
      {"UnknownOuterOptimizer",
       with(k, "optimizer = \"nesterov\"", "optimizer = \"adam\""),
       {"key 'strategy.outer.optimizer'", "one of (none, nesterov)", "got 'adam'"}},
      {"UnknownLogLevel",
       with(k, "log_level = \"debug\"", "log_level = \"verbose\""),
       {"key 'node.log_level'", "trace, debug, info, warn, error, off", "got 'verbose'"}},
      // Endpoints.
      {"ListenWithoutScheme",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"127.0.0.1:7000\""),
       {"key 'node.listen'", "invalid endpoint '127.0.0.1:7000'", "tcp://HOST:PORT"}},
      {"ListenUdp",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"udp://127.0.0.1:7000\""),
       {"key 'node.listen'", "must start with tcp://"}},
      {"ListenWithoutPort",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"tcp://127.0.0.1\""),
       {"key 'node.listen'", "no ':PORT'"}},
      {"ListenEmptyPort",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"tcp://127.0.0.1:\""),
       {"key 'node.listen'", "no port"}},
      {"ListenWithoutHost",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"tcp://:7000\""),
       {"key 'node.listen'", "no host"}},
      {"ListenBareIpv6",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"tcp://::1:7000\""),
       {"key 'node.listen'", "invalid host '::1'"}},
      {"ListenZeroMqWildcard",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"tcp://*:7000\""),
       {"key 'node.listen'", "'*' is not a host", "0.0.0.0"}},
      {"ListenEmpty",
       with(k, "\"tcp://127.0.0.1:7000\"", "\"\""),
       {"key 'node.listen'", "invalid endpoint ''"}},
      {"PeerPortZero",
       with(k, "\"tcp://127.0.0.1:7001\"", "\"tcp://127.0.0.1:0\""),
       {"key 'peers[0].endpoint'", "port 0 is out of range", "1..65535"}},
      {"PeerPortTooBig",
       with(k, "\"tcp://127.0.0.1:7001\"", "\"tcp://127.0.0.1:70000\""),
       {"key 'peers[0].endpoint'", "port 70000 is out of range"}},
      {"PeerPortHuge",
       with(k, "\"tcp://127.0.0.1:7001\"", "\"tcp://127.0.0.1:99999999999999999999\""),
       {"key 'peers[0].endpoint'", "out of range"}},
      {"PeerPortNotANumber",
       with(k, "\"tcp://127.0.0.1:7001\"", "\"tcp://127.0.0.1:http\""),
       {"key 'peers[0].endpoint'", "port 'http' is not a number"}},
      {"PeerPortNegative",
       with(k, "\"tcp://127.0.0.1:7001\"", "\"tcp://127.0.0.1:-1\""),
       {"key 'peers[0].endpoint'", "port '-1' is not a number"}},
      {"PeerHostWithPath",
       with(k, "\"tcp://127.0.0.1:7001\"", "\"tcp://127.0.0.1/x:7001\""),
       {"key 'peers[0].endpoint'", "invalid host"}},
      {"PeerIpv6Unclosed",
       with(k, "\"tcp://127.0.0.1:7001\"", "\"tcp://[::1:7001\""),
       {"key 'peers[0].endpoint'", "without ']'"}},
      // Cross-field checks.
      {"DuplicatePeerIds",
       with(k, "id = 2\n", "id = 1\n"),
       {"key 'peers[1].id'", "duplicate peer id 1 (also in peers[0])"}},
      {"SelfEntryWithAnotherEndpoint",
       with(k, "id = 2\n", "id = 0\n"),
       {"key 'peers[1].endpoint'", "entry for this node (id 0)",
        "must equal node.listen 'tcp://127.0.0.1:7000'", "got 'tcp://127.0.0.1:7002'"}},
      {"DuplicateEndpoints",
       with(k, "\"tcp://127.0.0.1:7002\"", "\"tcp://127.0.0.1:7001\""),
       {"key 'peers[1].endpoint'",
        "'tcp://127.0.0.1:7001' is also the endpoint of peers[0] (id 1)"}},
      {"PeerUsesOurListenEndpoint",
       with(k, "\"tcp://127.0.0.1:7002\"", "\"tcp://127.0.0.1:7000\""),
       {"key 'peers[1].endpoint'", "node.listen"}},
      // Missing keys.
      {"MissingNodeId", with(k, "id = 0\n", ""), {"missing key 'node.id'"}},
      {"MissingListen",
       with(k, "listen = \"tcp://127.0.0.1:7000\"\n", ""),
       {"missing key 'node.listen'"}},
      {"MissingRunDir",
       with(k, "run_dir = \"/tmp/gossipd\"\n", ""),
       {"missing key 'node.run_dir'"}},
      {"MissingNodeTable", "[strategy]\nperiod = 2\n", {"missing key 'node.id'"}},
      {"EmptyDocument", "", {"missing key 'node.id'"}},
      {"MissingPeerId", with(k, "id = 2\n", ""), {"missing key 'peers[1].id'"}},
      {"MissingPeerEndpoint",
       with(k, "endpoint = \"tcp://127.0.0.1:7001\"\n", ""),
       {"missing key 'peers[0].endpoint'"}},
  };
}

class ConfigFileBad : public testing::TestWithParam<BadCase> {};

TEST_P(ConfigFileBad, IsRefusedWithSourceKeyAndProblem) {
  const BadCase& bad = GetParam();
  auto c = parse_config(bad.text, "node.toml");
  ASSERT_FALSE(c.is_ok()) << "accepted:\n" << bad.text;
  RecordProperty("message", c.status().message());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalid);
  EXPECT_TRUE(c.status().message().starts_with("node.toml")) << c.status().message();
  for (std::string_view part : bad.parts)
    EXPECT_NE(c.status().message().find(part), std::string::npos)
        << "message: " << c.status().message() << "\nlacks: " << part;
}

INSTANTIATE_TEST_SUITE_P(Cases, ConfigFileBad, testing::ValuesIn(bad_cases()),
                         [](const testing::TestParamInfo<BadCase>& info) {
                           return info.param.name;
                         });

TEST(ConfigFile, ParseErrorCarriesLineAndColumn) {
  auto c = parse_config("[node]\nid = 0\nlisten = tcp://x\n", "node.toml");
  ASSERT_FALSE(c.is_ok());
  EXPECT_TRUE(c.status().message().starts_with("node.toml:3:")) << c.status().message();
  EXPECT_NE(c.status().message().find("TOML parse error"), std::string::npos);
}

TEST(ConfigFile, MissingFileNamesThePathAndTheReason) {
  TempDir dir;
  const std::string path = (dir.path() / "x.toml").string();
  auto c = load_config_file(path);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(),
            "cannot read config file '" + path + "': No such file or directory");

  auto d = load_config_file(dir.path().string());
  EXPECT_TRUE(fails_with(d, {"cannot read config file", "Is a directory"}));
}

TEST(ConfigFile, ErrorsFromDiskNameTheFile) {
  TempDir dir;
  const std::string path = dir.write("node.toml", with(kFull, "period = 4", "period = -3"));
  EXPECT_TRUE(
      fails_with(load_config_file(path),
                 {path + ": key 'strategy.period': must be an integer >= 1, got -3 (line 19)"}));
  const std::string broken = dir.write("broken.toml", "[node]\nid = 0\n\n[strategy\n");
  EXPECT_TRUE(fails_with(load_config_file(broken), {broken + ":4:", "TOML parse error"}));
}

// ---------------------------------------------------------------------------------------
// Flags.

TEST(ConfigArgs, FlagsAloneMakeAConfig) {
  auto c = from_args({"--id", "2", "--listen", "tcp://127.0.0.1:7002", "--run-dir", "/tmp/g",
                      "--peer", "0=tcp://127.0.0.1:7000", "--peer", "1=tcp://127.0.0.1:7001"});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->source, "command line");
  EXPECT_EQ(c->node_id, 2u);
  EXPECT_EQ(c->listen, "tcp://127.0.0.1:7002");
  EXPECT_EQ(c->run_dir, "/tmp/g");
  ASSERT_EQ(c->peers.size(), 2u);
  EXPECT_EQ(c->peers[0].id, 0u);
  EXPECT_EQ(c->peers[0].endpoint, "tcp://127.0.0.1:7000");
  EXPECT_EQ(c->peers[1].id, 1u);
  EXPECT_EQ(c->nodes(), 3u);
  EXPECT_EQ(c->strategy.period, DaemonConfig().strategy.period);
}

TEST(ConfigArgs, EveryFlagOverridesTheFile) {
  TempDir dir;
  const std::string path = dir.write("node.toml", kFull);
  auto c = from_args({"--config",
                      path,
                      "--id",
                      "9",
                      "--listen",
                      "tcp://127.0.0.1:7009",
                      "--run-dir",
                      "/tmp/other",
                      "--strategy",
                      "local-sgd",
                      "--period",
                      "8",
                      "--post-local",
                      "3",
                      "--outer-optimizer",
                      "none",
                      "--outer-lr",
                      "0.5",
                      "--outer-momentum",
                      "0.25",
                      "--round-timeout",
                      "12.5",
                      "--chunk-bytes",
                      "8192",
                      "--ring-busy-poll",
                      "30",
                      "--seed",
                      "42",
                      "--log-level",
                      "warn",
                      "--max-trainers",
                      "2"});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->source, path);
  EXPECT_EQ(c->node_id, 9u);
  EXPECT_EQ(c->listen, "tcp://127.0.0.1:7009");
  EXPECT_EQ(c->run_dir, "/tmp/other");
  EXPECT_EQ(c->strategy.period, 8u);
  EXPECT_EQ(c->strategy.post_local, 3u);
  EXPECT_EQ(c->strategy.outer.kind, "none");
  EXPECT_DOUBLE_EQ(c->strategy.outer.lr, 0.5);
  EXPECT_DOUBLE_EQ(c->strategy.outer.momentum, 0.25);
  EXPECT_DOUBLE_EQ(c->strategy.round_timeout_s, 12.5);
  EXPECT_EQ(c->strategy.chunk_bytes, 8192u);
  EXPECT_EQ(c->strategy.ring_busy_poll_us, 30u);
  EXPECT_EQ(c->seed, 42u);
  EXPECT_EQ(c->log_level, "warn");
  EXPECT_EQ(c->max_trainers, 2u);
  // Not overridden: the file's peers.
  ASSERT_EQ(c->peers.size(), 2u);
  EXPECT_EQ(c->peers[1].endpoint, "tcp://127.0.0.1:7002");
}

TEST(ConfigArgs, FileValuesStayWhereNoFlagIsGiven) {
  TempDir dir;
  const std::string path = dir.write("node.toml", kFull);
  auto c = from_args({"--config", path, "--period=16"});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->strategy.period, 16u);
  EXPECT_EQ(c->strategy.post_local, 10u);
  EXPECT_EQ(c->strategy.outer.kind, "nesterov");
  EXPECT_EQ(c->log_level, "debug");
}

TEST(ConfigArgs, ARepeatedFlagTakesTheLastValue) {
  auto c =
      from_args({"--id", "0", "--listen", "tcp://127.0.0.1:7000", "--run-dir", "/tmp/g", "--period",
                 "2", "--period", "3", "--id", "1", "--listen", "tcp://127.0.0.1:7001"});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->strategy.period, 3u);
  EXPECT_EQ(c->node_id, 1u);
  EXPECT_EQ(c->listen, "tcp://127.0.0.1:7001");
}

TEST(ConfigArgs, PeerFlagsReplaceTheFilePeers) {
  TempDir dir;
  const std::string path = dir.write("node.toml", kFull);
  auto c = from_args({"--config", path, "--peer", "5=tcp://10.0.0.5:7000"});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(c->peers.size(), 1u);
  EXPECT_EQ(c->peers[0].id, 5u);
  EXPECT_EQ(c->peers[0].endpoint, "tcp://10.0.0.5:7000");
  EXPECT_EQ(c->nodes(), 2u);
}

TEST(ConfigArgs, SharedClusterFileWithIdentityFromFlags) {
  // A file without [node] identity, shared by all nodes; each gets --id, --listen, --run-dir.
  TempDir dir;
  const std::string path = dir.write("cluster.toml", R"([[peers]]
id = 0
endpoint = "tcp://127.0.0.1:7000"

[[peers]]
id = 1
endpoint = "tcp://127.0.0.1:7001"

[strategy]
period = 8
)");
  auto c = from_args(
      {"--config", path, "--id", "1", "--listen", "tcp://127.0.0.1:7001", "--run-dir", "/tmp/g"});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->nodes(), 2u);
  ASSERT_EQ(c->remote_peers().size(), 1u);
  EXPECT_EQ(c->remote_peers()[0].id, 0u);

  EXPECT_TRUE(fails_with(
      from_args({"--config", path, "--listen", "tcp://127.0.0.1:7001", "--run-dir", "/tmp/g"}),
      {path, "missing key 'node.id'", "--id"}));
  // The file's entry for node 1 disagrees with --listen: the file's key is named.
  EXPECT_TRUE(fails_with(
      from_args({"--config", path, "--id", "1", "--listen", "tcp://127.0.0.1:7999", "--run-dir",
                 "/tmp/g"}),
      {path + ": key 'peers[1].endpoint'", "must equal node.listen 'tcp://127.0.0.1:7999'"}));
}

TEST(ConfigArgs, RequiredFlagsWithoutAFile) {
  EXPECT_TRUE(fails_with(from_args({"--listen", "tcp://127.0.0.1:7000", "--run-dir", "/tmp/g"}),
                         {"command line: missing key 'node.id'", "--id", "--config"}));
  EXPECT_TRUE(fails_with(from_args({"--id", "0", "--run-dir", "/tmp/g"}),
                         {"command line: missing key 'node.listen'", "--listen"}));
  EXPECT_TRUE(fails_with(from_args({"--id", "0", "--listen", "tcp://127.0.0.1:7000"}),
                         {"command line: missing key 'node.run_dir'", "--run-dir"}));
  EXPECT_TRUE(fails_with(from_args({}), {"command line: missing key 'node.id'"}));
}

struct BadFlag {
  const char* name;
  std::vector<std::string> args;
  std::vector<std::string_view> parts;  // besides "command line"
};

std::vector<BadFlag> bad_flags() {
  return {
      {"PeriodZero", {"--period", "0"}, {"flag '--period'", "must be an integer >= 1, got 0"}},
      {"PeriodNegative", {"--period=-3"}, {"flag '--period'", "got -3"}},
      {"PeriodNegativeSeparate", {"--period", "-3"}, {"--period"}},
      {"PeriodNotANumber", {"--period", "four"}, {"flag '--period'", "got 'four'"}},
      {"PeriodTrailingJunk", {"--period", "4x"}, {"flag '--period'", "got '4x'"}},
      {"PeriodFloat", {"--period", "4.5"}, {"flag '--period'", "got '4.5'"}},
      {"PostLocalNegative", {"--post-local=-1"}, {"flag '--post-local'", "got -1"}},
      {"IdNegative", {"--id=-1"}, {"flag '--id'", "got -1"}},
      {"IdTooBig", {"--id", "4294967296"}, {"flag '--id'", "0..4294967295"}},
      {"ListenBad", {"--listen", "127.0.0.1:7000"}, {"flag '--listen'", "tcp://HOST:PORT"}},
      {"ListenPortZero", {"--listen", "tcp://127.0.0.1:0"}, {"flag '--listen'", "port 0"}},
      {"RunDirEmpty", {"--run-dir", ""}, {"flag '--run-dir'", "must not be empty"}},
      {"StrategyUnknown",
       {"--strategy", "gosip"},
       {"flag '--strategy'", "local-sgd", "got 'gosip'"}},
      {"OuterOptimizerUnknown",
       {"--outer-optimizer", "adam"},
       {"flag '--outer-optimizer'", "none, nesterov"}},
      {"OuterLrZero", {"--outer-lr", "0"}, {"flag '--outer-lr'", "must be a number > 0"}},
      {"OuterLrText", {"--outer-lr", "fast"}, {"flag '--outer-lr'", "got 'fast'"}},
      {"OuterMomentumOne", {"--outer-momentum", "1"}, {"flag '--outer-momentum'", "[0, 1)"}},
      {"RoundTimeoutZero", {"--round-timeout", "0"}, {"flag '--round-timeout'", "> 0"}},
      {"FragmentsNotDividingThePeriod",
       {"--period", "4", "--fragments", "3"},
       {"--fragments", "period 4 must be a multiple of it"}},
      {"FragmentsOfGossip",
       {"--strategy", "gossip", "--period", "4", "--fragments", "2"},
       {"--fragments", "streamed syncs are for strategy local-sgd, not gossip"}},
      {"FragmentsWithACheckpoint",
       {"--period", "4", "--fragments", "2", "--checkpoint", "/tmp/g/ck"},
       {"--fragments", "do not take elastic = on or a checkpoint yet"}},
      {"FragmentsZero", {"--fragments", "0"}, {"flag '--fragments'", "1..4096"}},
      {"OverlapPastTheNextSync",
       {"--period", "4", "--fragments", "2", "--overlap-steps", "3"},
       {"--overlap-steps", "overlap_steps 3 must be at most 2"}},
      {"OverlapOfGossip",
       {"--strategy", "gossip", "--overlap-steps", "1"},
       {"--overlap-steps", "overlapped syncs are for strategy local-sgd, not gossip"}},
      {"RoundTimeoutInf", {"--round-timeout", "inf"}, {"flag '--round-timeout'", "got 'inf'"}},
      {"ChunkBytesSmall", {"--chunk-bytes", "100"}, {"flag '--chunk-bytes'", "4096..268435456"}},
      {"BusyPollPastTenMilliseconds",
       {"--ring-busy-poll", "10001"},
       {"flag '--ring-busy-poll'", "0..10000"}},
      {"SeedText", {"--seed", "abc"}, {"flag '--seed'", "got 'abc'"}},
      {"LogLevelUnknown", {"--log-level", "loud"}, {"flag '--log-level'", "got 'loud'"}},
      {"MaxTrainersTooMany", {"--max-trainers", "65"}, {"flag '--max-trainers'", "1..64"}},
      {"PeerWithoutEquals",
       {"--peer", "1:tcp://127.0.0.1:7001"},
       {"flag '--peer 1:tcp://127.0.0.1:7001'", "no '='", "the form is ID=tcp://HOST:PORT"}},
      {"PeerBadId",
       {"--peer", "x=tcp://127.0.0.1:7001"},
       {"flag '--peer x=tcp://127.0.0.1:7001'", "ID must be an integer in 0..4294967295, got 'x'",
        "the form is ID=tcp://HOST:PORT"}},
      {"PeerNegativeId",
       {"--peer", "-1=tcp://127.0.0.1:7001"},
       {"flag '--peer -1=", "ID must be", "got -1"}},
      {"PeerEmptyId",
       {"--peer", "=tcp://127.0.0.1:7001"},
       {"flag '--peer =", "ID must be", "got ''"}},
      {"PeerBadEndpoint",
       {"--peer", "1=udp://127.0.0.1:7001"},
       {"flag '--peer 1=udp://127.0.0.1:7001'", "invalid endpoint 'udp://127.0.0.1:7001'",
        "tcp://HOST:PORT"}},
      {"PeerNoPort",
       {"--peer", "1=tcp://127.0.0.1"},
       {"flag '--peer 1=tcp://127.0.0.1'", "no ':PORT'"}},
      {"PeerPortTooBig",
       {"--peer", "1=tcp://127.0.0.1:70000"},
       {"flag '--peer", "port 70000 is out of range"}},
      {"PeerMissingValue", {"--peer"}, {"--peer"}},
      {"DuplicatePeerIds",
       {"--peer", "1=tcp://127.0.0.1:7001", "--peer", "1=tcp://127.0.0.1:7002"},
       {"flag '--peer 1=tcp://127.0.0.1:7002'",
        "duplicate peer id 1 (also in '--peer 1=tcp://127.0.0.1:7001')"}},
      {"DuplicatePeerEndpoints",
       {"--peer", "1=tcp://127.0.0.1:7001", "--peer", "2=tcp://127.0.0.1:7001"},
       {"flag '--peer 2=tcp://127.0.0.1:7001'",
        "also the endpoint of '--peer 1=tcp://127.0.0.1:7001' (id 1)"}},
      {"SelfPeerWithAnotherEndpoint",
       {"--peer", "0=tcp://127.0.0.1:7999"},
       {"flag '--peer 0=tcp://127.0.0.1:7999'", "must equal node.listen"}},
      {"UnknownFlag", {"--perod", "4"}, {"--perod"}},
      {"PositionalArgument", {"extra.toml"}, {"extra.toml"}},
  };
}

class ConfigArgsBad : public testing::TestWithParam<BadFlag> {};

TEST_P(ConfigArgsBad, IsRefusedNamingTheFlag) {
  const BadFlag& bad = GetParam();
  // A valid base, so that only the flag under test can be wrong.
  std::vector<std::string> args = {"--id",      "0",     "--listen", "tcp://127.0.0.1:7000",
                                   "--run-dir", "/tmp/g"};
  args.insert(args.end(), bad.args.begin(), bad.args.end());
  auto c = from_args(args);
  ASSERT_FALSE(c.is_ok()) << "accepted";
  RecordProperty("message", c.status().message());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalid);
  EXPECT_TRUE(c.status().message().starts_with("command line: ")) << c.status().message();
  for (std::string_view part : bad.parts)
    EXPECT_NE(c.status().message().find(part), std::string::npos)
        << "message: " << c.status().message() << "\nlacks: " << part;
}

INSTANTIATE_TEST_SUITE_P(Cases, ConfigArgsBad, testing::ValuesIn(bad_flags()),
                         [](const testing::TestParamInfo<BadFlag>& info) {
                           return info.param.name;
                         });

TEST(ConfigArgs, BadFileBehindTheFlagsNamesTheFile) {
  TempDir dir;
  const std::string path = dir.write("node.toml", with(kFull, "momentum = 0.5", "momentum = 2"));
  EXPECT_TRUE(fails_with(from_args({"--config", path}),
                         {path + ": key 'strategy.outer.momentum'", "got 2"}));
  // A flag does not hide an error in the file.
  EXPECT_TRUE(fails_with(from_args({"--config", path, "--outer-momentum", "0.1"}),
                         {path, "strategy.outer.momentum"}));
  const std::string missing = (dir.path() / "nope.toml").string();
  auto c = from_args({"--config", missing});
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(),
            "cannot read config file '" + missing + "': No such file or directory");
}

// gossipd --check: the whole configuration checked, what the node would be said, and
// nothing started; a bad one fails as it would at start.
TEST(ConfigArgs, CheckSaysWhatTheNodeWouldBeOrWhatIsWrong) {
  std::vector<std::string> flags = {"--id",      "2",
                                    "--listen",  "tcp://127.0.0.1:7002",
                                    "--run-dir", "/tmp/g",
                                    "--peer",    "0=tcp://127.0.0.1:7000",
                                    "--peer",    "1=tcp://127.0.0.1:7001",
                                    "--check"};
  auto c = from_args(flags);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), Status::Code::kClosed);
  EXPECT_EQ(c.status().message(),
            "gossipd: the configuration is valid: node 2 of 3, listening on "
            "tcp://127.0.0.1:7002, strategy local-sgd\n");
  flags.insert(flags.end(), {"--strategy", "ps", "--servers", "4"});
  auto bad = from_args(flags);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().code(), Status::Code::kClosed);
  EXPECT_NE(bad.status().message().find("4 servers, but the cluster has 3 nodes"),
            std::string::npos)
      << bad.status().message();
}

TEST(ConfigArgs, HelpReturnsClosedWithTheText) {
  for (const char* flag : {"--help", "-h"}) {
    auto c = from_args({flag});
    ASSERT_FALSE(c.is_ok());
    EXPECT_EQ(c.status().code(), Status::Code::kClosed);
    const std::string& text = c.status().message();
    RecordProperty("help", text);
    for (std::string_view f :
         {"--config", "--id", "--listen", "--run-dir", "--peer", "--strategy", "--period",
          "--post-local", "--outer-optimizer", "--outer-lr", "--outer-momentum", "--round-timeout",
          "--chunk-bytes", "--seed", "--log-level", "--max-trainers"})
      EXPECT_NE(text.find(f), std::string::npos) << "help lacks " << f << ":\n" << text;
  }
}

}  // namespace
}  // namespace gossip::daemon

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

// Passes when `status` is an error whose message contains every one of `parts`.
testing::AssertionResult fails_with(const Status& status,
                                    std::initializer_list<std::string_view> parts) {
  if (status.is_ok()) return testing::AssertionFailure() << "succeeded, expected an error";
  const std::string& message = status.message();
  for (std::string_view part : parts)
    if (message.find(part) == std::string::npos)
      return testing::AssertionFailure() << "message '" << message << "' lacks '" << part << "'";
  return testing::AssertionSuccess() << message;
}
testing::AssertionResult fails_with(const Result<DaemonConfig>& result,
                                    std::initializer_list<std::string_view> parts) {
  if (result.is_ok()) return testing::AssertionFailure() << "succeeded, expected an error";
  return fails_with(result.status(), parts);
}

// A unique temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "gossipd_config_test.XXXXXX").string();
    const char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to <dir>/<name> and returns its path.
  std::string write(const std::string& name, std::string_view text) const {
    const std::string file = (path_ / name).string();
    std::ofstream out(file, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << file;
    return file;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

Result<DaemonConfig> from_args(std::vector<std::string> args) {
  args.insert(args.begin(), "gossipd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  return config_from_args(static_cast<int>(args.size()), argv.data());
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
  auto c = load_config_file(GOSSIP_SOURCE_DIR "/daemon/gossipd.example.toml");
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
  EXPECT_TRUE(with_nodes("local-sgd", "tcp", 128).is_ok());
  const Status ring = with_nodes("local-sgd", "auto", 129);
  EXPECT_FALSE(ring.is_ok());
  EXPECT_NE(
      ring.message().find("the ring all-reduce takes at most 128 nodes, this cluster has 129"),
      std::string::npos)
      << ring.message();
  EXPECT_TRUE(with_nodes("local-sgd", "allgather", 129).is_ok());
  EXPECT_FALSE(with_nodes("allreduce", "tcp", 200).is_ok());
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

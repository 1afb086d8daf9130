#pragma once
// What the pieces of gossipd's configuration share (daemon/config.cc): the settings'
// table (config_fields.cc), where each value came from and the checks of a whole
// config (config_check.cc), and the readers of the TOML document, the environment and
// the peer lists (config_sources.cc). Private to those files.

#include <fmt/format.h>
#include <toml++/toml.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "daemon/config.h"
#include "peers/peer.h"

namespace gossip::daemon::config_internal {

inline constexpr std::string_view kCommandLine = "command line";
inline constexpr std::string_view kEnvironment = "environment";
inline constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
inline constexpr uint64_t kMaxI64 = std::numeric_limits<int64_t>::max();  // TOML integers are int64
inline constexpr uint64_t kMaxChunkBytes = uint64_t{256} << 20;
inline constexpr size_t kMaxIpcPath = 107;  // sockaddr_un::sun_path (108) less its NUL

inline constexpr std::string_view kTransports[] = {"auto", "tcp", "rdma", "nccl", "allgather"};
inline constexpr std::string_view kOuterOptimizers[] = {"none", "nesterov"};
inline constexpr std::string_view kNonFinitePolicies[] = {"refuse", "clip"};
inline constexpr std::string_view kDivergenceActions[] = {"warn", "stop", "off"};
inline constexpr std::string_view kAllReduceAlgorithms[] = {"auto", "ring", "tree", "butterfly",
                                                            "master"};
inline constexpr std::string_view kSparseAllReduce[] = {"auto", "reduce-scatter", "all-gather"};
inline constexpr std::string_view kOnOff[] = {"off", "on"};
inline constexpr std::string_view kJoinQuorums[] = {"majority", "any"};
inline constexpr std::string_view kTune[] = {"off", "auto"};
inline constexpr std::string_view kServerOptimizers[] = {"sgd", "momentum", "adam"};
inline constexpr std::string_view kLogLevels[] = {"trace", "debug", "info", "warn", "error", "off"};

using Problem = std::optional<std::string>;

struct IntegerRange {
  uint64_t min = 0;
  uint64_t max = kMaxI64;
  uint64_t multiple_of = 1;

  std::string describe() const {
    std::string d = max == kMaxI64 ? fmt::format("an integer >= {}", min)
                                   : fmt::format("an integer in {}..{}", min, max);
    if (multiple_of > 1) d += fmt::format(" and a multiple of {}", multiple_of);
    return d;
  }
  bool fits(uint64_t v) const { return v >= min && v <= max && v % multiple_of == 0; }
  bool fits(int64_t v) const { return v >= 0 && fits(static_cast<uint64_t>(v)); }
};

struct NumberRange {
  double min = 0;
  bool min_inclusive = false;
  std::optional<double> max;  // exclusive
  // "auto" is a value too, stored as NaN (which no flag or file can give otherwise).
  bool or_auto = false;
  std::string describe() const {
    const char* also = or_auto ? ", or auto" : "";
    if (max)
      return fmt::format("a number in {}{}, {}){}", min_inclusive ? '[' : '(', min, *max, also);
    return fmt::format("a number {} {}{}", min_inclusive ? ">=" : ">", min, also);
  }
  bool is_auto(double v) const { return or_auto && std::isnan(v); }
  bool fits(double v) const {
    return std::isfinite(v) && (min_inclusive ? v >= min : v > min) && (!max || v < *max);
  }
};

inline constexpr IntegerRange kNodeIdRange{0, kMaxU32, 1};

// ---------------------------------------------------------------------------------------
// The settings.

struct IntegerSpec {
  IntegerRange range;
  uint64_t (*get)(const DaemonConfig&);
  void (*set)(DaemonConfig&, uint64_t);
};
struct NumberSpec {
  NumberRange range;
  double (*get)(const DaemonConfig&);
  void (*set)(DaemonConfig&, double);
};
struct TextSpec {
  std::span<const std::string_view> choices;  // empty: any text that `check` accepts
  std::string_view what;                      // for a value of the wrong type: "must be <what>"
  Problem (*check)(std::string_view);         // null: none beyond `choices`
  const std::string& (*get)(const DaemonConfig&);
  void (*set)(DaemonConfig&, std::string);
};

struct Field {
  std::string_view key;   // full TOML key: "strategy.period"
  std::string_view flag;  // "--period"
  std::string_view flag_arg;
  std::string_view help;
  std::variant<IntegerSpec, NumberSpec, TextSpec> spec;
};

inline constexpr std::string_view kTables[] = {"node", "strategy", "strategy.outer"};
inline constexpr std::string_view kPeerKeys[] = {"id", "endpoint", "public_key", "banned"};

// ---------------------------------------------------------------------------------------
// Where the values came from, so that an error names the file and line or the flag.

struct Origins {
  std::string source;                          // the file, or "command line"
  std::map<std::string, int64_t> lines;        // key -> line in the file
  std::map<std::string, std::string> flags;    // key -> the flag that set it
  std::map<std::string, std::string> env;      // key -> the variable that set it
  std::map<std::string, std::string> derived;  // key -> what made it ("--peers-from ...")
};

// ---------------------------------------------------------------------------------------
// The TOML document.

struct Document {
  DaemonConfig config;
  Origins origins;
  bool has_id = false;
  bool has_listen = false;
  bool has_run_dir = false;
};

// The variables that are not one flag's setting.
inline constexpr std::string_view kConfigVariable = "GOSSIPD_CONFIG";
inline constexpr std::string_view kPeerVariable = "GOSSIPD_PEER";
inline constexpr std::string_view kPeerKeyVariable = "GOSSIPD_PEER_KEY";
inline constexpr std::string_view kBanVariable = "GOSSIPD_BAN_PEER";

// One source of a peer-list setting: a flag or a variable, for messages and origins.
struct PeerListSource {
  bool from_env;
  std::string_view name;  // "--peer" or "GOSSIPD_PEER"
  std::string where(std::string_view entry) const {
    if (from_env) return fmt::format("{}: variable '{}' (entry '{}')", kEnvironment, name, entry);
    return fmt::format("{}: flag '{} {}'", kCommandLine, name, entry);
  }
  void record(Origins& o, const std::string& key, std::string_view entry) const {
    (from_env ? o.env : o.flags)[key] =
        from_env ? std::string(name) : fmt::format("{} {}", name, entry);
  }
};

std::string must_be(std::string_view what, std::string_view got);
std::string quote(std::string_view s);
Problem codec_problem(std::string_view spec);
Problem allreduce_table_problem(std::string_view path);
Problem ps_mode_problem(std::string_view spec);
Problem secret_key_problem(std::string_view key);
Problem peers_from_check(std::string_view spec);
std::vector<std::string> split_seeds(std::string_view text);
peers::Peer split_seed(std::string_view seed);
Problem join_check(std::string_view seeds);
Problem run_dir_problem(std::string_view dir);
Problem run_id_problem(std::string_view id);
std::span<const std::string_view> strategy_choices();
std::string strategies_taking(std::string_view option);
std::string_view strategy_help();
const std::array<Field, 68>& fields();
const Field* find_field(std::string_view key);
bool is_table(std::string_view key);
std::string_view parent_of(std::string_view key);
std::string_view leaf_of(std::string_view key);
std::vector<std::string_view> keys_of(std::string_view prefix);
std::string join(std::span<const std::string_view> items);
size_t edit_distance(std::string_view a, std::string_view b);
std::string unknown_problem(std::string_view leaf, bool is_table_value, std::string_view where,
                            std::span<const std::string_view> valid);
std::string describe(const TextSpec& s);
Problem text_problem(const TextSpec& s, std::string_view v);
Problem stored_problem(const Field& f, const DaemonConfig& c);
std::string describe_node(const toml::node& n);
std::variant<uint64_t, std::string> integer_from_toml(const IntegerRange& range,
                                                      const toml::node& n);
std::variant<uint64_t, std::string> integer_from_text(const IntegerRange& range,
                                                      std::string_view text);
Problem read_toml_value(const Field& f, const toml::node& n, DaemonConfig& c);
Problem read_flag_value(const Field& f, const std::string& text, DaemonConfig& c);
Status key_error(const Origins& o, std::string_view key, std::string_view problem);
std::string peer_entry_name(const Origins& o, size_t i);
Status check_config(const DaemonConfig& c, const Origins& o);
Status read_peers(const toml::node& n, Document& d);
Status read_table(const toml::table& table, std::string_view prefix, Document& d);
Result<Document> parse_document(const std::string& text, const std::string& source);
Result<Document> load_document(const std::string& path);
Status check_required(const Document& d, bool from_flags_too);
std::vector<std::string> list_entries(std::string_view text);
std::optional<uint32_t> id_of(std::string_view text, std::string* problem);
Status read_peer_entries(const std::vector<std::string>& texts, const PeerListSource& src,
                         Document& d);
Result<PeerConfig*> listed_peer(Document& d, std::string_view id_text, const std::string& where);
Status read_peer_keys(const std::vector<std::string>& texts, const PeerListSource& src,
                      Document& d);
Status read_bans(const std::vector<std::string>& texts, const PeerListSource& src, Document& d);
std::string peers_from_origin(const Origins& o);
Status apply_peers_from(Document& d, const Environment& env);
Status apply_environment(const Environment& env, Document& d);
Status apply_environment_keys(const Environment& env, Document& d);

}  // namespace gossip::daemon::config_internal

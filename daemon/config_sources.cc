// Where a config comes from: the TOML document, the GOSSIPD_* variables and the peer
// lists (flags, variables, --peers-from).

#include <fcntl.h>
#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <utility>
#include <variant>

#include "base/version.h"
#include "compression/codec_spec.h"
#include "daemon/config.h"
#include "daemon/config_internal.h"
#include "daemon/peers_from.h"
#include "peers/curve_auth.h"
#include "peers/node_ids.h"
#include "peers/topology.h"
#include "sgd/collectives/ring_schedule.h"
#include "sgd/registry.h"

namespace gossip::daemon {
namespace config_internal {
Status read_peers(const toml::node& n, Document& d) {
  Origins& o = d.origins;
  const toml::array* entries = n.as_array();
  if (!entries)
    return key_error(o, "peers", must_be("an array of tables ([[peers]])", describe_node(n)));
  for (size_t i = 0; i < entries->size(); ++i) {
    const std::string entry_key = fmt::format("peers[{}]", i);
    const toml::node& entry = *entries->get(i);
    o.lines[entry_key] = entry.source().begin.line;
    const toml::table* t = entry.as_table();
    if (!t)
      return key_error(o, entry_key, must_be("a table with id and endpoint", describe_node(entry)));
    PeerConfig peer;
    bool has_id = false;
    bool has_endpoint = false;
    for (auto&& [k, v] : *t) {
      const std::string key = fmt::format("{}.{}", entry_key, k.str());
      o.lines[key] = v.source().begin.line;
      if (k.str() == "id") {
        auto id = integer_from_toml(kNodeIdRange, v);
        if (auto* problem = std::get_if<std::string>(&id)) return key_error(o, key, *problem);
        peer.id = static_cast<uint32_t>(std::get<uint64_t>(id));
        has_id = true;
      } else if (k.str() == "endpoint") {
        const auto* s = v.as_string();
        if (!s) return key_error(o, key, must_be("a string tcp://HOST:PORT", describe_node(v)));
        if (auto problem = endpoint_problem(s->get())) return key_error(o, key, *problem);
        peer.endpoint = s->get();
        has_endpoint = true;
      } else if (k.str() == "public_key") {
        const auto* s = v.as_string();
        if (!s) return key_error(o, key, must_be("a string (a Z85 key)", describe_node(v)));
        peer.public_key = s->get();
      } else if (k.str() == "banned") {
        const auto* b = v.as_boolean();
        if (!b) return key_error(o, key, must_be("true or false", describe_node(v)));
        peer.banned = b->get();
      } else {
        return key_error(o, key, unknown_problem(k.str(), v.is_table(), "in [[peers]]", kPeerKeys));
      }
    }
    if (!has_id)
      return Status::invalid(fmt::format("{}: missing key '{}.id'", o.source, entry_key));
    if (!has_endpoint)
      return Status::invalid(fmt::format("{}: missing key '{}.endpoint'", o.source, entry_key));
    d.config.peers.push_back(std::move(peer));
  }
  return Status::ok();
}

Status read_table(const toml::table& table, std::string_view prefix, Document& d) {
  Origins& o = d.origins;
  for (auto&& [k, v] : table) {
    const std::string key =
        prefix.empty() ? std::string(k.str()) : fmt::format("{}.{}", prefix, k.str());
    o.lines[key] = v.source().begin.line;
    if (const Field* f = find_field(key)) {
      if (auto problem = read_toml_value(*f, v, d.config)) return key_error(o, key, *problem);
      if (key == "node.id") d.has_id = true;
      if (key == "node.listen") d.has_listen = true;
      if (key == "node.run_dir") d.has_run_dir = true;
    } else if (is_table(key)) {
      const toml::table* sub = v.as_table();
      if (!sub) return key_error(o, key, must_be("a table", describe_node(v)));
      GOSSIP_RETURN_IF_ERROR(read_table(*sub, key, d));
    } else if (key == "peers") {
      GOSSIP_RETURN_IF_ERROR(read_peers(v, d));
    } else {
      const auto valid = keys_of(prefix);
      const std::string where =
          prefix.empty() ? "at the top level" : fmt::format("in [{}]", prefix);
      return key_error(o, key, unknown_problem(k.str(), v.is_table(), where, valid));
    }
  }
  return Status::ok();
}

template <typename E>
Status parse_error_status(const E& e, std::string_view source) {
  const auto& begin = e.source().begin;
  return Status::invalid(fmt::format("{}:{}:{}: TOML parse error: {}", source, begin.line,
                                     begin.column, e.description()));
}

Result<Document> parse_document(const std::string& text, const std::string& source) {
  toml::table root;
#if TOML_EXCEPTIONS
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return parse_error_status(e, source);
  }
#else
  toml::parse_result parsed = toml::parse(text, source);
  if (!parsed) return parse_error_status(parsed.error(), source);
  root = std::move(parsed).table();
#endif
  Document d;
  d.config.source = source;
  d.origins.source = source;
  GOSSIP_RETURN_IF_ERROR(read_table(root, "", d));
  return d;
}

Result<Document> load_document(const std::string& path) {
  auto cannot_read = [&path](int error) {
    return Status::io_error(
        fmt::format("cannot read config file '{}': {}", path, std::strerror(error)));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cannot_read(errno);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return cannot_read(error);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return parse_document(text, path);
}

// node.id, node.listen and node.run_dir have no defaults. With `from_flags_too` the message
// also says which flag sets the missing key.
Status check_required(const Document& d, bool from_flags_too) {
  struct Required {
    bool present;
    std::string_view key;
    std::string_view flag;
  };
  const bool joins = !d.config.join.empty();
  if (joins && d.has_id)
    return Status::invalid(fmt::format(
        "{}: node.id and node.join: a node that joins by seeds is given its id", d.origins.source));
  if (joins && (!d.config.peers.empty() || !d.config.peers_from.empty()))
    return Status::invalid(fmt::format(
        "{}: node.join and a peer list: a node that joins by seeds takes the members' list",
        d.origins.source));
  for (const auto& seed : join_seeds(d.config)) {
    if (!d.config.secret_key.empty() && seed.public_key.empty())
      return Status::invalid(
          fmt::format("{}: node.join under CURVE: seed {} needs its public key: write KEY@{}",
                      d.origins.source, seed.endpoint, seed.endpoint));
    if (!d.config.secret_key.empty() && d.config.admit_keys.empty())
      return Status::invalid(fmt::format(
          "{}: node.join under CURVE needs node.admit_keys (the members' list): a node that "
          "joined takes in the nodes that join after it only by their keys there",
          d.origins.source));
    if (d.config.secret_key.empty() && !seed.public_key.empty())
      return Status::invalid(fmt::format(
          "{}: node.join: seed {} has a public key, which needs node.secret_key (this node's "
          "own) too",
          d.origins.source, seed.endpoint));
  }
  const Required required[] = {{d.has_id || joins, "node.id", "--id"},
                               {d.has_listen, "node.listen", "--listen"},
                               {d.has_run_dir, "node.run_dir", "--run-dir"}};
  for (const Required& r : required) {
    if (r.present) continue;
    if (!from_flags_too)
      return Status::invalid(fmt::format("{}: missing key '{}'", d.origins.source, r.key));
    return Status::invalid(fmt::format(
        "{}: missing key '{}' (pass {}{})", d.origins.source, r.key, r.flag,
        d.origins.source == kCommandLine ? " or --config FILE" : " or set it in the file"));
  }
  return Status::ok();
}

// A list variable's entries: separated by commas or white space.
std::vector<std::string> list_entries(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t begin = text.find_first_not_of(", \t\n", i);
    if (begin == std::string_view::npos) break;
    const size_t end = std::min(text.find_first_of(", \t\n", begin), text.size());
    out.emplace_back(text.substr(begin, end - begin));
    i = end;
  }
  return out;
}

std::optional<uint32_t> id_of(std::string_view text, std::string* problem) {
  auto id = integer_from_text(kNodeIdRange, text);
  if (auto* p = std::get_if<std::string>(&id)) {
    *problem = fmt::format("ID {}", *p);
    return std::nullopt;
  }
  return static_cast<uint32_t>(std::get<uint64_t>(id));
}

// "ID=tcp://HOST:PORT" entries: they replace the peer list.
Status read_peer_entries(const std::vector<std::string>& texts, const PeerListSource& src,
                         Document& d) {
  d.config.peers.clear();
  for (const std::string& text : texts) {
    auto malformed = [&](std::string_view why) {
      return Status::invalid(
          fmt::format("{}: {} (the form is ID=tcp://HOST:PORT, e.g. --peer 1=tcp://10.0.0.2:7000)",
                      src.where(text), why));
    };
    const size_t eq = text.find('=');
    if (eq == std::string::npos) return malformed("no '=' between ID and endpoint");
    std::string problem;
    auto id = id_of(std::string_view(text).substr(0, eq), &problem);
    if (!id) return malformed(problem);
    PeerConfig peer{*id, text.substr(eq + 1), {}};
    if (auto p = endpoint_problem(peer.endpoint))
      return Status::invalid(fmt::format("{}: {}", src.where(text), *p));
    const size_t index = d.config.peers.size();
    src.record(d.origins, fmt::format("peers[{}].id", index), text);
    src.record(d.origins, fmt::format("peers[{}].endpoint", index), text);
    d.config.peers.push_back(std::move(peer));
  }
  return Status::ok();
}

// The peer whose id is `id_text`; an error names `where`.
// The peer whose id (or, from --peers-from, name) is `id_text`; an error names `where`.
// This node itself gives nullptr: one list of keys can then serve every node.
Result<PeerConfig*> listed_peer(Document& d, std::string_view id_text, const std::string& where) {
  auto& peers = d.config.peers;
  if (!id_text.empty() && !std::isdigit(static_cast<unsigned char>(id_text[0]))) {
    std::vector<ListedNode> named;
    for (const PeerConfig& p : peers) named.push_back({p.name, p.name, 0});
    if (auto found = find_node(named, id_text); found && !peers[*found].name.empty())
      return &peers[*found];
    const std::string& self = d.config.node_name;
    if (!self.empty() && find_node({{self, self, 0}}, id_text)) return nullptr;
    return Status::invalid(fmt::format(
        "{}: no peer named '{}' (names come from --peers-from; or give the id)", where, id_text));
  }
  std::string problem;
  auto id = id_of(id_text, &problem);
  if (!id) return Status::invalid(fmt::format("{}: {}", where, problem));
  if (d.has_id && *id == d.config.node_id) return nullptr;
  auto it =
      std::find_if(peers.begin(), peers.end(), [&](const PeerConfig& p) { return p.id == *id; });
  if (it == peers.end())
    return Status::invalid(
        fmt::format("{}: no peer {} (give it with --peer, [[peers]] or --peers-from)", where, *id));
  return &*it;
}

// "ID=KEY" entries: the peers' CURVE public keys.
Status read_peer_keys(const std::vector<std::string>& texts, const PeerListSource& src,
                      Document& d) {
  for (const std::string& text : texts) {
    const std::string shown = text.substr(0, text.find('=') + 1) + "...";  // keys stay out of logs
    const size_t eq = text.find('=');
    if (eq == std::string::npos)
      return Status::invalid(
          fmt::format("{}: no '=' between ID and key (the form is ID=KEY)", src.where(shown)));
    auto peer = listed_peer(d, std::string_view(text).substr(0, eq), src.where(shown));
    if (!peer) return peer.status();
    if (*peer == nullptr) continue;  // this node's own key, in a list shared by all
    (*peer)->public_key = text.substr(eq + 1);
    src.record(d.origins, fmt::format("peers[{}].public_key", *peer - d.config.peers.data()),
               shown);
  }
  return Status::ok();
}

Status read_bans(const std::vector<std::string>& texts, const PeerListSource& src, Document& d) {
  for (const std::string& text : texts) {
    auto peer = listed_peer(d, text, src.where(text));
    if (!peer) return peer.status();
    if (*peer == nullptr)
      return Status::invalid(fmt::format("{}: that is this node", src.where(text)));
    (*peer)->banned = true;
    src.record(d.origins, fmt::format("peers[{}].banned", *peer - d.config.peers.data()), text);
  }
  return Status::ok();
}

// Where node.peers_from was set, for messages.
std::string peers_from_origin(const Origins& o) {
  if (auto it = o.flags.find("node.peers_from"); it != o.flags.end())
    return fmt::format("{}: flag '--peers-from'", kCommandLine);
  if (auto it = o.env.find("node.peers_from"); it != o.env.end())
    return fmt::format("{}: variable '{}'", kEnvironment, it->second);
  return fmt::format("{}: key 'node.peers_from'", o.source);
}

// node.peers_from -> node.id, node.name, node.listen and the peer list.
Status apply_peers_from(Document& d, const Environment& env) {
  DaemonConfig& c = d.config;
  const std::string origin = peers_from_origin(d.origins);
  if (!c.peers.empty())
    return Status::invalid(fmt::format(
        "{}: a peer list is given too ([[peers]], --peer or GOSSIPD_PEER); use one or the other",
        origin));
  PeerSourceEnvironment source_env{
      [&env](const std::string& name) -> std::optional<std::string> {
        auto it = env.variables.find(name);
        if (it == env.variables.end()) return std::nullopt;
        return it->second;
      },
      [](const std::string& path) -> Result<std::string> {
        std::ifstream in(path, std::ios::binary);
        if (!in)
          return Status::io_error(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
        constexpr size_t kMaxHostfile = 4u << 20;
        std::string text(kMaxHostfile + 1, '\0');
        in.read(text.data(), static_cast<std::streamsize>(text.size()));
        text.resize(static_cast<size_t>(in.gcount()));
        if (text.size() > kMaxHostfile)
          return Status::invalid(fmt::format("'{}' is larger than {} bytes", path, kMaxHostfile));
        return text;
      }};
  auto listing = list_peers(c.peers_from, source_env);
  if (!listing) return Status::invalid(fmt::format("{}: {}", origin, listing.status().message()));
  const auto& nodes = listing->nodes;

  std::optional<uint32_t> self;
  std::string rule;
  if (d.has_id) {
    if (c.node_id >= nodes.size())
      return key_error(d.origins, "node.id",
                       fmt::format("{} lists {} nodes (ids 0..{}); id {} is not one of them",
                                   c.peers_from, nodes.size(), nodes.size() - 1, c.node_id));
    self = c.node_id;
    rule = "node.id";
  }
  if (!c.node_name.empty()) {
    auto found = find_node(nodes, c.node_name);
    if (!found)
      return key_error(d.origins, "node.name",
                       fmt::format("'{}' is none (or more than one) of the {} nodes {} lists",
                                   c.node_name, nodes.size(), c.peers_from));
    if (self && *self != *found)
      return key_error(d.origins, "node.name",
                       fmt::format("'{}' is node {} of {}, but node.id is {}", c.node_name, *found,
                                   c.peers_from, *self));
    self = found;
    rule = "node.name";
  }
  if (!self && listing->self) self = listing->self, rule = listing->self_rule;
  if (!self) {
    self = find_node(nodes, env.hostname);
    rule = "the host name";
    if (!self)
      return Status::invalid(fmt::format(
          "{}: this host's name '{}' is none (or more than one) of the {} nodes {} lists; pass "
          "--name (a listed host, host:port or pod name) or --id (its position)",
          origin, env.hostname, nodes.size(), c.peers_from));
  }
  c.node_id = *self;
  c.node_name = nodes[*self].name;
  d.has_id = true;
  // A Slurm step names its run: the stale daemons of a requeued job, on the same hosts
  // and ports, are then of another one (--run-id).
  if (c.run_id.empty() && c.peers_from.starts_with("slurm"))
    if (const auto job = source_env.getenv("SLURM_JOB_ID"); job && !run_id_problem(*job)) {
      const auto step = source_env.getenv("SLURM_STEP_ID");
      c.run_id = "slurm-" + *job + (step && !run_id_problem(*step) ? "." + *step : "");
      if (run_id_problem(c.run_id)) c.run_id.clear();
    }
  if (!d.has_listen) {
    // Any address: the name others reach this node by may resolve, here, to an address
    // that is not theirs to reach (Debian's hosts file maps the host name to 127.0.1.1).
    c.listen = fmt::format("tcp://0.0.0.0:{}", nodes[*self].port);
    d.has_listen = true;
    d.origins.derived["node.listen"] = fmt::format("{} (node {}, {})", origin, *self, rule);
  }
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (i == *self) continue;
    const size_t index = c.peers.size();
    d.origins.derived[fmt::format("peers[{}].id", index)] =
        fmt::format("--peers-from {} (node {})", c.peers_from, i);
    d.origins.derived[fmt::format("peers[{}].endpoint", index)] =
        fmt::format("--peers-from {} (node {})", c.peers_from, i);
    PeerConfig peer{i, nodes[i].endpoint(), {}};
    peer.name = nodes[i].name;
    c.peers.push_back(std::move(peer));
  }
  return Status::ok();
}

// GOSSIPD_<FLAG> variables over the file's values.
Status apply_environment(const Environment& env, Document& d) {
  for (const auto& [name, value] : env.variables) {
    if (!name.starts_with("GOSSIPD_") || name == kConfigVariable) continue;
    const Field* field = nullptr;
    for (const Field& f : fields())
      if (env_name(f.flag) == name) field = &f;
    if (field) {
      if (auto problem = read_flag_value(*field, value, d.config))
        return Status::invalid(fmt::format("{}: variable '{}': {}", kEnvironment, name, *problem));
      d.origins.env[std::string(field->key)] = name;
      d.origins.flags.erase(std::string(field->key));
      if (field->key == "node.id") d.has_id = true;
      if (field->key == "node.listen") d.has_listen = true;
      if (field->key == "node.run_dir") d.has_run_dir = true;
      continue;
    }
    if (name == kPeerVariable || name == kPeerKeyVariable || name == kBanVariable) continue;
    // A misspelt variable would silently leave its setting at the file's value.
    std::vector<std::string> known{std::string(kConfigVariable), std::string(kPeerVariable),
                                   std::string(kPeerKeyVariable), std::string(kBanVariable)};
    for (const Field& f : fields()) known.push_back(env_name(f.flag));
    std::string best;
    size_t best_distance = 4;
    for (const std::string& k : known)
      if (size_t dist = edit_distance(name, k); dist < best_distance)
        best_distance = dist, best = k;
    return Status::invalid(fmt::format(
        "{}: unknown variable '{}'{} (gossipd --print-options lists "
        "every setting and its variable)",
        kEnvironment, name, best.empty() ? "" : fmt::format("; did you mean '{}'?", best)));
  }
  const auto get = [&env](std::string_view name) -> const std::string* {
    auto it = env.variables.find(std::string(name));
    return it == env.variables.end() ? nullptr : &it->second;
  };
  if (const std::string* peers = get(kPeerVariable))
    GOSSIP_RETURN_IF_ERROR(read_peer_entries(list_entries(*peers), {true, kPeerVariable}, d));
  return Status::ok();
}

Status apply_environment_keys(const Environment& env, Document& d) {
  if (auto it = env.variables.find(std::string(kPeerKeyVariable)); it != env.variables.end())
    GOSSIP_RETURN_IF_ERROR(read_peer_keys(list_entries(it->second), {true, kPeerKeyVariable}, d));
  if (auto it = env.variables.find(std::string(kBanVariable)); it != env.variables.end())
    GOSSIP_RETURN_IF_ERROR(read_bans(list_entries(it->second), {true, kBanVariable}, d));
  return Status::ok();
}

}  // namespace config_internal

std::vector<peers::Peer> join_seeds(const DaemonConfig& config) {
  std::vector<peers::Peer> out;
  for (const auto& text : config_internal::split_seeds(config.join))
    out.push_back(config_internal::split_seed(text));
  return out;
}

std::string env_name(std::string_view flag) {
  std::string out = "GOSSIPD_";
  for (char ch : flag.substr(flag.find_first_not_of('-')))
    out += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

Environment Environment::of_process() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.variables.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0) env.hostname = name;
  return env;
}

}  // namespace gossip::daemon

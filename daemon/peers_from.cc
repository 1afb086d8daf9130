// --peers-from: hostfiles, Slurm's node lists and StatefulSet DNS names.
#include "daemon/peers_from.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "daemon/config.h"

namespace gossip::daemon {
namespace {

constexpr std::string_view kHostChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_";

std::optional<uint64_t> parse_uint(std::string_view s, uint64_t max) {
  uint64_t v = 0;
  if (s.empty() || s.size() > 20) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

std::optional<std::string> host_problem(std::string_view host) {
  if (host.empty()) return "no host";
  if (host.size() > 253)
    return fmt::format("host '{}...' is longer than 253 characters", host.substr(0, 20));
  if (host.find_first_not_of(kHostChars) != std::string_view::npos)
    return fmt::format("invalid host '{}'", host);
  return std::nullopt;
}

// "host" or "host:port"; `fallback` when no port is written.
Result<ListedNode> parse_host_port(std::string_view text, uint16_t fallback) {
  ListedNode n;
  const size_t colon = text.rfind(':');
  n.host = std::string(text.substr(0, colon));
  n.port = fallback;
  if (colon != std::string_view::npos) {
    auto port = parse_uint(text.substr(colon + 1), 65535);
    if (!port || *port == 0)
      return Status::invalid(fmt::format("port '{}' is not in 1..65535", text.substr(colon + 1)));
    n.port = static_cast<uint16_t>(*port);
  }
  if (auto problem = host_problem(n.host)) return Status::invalid(*problem);
  return n;
}

// Names each node by its host, or host:port where the host is listed more than once.
Status name_nodes(std::vector<ListedNode>& nodes, std::string_view spec) {
  if (nodes.empty()) return Status::invalid(fmt::format("--peers-from {}: lists no node", spec));
  if (nodes.size() > kMaxNodes)
    return Status::invalid(fmt::format("--peers-from {}: lists {} nodes, more than the {} allowed",
                                       spec, nodes.size(), kMaxNodes));
  std::map<std::string, int> per_host;
  for (const auto& n : nodes) ++per_host[n.host];
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& n = nodes[i];
    n.name = per_host[n.host] == 1 ? n.host : fmt::format("{}:{}", n.host, n.port);
    if (auto [it, fresh] = seen.emplace(n.name, i); !fresh)
      return Status::invalid(fmt::format("--peers-from {}: node {} and node {} are both {}", spec,
                                         it->second, i, n.name));
  }
  return Status::ok();
}

Result<PeerListing> from_hostfile(std::string_view spec, std::string_view path,
                                  const PeerSourceEnvironment& env) {
  auto text = env.read_file(std::string(path));
  if (!text)
    return Status::invalid(fmt::format("--peers-from {}: {}", spec, text.status().message()));
  PeerListing out;
  size_t line_no = 0;
  size_t begin = 0;
  while (begin < text->size()) {
    size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    std::string_view line(text->data() + begin, end - begin);
    begin = end + 1;
    ++line_no;
    line = line.substr(0, line.find('#'));
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) continue;
    line = line.substr(first);
    // MPI's keywords (slots=4, max_slots=8) follow the host; one node is one line.
    std::string_view host = line.substr(0, line.find_first_of(" \t\r"));
    auto node = parse_host_port(host, kDefaultPeerPort);
    if (!node)
      return Status::invalid(fmt::format("{}:{}: {} (a line is host[:port], as in MPI's hostfiles)",
                                         path, line_no, node.status().message()));
    out.nodes.push_back(std::move(*node));
  }
  GOSSIP_RETURN_IF_ERROR(name_nodes(out.nodes, spec));
  return out;
}

Result<std::string> required_env(const PeerSourceEnvironment& env, std::string_view spec,
                                 std::initializer_list<std::string_view> names) {
  for (std::string_view name : names)
    if (auto v = env.getenv(std::string(name)); v && !v->empty()) return *v;
  std::string list;
  for (std::string_view name : names) list += fmt::format("{}{}", list.empty() ? "" : " or ", name);
  return Status::invalid(fmt::format(
      "--peers-from {}: {} is not set (run it under srun, or use hostfile:PATH)", spec, list));
}

Result<PeerListing> from_slurm(std::string_view spec, uint16_t base_port,
                               const PeerSourceEnvironment& env) {
  // A step's lists first: under `srun` inside a bigger allocation they are the ones that
  // describe the tasks actually started.
  auto list =
      required_env(env, spec, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!list) return list.status();
  auto hosts = expand_hostlist(*list);
  if (!hosts)
    return Status::invalid(
        fmt::format("--peers-from {}: node list '{}': {}", spec, *list, hosts.status().message()));
  auto tasks_text = required_env(env, spec, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!tasks_text) return tasks_text.status();
  auto tasks = expand_tasks_per_node(*tasks_text);
  if (!tasks)
    return Status::invalid(fmt::format("--peers-from {}: tasks per node '{}': {}", spec,
                                       *tasks_text, tasks.status().message()));
  if (tasks->size() != hosts->size())
    return Status::invalid(
        fmt::format("--peers-from {}: {} nodes in the node list but tasks for {} in '{}'", spec,
                    hosts->size(), tasks->size(), *tasks_text));
  // Task ids are consecutive on a node only under block distribution, Slurm's default.
  if (auto dist = env.getenv("SLURM_DISTRIBUTION");
      dist && !dist->empty() && !dist->starts_with("block"))
    return Status::invalid(fmt::format(
        "--peers-from {}: SLURM_DISTRIBUTION is '{}'; task ids must be laid out in blocks "
        "(srun --distribution=block)",
        spec, *dist));
  PeerListing out;
  for (size_t h = 0; h < hosts->size(); ++h)
    for (uint32_t local = 0; local < (*tasks)[h]; ++local) {
      if (uint32_t{base_port} + local > 65535)
        return Status::invalid(fmt::format("--peers-from {}: port {} + task {} is past 65535", spec,
                                           base_port, local));
      if (out.nodes.size() >= kMaxNodes) break;  // name_nodes reports it
      out.nodes.push_back({"", (*hosts)[h], static_cast<uint16_t>(base_port + local)});
    }
  auto procid = required_env(env, spec, {"SLURM_PROCID"});
  if (!procid) return procid.status();
  auto self = parse_uint(*procid, kMaxNodes);
  if (!self || *self >= out.nodes.size())
    return Status::invalid(
        fmt::format("--peers-from {}: SLURM_PROCID '{}' is not a task of the {} listed", spec,
                    *procid, out.nodes.size()));
  out.self = static_cast<uint32_t>(*self);
  out.self_rule = "SLURM_PROCID";
  GOSSIP_RETURN_IF_ERROR(name_nodes(out.nodes, spec));
  return out;
}

// "gossip-{0..3}.gossip" -> gossip-0.gossip ... gossip-3.gossip.
Result<std::vector<std::string>> expand_range(std::string_view pattern) {
  const size_t open = pattern.find('{');
  const size_t close = pattern.find('}');
  const size_t dots = pattern.find("..");
  if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
      dots == std::string_view::npos || dots < open || dots > close)
    return Status::invalid("needs one {A..B} range of ordinals, e.g. gossip-{0..3}.gossip");
  if (pattern.find('{', open + 1) != std::string_view::npos)
    return Status::invalid("has more than one {A..B} range");
  auto a = parse_uint(pattern.substr(open + 1, dots - open - 1), kMaxNodes);
  auto b = parse_uint(pattern.substr(dots + 2, close - dots - 2), kMaxNodes);
  if (!a || !b || *a > *b) return Status::invalid("the range {A..B} needs integers A <= B");
  if (*b - *a + 1 > kMaxNodes)
    return Status::invalid(fmt::format("lists more than the {} nodes allowed", kMaxNodes));
  std::vector<std::string> names;
  for (uint64_t i = *a; i <= *b; ++i)
    names.push_back(fmt::format("{}{}{}", pattern.substr(0, open), i, pattern.substr(close + 1)));
  return names;
}

Result<PeerListing> from_dns(std::string_view spec, std::string_view rest) {
  uint16_t port = kDefaultPeerPort;
  const size_t close = rest.rfind('}');
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    auto p = parse_uint(rest.substr(colon + 1), 65535);
    if (!p || *p == 0)
      return Status::invalid(fmt::format("--peers-from {}: port '{}' is not in 1..65535", spec,
                                         rest.substr(colon + 1)));
    port = static_cast<uint16_t>(*p);
    rest = rest.substr(0, colon);
  }
  auto names = expand_range(rest);
  if (!names)
    return Status::invalid(fmt::format("--peers-from {}: {}", spec, names.status().message()));
  PeerListing out;
  for (auto& host : *names) {
    if (auto problem = host_problem(host))
      return Status::invalid(fmt::format("--peers-from {}: {}", spec, *problem));
    out.nodes.push_back({"", std::move(host), port});
  }
  GOSSIP_RETURN_IF_ERROR(name_nodes(out.nodes, spec));
  return out;
}

}  // namespace

std::string ListedNode::endpoint() const { return fmt::format("tcp://{}:{}", host, port); }

Result<std::vector<std::string>> expand_hostlist(std::string_view list) {
  // Split at the commas outside brackets.
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      if (i > start) items.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      if (++depth > 1) return Status::invalid("'[' inside brackets");
    } else if (list[i] == ']') {
      if (--depth < 0) return Status::invalid("']' without '['");
    }
  }
  if (depth != 0) return Status::invalid("'[' without ']'");
  std::vector<std::string> out;
  for (std::string_view item : items) {
    std::vector<std::string> partial{""};
    size_t i = 0;
    while (i < item.size()) {
      if (item[i] != '[') {
        const size_t next = std::min(item.find('[', i), item.size());
        for (auto& p : partial) p += item.substr(i, next - i);
        i = next;
        continue;
      }
      const size_t end = item.find(']', i);
      std::vector<std::string> choices;
      std::string_view ranges = item.substr(i + 1, end - i - 1);
      size_t r = 0;
      while (r <= ranges.size()) {
        size_t comma = std::min(ranges.find(',', r), ranges.size());
        std::string_view range = ranges.substr(r, comma - r);
        r = comma + 1;
        const size_t dash = range.find('-');
        std::string_view lo = range.substr(0, dash);
        std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
        auto a = parse_uint(lo, uint64_t{1} << 40);
        auto b = parse_uint(hi, uint64_t{1} << 40);
        if (!a || !b || *a > *b)
          return Status::invalid(
              fmt::format("bad range '{}' (ranges are A or A-B, A <= B)", range));
        if (*b - *a >= kMaxNodes || choices.size() + (*b - *a) >= kMaxNodes)
          return Status::invalid(fmt::format("more than {} hosts", kMaxNodes));
        // Slurm keeps the zero padding of the lower bound: n[01-10] -> n01 ... n10.
        const size_t width = lo.size();
        for (uint64_t v = *a; v <= *b; ++v) choices.push_back(fmt::format("{:0{}}", v, width));
      }
      std::vector<std::string> grown;
      if (partial.size() * choices.size() > kMaxNodes)
        return Status::invalid(fmt::format("more than {} hosts", kMaxNodes));
      for (const auto& p : partial)
        for (const auto& c : choices) grown.push_back(p + c);
      partial = std::move(grown);
      i = end + 1;
    }
    for (auto& p : partial) {
      if (auto problem = host_problem(p)) return Status::invalid(*problem);
      out.push_back(std::move(p));
    }
    if (out.size() > kMaxNodes)
      return Status::invalid(fmt::format("more than {} hosts", kMaxNodes));
  }
  if (out.empty()) return Status::invalid("no host");
  return out;
}

Result<std::vector<uint32_t>> expand_tasks_per_node(std::string_view spec) {
  std::vector<uint32_t> out;
  size_t i = 0;
  while (i <= spec.size()) {
    const size_t comma = std::min(spec.find(',', i), spec.size());
    std::string_view item = spec.substr(i, comma - i);
    i = comma + 1;
    uint64_t repeat = 1;
    if (const size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (!item.ends_with(')')) return Status::invalid(fmt::format("bad item '{}'", item));
      auto r = parse_uint(item.substr(paren + 2, item.size() - paren - 3), kMaxNodes);
      if (!r || *r == 0) return Status::invalid(fmt::format("bad repeat in '{}'", item));
      repeat = *r;
      item = item.substr(0, paren);
    }
    auto n = parse_uint(item, kMaxNodes);
    if (!n || *n == 0) return Status::invalid(fmt::format("bad task count '{}'", item));
    if (out.size() + repeat > kMaxNodes)
      return Status::invalid(fmt::format("more than {} nodes", kMaxNodes));
    out.insert(out.end(), repeat, static_cast<uint32_t>(*n));
  }
  return out;
}

std::optional<uint32_t> find_node(const std::vector<ListedNode>& nodes, std::string_view name) {
  auto unique = [&](auto&& matches) -> std::optional<uint32_t> {
    std::optional<uint32_t> found;
    for (uint32_t i = 0; i < nodes.size(); ++i) {
      if (!matches(nodes[i])) continue;
      if (found) return std::nullopt;
      found = i;
    }
    return found;
  };
  if (auto by_name = unique([&](const ListedNode& n) { return n.name == name; })) return by_name;
  if (auto by_host = unique([&](const ListedNode& n) { return n.host == name; })) return by_host;
  // A pod's host name is the first label of its DNS name; a host's short name likewise.
  const std::string_view label = name.substr(0, name.find('.'));
  return unique([&](const ListedNode& n) {
    return std::string_view(n.host).substr(0, n.host.find('.')) == label;
  });
}

std::optional<std::string> peers_from_problem(std::string_view spec) {
  const std::string_view form =
      "the forms are hostfile:PATH, slurm[:PORT] and dns:NAME-{A..B}.SERVICE[:PORT]";
  if (spec.starts_with("hostfile:")) {
    if (spec.size() == 9) return fmt::format("'{}' names no file ({})", spec, form);
    return std::nullopt;
  }
  if (spec == "slurm") return std::nullopt;
  if (spec.starts_with("slurm:")) {
    auto port = parse_uint(spec.substr(6), 65535);
    if (!port || *port == 0) return fmt::format("'{}': the port is not in 1..65535", spec);
    return std::nullopt;
  }
  if (spec.starts_with("dns:")) {
    auto listing = from_dns(spec, spec.substr(4));
    if (!listing) return listing.status().message();
    return std::nullopt;
  }
  return fmt::format("unknown source '{}' ({})", spec, form);
}

Result<PeerListing> list_peers(std::string_view spec, const PeerSourceEnvironment& env) {
  if (auto problem = peers_from_problem(spec)) return Status::invalid(*problem);
  if (spec.starts_with("hostfile:")) return from_hostfile(spec, spec.substr(9), env);
  if (spec.starts_with("slurm"))
    return from_slurm(spec,
                      spec.size() > 5 ? static_cast<uint16_t>(*parse_uint(spec.substr(6), 65535))
                                      : kDefaultPeerPort,
                      env);
  return from_dns(spec, spec.substr(4));
}

}  // namespace gossip::daemon

#include "daemon/checkpoint.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <map>
#include <msgpack.hpp>
#include <tuple>

#include "daemon/private_files.h"

namespace gossip::daemon {
namespace {

constexpr char kMagic[8] = {'G', 'S', 'P', 'C', 'K', 'P', 'T', '1'};
constexpr uint64_t kMaxHeaderBytes = 64u << 20;
constexpr uint64_t kMaxFloats = uint64_t{1} << 34;

uint32_t crc_of(const void* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  for (size_t off = 0; off < size;) {
    const uInt n = static_cast<uInt>(std::min<size_t>(size - off, 1u << 30));
    crc = crc32(crc, p + off, n);
    off += n;
  }
  return static_cast<uint32_t>(crc);
}
uint32_t crc_of(const std::string& bytes) { return crc_of(bytes.data(), bytes.size()); }

void append_floats(std::string& out, const std::vector<float>& v) {
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace

Status write_checkpoint(const std::string& path, const Checkpoint& c) {
  msgpack::sbuffer header;
  msgpack::packer<msgpack::sbuffer> pk(header);
  pk.pack_map(8 + (c.members.empty() ? 0 : 1) + (c.forgotten.empty() ? 0 : 1));
  pk.pack("node"), pk.pack(c.node);
  pk.pack("strategy"), pk.pack(c.strategy);
  pk.pack("layout"), pk.pack(c.layout);
  pk.pack("round"), pk.pack(c.round);
  pk.pack("step"), pk.pack(c.step);
  pk.pack("numel"), pk.pack(static_cast<uint64_t>(c.model.size()));
  pk.pack("tensors");
  pk.pack_array(static_cast<uint32_t>(c.state.tensors.size()));
  for (const auto& [name, v] : c.state.tensors) {
    pk.pack_array(2);
    pk.pack(name);
    pk.pack(static_cast<uint64_t>(v.size()));
  }
  pk.pack("scalars");
  pk.pack_map(static_cast<uint32_t>(c.state.scalars.size()));
  for (const auto& [name, v] : c.state.scalars) pk.pack(name), pk.pack_double(v);
  if (!c.members.empty()) {
    pk.pack("members");
    pk.pack_array(static_cast<uint32_t>(c.members.size()));
    for (const auto& m : c.members) {
      pk.pack_array(m.public_key.empty() ? 3 : 4);
      pk.pack(m.id), pk.pack(m.endpoint), pk.pack(m.first_round);
      if (!m.public_key.empty()) pk.pack(m.public_key);
    }
  }
  if (!c.forgotten.empty()) pk.pack("forgotten"), pk.pack(c.forgotten);

  std::string bytes(kMagic, sizeof kMagic);
  const uint64_t hlen = header.size();
  bytes.append(reinterpret_cast<const char*>(&hlen), sizeof hlen);
  bytes.append(header.data(), header.size());
  append_floats(bytes, c.model);
  for (const auto& [name, v] : c.state.tensors) append_floats(bytes, v);
  const uint32_t crc = crc_of(bytes);
  bytes.append(reinterpret_cast<const char*>(&crc), sizeof crc);

  return write_file_atomically(path, bytes);
}

Result<Checkpoint> read_checkpoint(const std::string& path) {
  auto read = read_private_file(path, "checkpoint");
  if (!read) return read.status();
  const std::string& bytes = *read;
  auto bad = [&](const std::string& why) {
    return Status::invalid(fmt::format("checkpoint {}: {}", path, why));
  };
  constexpr size_t kFixed = sizeof kMagic + sizeof(uint64_t) + sizeof(uint32_t);
  if (bytes.size() < kFixed) return bad(fmt::format("truncated ({} bytes)", bytes.size()));
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return bad("not a gossipd checkpoint (bad magic)");
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + bytes.size() - sizeof crc, sizeof crc);
  const std::string body = bytes.substr(0, bytes.size() - sizeof crc);
  if (crc_of(body) != crc) return bad("CRC mismatch (the file is damaged or truncated)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data() + sizeof kMagic, sizeof hlen);
  if (hlen > kMaxHeaderBytes || hlen > body.size() - sizeof kMagic - sizeof hlen)
    return bad(fmt::format("header length {} does not fit the file", hlen));
  const char* hdr = body.data() + sizeof kMagic + sizeof hlen;

  Checkpoint c;
  std::vector<std::pair<std::string, uint64_t>> tensors;
  uint64_t numel = 0;
  try {
    msgpack::object_handle oh = msgpack::unpack(hdr, hlen);
    const auto m = oh.get().as<std::map<std::string, msgpack::object>>();
    auto field = [&](const char* key) -> const msgpack::object& {
      auto it = m.find(key);
      if (it == m.end()) throw std::runtime_error(fmt::format("header has no '{}'", key));
      return it->second;
    };
    c.node = field("node").as<uint32_t>();
    c.strategy = field("strategy").as<std::string>();
    c.layout = field("layout").as<uint64_t>();
    c.round = field("round").as<uint64_t>();
    c.step = field("step").as<uint64_t>();
    numel = field("numel").as<uint64_t>();
    tensors = field("tensors").as<std::vector<std::pair<std::string, uint64_t>>>();
    c.state.scalars = field("scalars").as<std::map<std::string, double>>();
    if (m.count("members")) {
      // [id, endpoint, first round] and, under CURVE, the public key.
      const auto members = field("members").as<std::vector<std::vector<msgpack::object>>>();
      if (members.size() > kMaxCheckpointMembers)
        throw std::runtime_error(
            fmt::format("{} members (at most {})", members.size(), kMaxCheckpointMembers));
      for (const auto& m : members) {
        if (m.size() != 3 && m.size() != 4)
          throw std::runtime_error(fmt::format("a member of {} fields (3 or 4)", m.size()));
        c.members.push_back({m[0].as<uint32_t>(), m[1].as<std::string>(), m[2].as<uint64_t>(),
                             m.size() == 4 ? m[3].as<std::string>() : std::string()});
      }
    }
    if (m.count("forgotten")) {
      c.forgotten = field("forgotten").as<std::vector<uint32_t>>();
      if (c.forgotten.size() > kMaxCheckpointMembers)
        throw std::runtime_error(fmt::format("{} forgotten members (at most {})",
                                             c.forgotten.size(), kMaxCheckpointMembers));
    }
  } catch (const std::exception& e) {
    return bad(fmt::format("malformed header: {}", e.what()));
  }
  uint64_t floats = numel;
  for (const auto& [name, n] : tensors) {
    if (n > kMaxFloats || floats > kMaxFloats)
      return bad(fmt::format("tensor '{}' is too large", name));
    floats += n;
  }
  const uint64_t data_bytes = body.size() - sizeof kMagic - sizeof hlen - hlen;
  if (floats > kMaxFloats || floats * sizeof(float) != data_bytes)
    return bad(
        fmt::format("the header describes {} values but {} bytes follow it", floats, data_bytes));
  const char* p = hdr + hlen;
  auto take = [&](uint64_t n) {
    std::vector<float> v(n);
    std::memcpy(v.data(), p, n * sizeof(float));
    p += n * sizeof(float);
    return v;
  };
  c.model = take(numel);
  for (const auto& [name, n] : tensors) c.state.tensors[name] = take(n);
  for (const auto& [name, v] : c.state.scalars)
    if (!std::isfinite(v)) return bad(fmt::format("value '{}' is not finite", name));
  return c;
}

std::string describe_state(const sgd::StrategyState& state) {
  std::string out;
  for (const auto& [name, v] : state.tensors)
    out += fmt::format("{}{} {} crc {:08x}", out.empty() ? "" : ", ", name, v.size(),
                       crc_of(v.data(), v.size() * sizeof(float)));
  return out.empty() ? "none" : out;
}

}  // namespace gossip::daemon

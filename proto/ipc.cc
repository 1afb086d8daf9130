#include "proto/ipc.h"

#include <fmt/format.h>

#include <array>
#include <cassert>
#include <climits>
#include <msgpack.hpp>
#include <span>
#include <string_view>
#include <type_traits>

#include "proto/printable.h"

namespace gossip::proto::ipc {

namespace {

// The name and field keys of each message, in encoding order. encode() and decode()
// both read these tables, so the two cannot disagree on a key.
template <typename T>
struct Schema;

template <>
struct Schema<Attach> {
  static constexpr const char* kName = "attach";
  static constexpr std::array<std::string_view, 6> kKeys = {"protocol", "trainer", "local_rank",
                                                            "pid",      "layout",  "device"};
};
template <>
struct Schema<AttachOk> {
  static constexpr const char* kName = "attach_ok";
  static constexpr std::array<std::string_view, 15> kKeys = {
      "node",        "nodes",   "slot",        "arena",     "arena_bytes",
      "slot_offset", "offsets", "strategy",    "gradients", "period",
      "post_local",  "step",    "initialized", "fragments", "overlap"};
};
template <>
struct Schema<Sync> {
  static constexpr const char* kName = "sync";
  static constexpr std::array<std::string_view, 4> kKeys = {"step", "whole", "loss", "losses"};
};
template <>
struct Schema<SyncOk> {
  static constexpr const char* kName = "sync_ok";
  static constexpr std::array<std::string_view, 4> kKeys = {"round", "step", "traffic", "period"};
};
template <>
struct Schema<SyncRange> {
  static constexpr const char* kName = "sync_range";
  static constexpr std::array<std::string_view, 4> kKeys = {"step", "offset", "numel", "last"};
};
template <>
struct Schema<Start> {
  static constexpr const char* kName = "start";
  static constexpr std::array<std::string_view, 0> kKeys = {};
};
template <>
struct Schema<Detach> {
  static constexpr const char* kName = "detach";
  static constexpr std::array<std::string_view, 0> kKeys = {};
};
template <>
struct Schema<DetachOk> {
  static constexpr const char* kName = "detach_ok";
  static constexpr std::array<std::string_view, 0> kKeys = {};
};
template <>
struct Schema<StatsRequest> {
  static constexpr const char* kName = "stats";
  static constexpr std::array<std::string_view, 0> kKeys = {};
};
template <>
struct Schema<StatsReply> {
  static constexpr const char* kName = "stats_reply";
  static constexpr std::array<std::string_view, 8> kKeys = {
      "node", "strategy", "round", "step", "trainers", "traffic", "peers", "timing"};
};
template <>
struct Schema<Timing> {
  static constexpr std::array<std::string_view, 7> kKeys = {
      "trainer_wait_us",    "trainer_attached_us",  "rounds", "round_us", "last_round_us",
      "last_round_payload", "last_overlap_permille"};
};
template <>
struct Schema<InspectRequest> {
  static constexpr const char* kName = "inspect";
  static constexpr std::array<std::string_view, 2> kKeys = {"what", "timeout_ms"};
};
template <>
struct Schema<InspectReply> {
  static constexpr const char* kName = "inspect_reply";
  static constexpr std::array<std::string_view, 1> kKeys = {"parts"};
};
template <>
struct Schema<Error> {
  static constexpr const char* kName = "error";
  static constexpr std::array<std::string_view, 1> kKeys = {"message"};
};
template <>
struct Schema<Shutdown> {
  static constexpr const char* kName = "shutdown";
  static constexpr std::array<std::string_view, 1> kKeys = {"reason"};
};
template <>
struct Schema<Leave> {
  static constexpr const char* kName = "leave";
  static constexpr std::array<std::string_view, 0> kKeys = {};
};
template <>
struct Schema<Ban> {
  static constexpr const char* kName = "ban";
  static constexpr std::array<std::string_view, 1> kKeys = {"peer"};
};
template <>
struct Schema<Forget> {
  static constexpr const char* kName = "forget";
  static constexpr std::array<std::string_view, 1> kKeys = {"peer"};
};
template <>
struct Schema<Traffic> {
  static constexpr std::array<std::string_view, 7> kKeys = {
      "payload_sent", "payload_recv", "wire_sent", "wire_recv",
      "msgs_sent",    "msgs_recv",    "dropped"};
};
template <>
struct Schema<PeerStats> {
  static constexpr std::array<std::string_view, 4> kKeys = {"id", "endpoint", "traffic",
                                                            "silent_ms"};
};
template <>
struct Schema<TensorSpec> {
  static constexpr std::array<std::string_view, 3> kKeys = {"name", "dtype", "numel"};
};

// Unpack limits derived from layout.h, so that a hostile message cannot make the
// unpacker reserve more than a few MiB ahead of the bytes it actually holds: msgpack
// allocates a container's elements when it reads the container's header.
//  - arrays: a layout or offsets list has at most kMaxTensors entries (one more is let
//    through so that validate_layout, not msgpack, names a too-long layout);
//  - maps: the widest message (attach_ok) has 2 + 15 keys, and a message with one
//    key too many must be refused by its name, not by this limit;
//  - depth: message map > peers array > peer map > traffic map;
//  - strings: names are bounded by validate_layout; error texts and endpoints are short.
//  - objects: the most a valid message holds (a stats_reply with kMaxArray peers has
//    23 per peer); without it 16 MiB of one-byte values would unpack into 400 MB.
constexpr size_t kMaxArray = kMaxTensors + 1;
constexpr size_t kMaxMap = 24;
constexpr size_t kMaxDepth = 4;
constexpr size_t kMaxString = 64 * 1024;
constexpr size_t kMaxObjects = size_t{1} << 21;

// A first pass over the bytes that allocates nothing: counts the values (each becomes
// a 24-byte msgpack::object when unpacked) and stops at kMaxObjects. It also stops past
// kMaxDepth so that its own parse stack stays small; unpack() then reports the depth.
class ObjectCounter : public msgpack::null_visitor {
 public:
  bool over_budget() const { return objects_ > kMaxObjects; }

  bool visit_nil() { return count(); }
  bool visit_boolean(bool) { return count(); }
  bool visit_positive_integer(uint64_t) { return count(); }
  bool visit_negative_integer(int64_t) { return count(); }
  bool visit_float32(float) { return count(); }
  bool visit_float64(double) { return count(); }
  bool visit_str(const char*, uint32_t) { return count(); }
  bool visit_bin(const char*, uint32_t) { return count(); }
  bool visit_ext(const char*, uint32_t) { return count(); }
  bool start_array(uint32_t) { return ++depth_ <= kMaxDepth && count(); }
  bool end_array() { return --depth_, true; }
  bool start_map(uint32_t) { return ++depth_ <= kMaxDepth && count(); }
  bool end_map() { return --depth_, true; }

 private:
  bool count() { return ++objects_ <= kMaxObjects; }
  size_t objects_ = 0;
  size_t depth_ = 0;
};

// ---------------------------------------------------------------- encoding

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_key(Packer& pk, std::string_view key) {
  pk.pack_str(static_cast<uint32_t>(key.size()));
  pk.pack_str_body(key.data(), static_cast<uint32_t>(key.size()));
}

void pack_value(Packer& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
void pack_value(Packer& pk, uint64_t v) { pk.pack_uint64(v); }
void pack_value(Packer& pk, uint32_t v) { pk.pack_uint32(v); }
void pack_value(Packer& pk, int32_t v) { pk.pack_int32(v); }
void pack_value(Packer& pk, bool v) { v ? pk.pack_true() : pk.pack_false(); }
void pack_value(Packer& pk, double v) { pk.pack_double(v); }

void pack_value(Packer& pk, const std::vector<uint64_t>& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (uint64_t x : v) pk.pack_uint64(x);
}

void pack_value(Packer& pk, const Traffic& t) {
  const auto& k = Schema<Traffic>::kKeys;
  pk.pack_map(k.size());
  const uint64_t vals[] = {t.payload_sent, t.payload_recv, t.wire_sent, t.wire_recv,
                           t.msgs_sent,    t.msgs_recv,    t.dropped};
  static_assert(std::size(vals) == Schema<Traffic>::kKeys.size());
  for (size_t i = 0; i < k.size(); ++i) pack_key(pk, k[i]), pack_value(pk, vals[i]);
}

void pack_value(Packer& pk, const Timing& t) {
  const auto& k = Schema<Timing>::kKeys;
  pk.pack_map(k.size());
  const uint64_t vals[] = {
      t.trainer_wait_us,    t.trainer_attached_us,  t.rounds, t.round_us, t.last_round_us,
      t.last_round_payload, t.last_overlap_permille};
  static_assert(std::size(vals) == Schema<Timing>::kKeys.size());
  for (size_t i = 0; i < k.size(); ++i) pack_key(pk, k[i]), pack_value(pk, vals[i]);
}

void pack_value(Packer& pk, const Layout& l) {
  const auto& k = Schema<TensorSpec>::kKeys;
  pk.pack_array(static_cast<uint32_t>(l.tensors.size()));
  for (const auto& t : l.tensors) {
    pk.pack_map(k.size());
    pack_key(pk, k[0]), pack_value(pk, t.name);
    pack_key(pk, k[1]), pack_value(pk, std::string(dtype_name(t.dtype)));
    pack_key(pk, k[2]), pack_value(pk, t.numel);
  }
}

void pack_value(Packer& pk, const std::vector<std::string>& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const auto& x : v) pack_value(pk, x);
}

void pack_value(Packer& pk, const std::vector<PeerStats>& peers) {
  const auto& k = Schema<PeerStats>::kKeys;
  pk.pack_array(static_cast<uint32_t>(peers.size()));
  for (const auto& p : peers) {
    pk.pack_map(k.size());
    pack_key(pk, k[0]), pack_value(pk, p.id);
    pack_key(pk, k[1]), pack_value(pk, p.endpoint);
    pack_key(pk, k[2]), pack_value(pk, p.traffic);
    pack_key(pk, k[3]), pack_value(pk, p.silent_ms);
  }
}

// Packs the fields of T in the order of Schema<T>::kKeys.
template <typename... V>
void pack_fields(Packer& pk, std::span<const std::string_view> keys, const V&... vals) {
  size_t i = 0;
  ((pack_key(pk, keys[i++]), pack_value(pk, vals)), ...);
}

void pack_body(Packer& pk, const Attach& m) {
  pack_fields(pk, Schema<Attach>::kKeys, m.protocol, m.trainer, m.local_rank, m.pid, m.layout,
              m.device);
}
void pack_body(Packer& pk, const AttachOk& m) {
  pack_fields(pk, Schema<AttachOk>::kKeys, m.node, m.nodes, m.slot, m.arena, m.arena_bytes,
              m.slot_offset, m.offsets, m.strategy, m.gradients, m.period, m.post_local, m.step,
              m.initialized, m.fragments, m.overlap);
}
void pack_body(Packer& pk, const Sync& m) {
  pack_fields(pk, Schema<Sync>::kKeys, m.step, m.whole, m.loss, m.losses);
}
void pack_body(Packer& pk, const SyncOk& m) {
  pack_fields(pk, Schema<SyncOk>::kKeys, m.round, m.step, m.traffic, m.period);
}
void pack_body(Packer&, const Start&) {}
void pack_body(Packer& pk, const SyncRange& m) {
  pack_fields(pk, Schema<SyncRange>::kKeys, m.step, m.offset, m.numel, m.last);
}
void pack_body(Packer&, const Detach&) {}
void pack_body(Packer&, const DetachOk&) {}
void pack_body(Packer&, const StatsRequest&) {}
void pack_body(Packer&, const Leave&) {}
void pack_body(Packer& pk, const Ban& m) { pack_fields(pk, Schema<Ban>::kKeys, m.peer); }
void pack_body(Packer& pk, const Forget& m) { pack_fields(pk, Schema<Forget>::kKeys, m.peer); }
void pack_body(Packer& pk, const StatsReply& m) {
  pack_fields(pk, Schema<StatsReply>::kKeys, m.node, m.strategy, m.round, m.step, m.trainers,
              m.traffic, m.peers, m.timing);
}
void pack_body(Packer& pk, const InspectRequest& m) {
  pack_fields(pk, Schema<InspectRequest>::kKeys, m.what, m.timeout_ms);
}
void pack_body(Packer& pk, const InspectReply& m) {
  pack_fields(pk, Schema<InspectReply>::kKeys, m.parts);
}
void pack_body(Packer& pk, const Error& m) { pack_fields(pk, Schema<Error>::kKeys, m.message); }
void pack_body(Packer& pk, const Shutdown& m) {
  pack_fields(pk, Schema<Shutdown>::kKeys, m.reason);
}

// ---------------------------------------------------------------- decoding

std::string_view as_view(const msgpack::object& o) {
  return std::string_view(o.via.str.ptr, o.via.str.size);
}

const char* type_word(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "a bool";
    case msgpack::type::POSITIVE_INTEGER:
      return "an unsigned integer";
    case msgpack::type::NEGATIVE_INTEGER:
      return "a negative integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "a float";
    case msgpack::type::STR:
      return "a string";
    case msgpack::type::BIN:
      return "binary";
    case msgpack::type::ARRAY:
      return "an array";
    case msgpack::type::MAP:
      return "a map";
    case msgpack::type::EXT:
      return "an extension";
  }
  return "unknown";
}

// Keys and kinds come from the other side: keep error messages short and printable.
std::string printable(std::string_view s) { return printable_text(s, 64, "..."); }

// Reads one msgpack map with exactly the given string keys, each once. Errors name
// the message kind and the field's path: "attach: field 'layout[3].numel' ...".
class FieldReader {
 public:
  FieldReader(const char* kind, std::string prefix) : kind_(kind), prefix_(std::move(prefix)) {}

  // Checks that `o` is a map whose keys are exactly `keys` (plus `extra`, which the
  // caller has already read), without duplicates.
  Status open(const msgpack::object& o, std::span<const std::string_view> keys,
              std::span<const std::string_view> extra = {}) {
    if (o.type != msgpack::type::MAP) {
      if (prefix_.empty())
        return Status::protocol(fmt::format("{}: message is {}, not a map", kind_, type_word(o)));
      return not_a(prefix_.substr(0, prefix_.size() - 1), "a map", o, /*prefixed=*/false);
    }
    keys_ = keys;
    vals_.assign(keys.size(), nullptr);
    std::vector<bool> extra_seen(extra.size(), false);
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR)
        return Status::protocol(fmt::format("{}: {}a key is {}, not a string", kind_,
                                            where_prefix(), type_word(kv.key)));
      std::string_view key = as_view(kv.key);
      bool found = false;
      for (size_t k = 0; k < keys.size() && !found; ++k) {
        if (keys[k] != key) continue;
        if (vals_[k]) return duplicate(key);
        vals_[k] = &kv.val;
        found = true;
      }
      for (size_t k = 0; k < extra.size() && !found; ++k) {
        if (extra[k] != key) continue;
        if (extra_seen[k]) return duplicate(key);
        extra_seen[k] = true;
        found = true;
      }
      if (!found)
        return Status::protocol(
            fmt::format("{}: unknown field '{}{}'", kind_, prefix_, printable(key)));
    }
    for (size_t k = 0; k < keys.size(); ++k)
      if (!vals_[k])
        return Status::protocol(fmt::format("{}: missing field '{}{}'", kind_, prefix_, keys[k]));
    return Status::ok();
  }

  Status read(std::string_view key, uint64_t* out) const {
    const msgpack::object& o = get(key);
    if (o.type != msgpack::type::POSITIVE_INTEGER) return not_a(key, "an unsigned integer", o);
    *out = o.via.u64;
    return Status::ok();
  }

  Status read(std::string_view key, uint32_t* out) const {
    uint64_t v = 0;
    GOSSIP_RETURN_IF_ERROR(read(key, &v));
    if (v > UINT32_MAX) return error(key, fmt::format("is {}, out of range for uint32", v));
    *out = static_cast<uint32_t>(v);
    return Status::ok();
  }

  Status read(std::string_view key, int32_t* out) const {
    const msgpack::object& o = get(key);
    if (o.type == msgpack::type::POSITIVE_INTEGER) {
      if (o.via.u64 > INT32_MAX)
        return error(key, fmt::format("is {}, out of range for int32", o.via.u64));
      *out = static_cast<int32_t>(o.via.u64);
      return Status::ok();
    }
    if (o.type == msgpack::type::NEGATIVE_INTEGER) {
      if (o.via.i64 < INT32_MIN)
        return error(key, fmt::format("is {}, out of range for int32", o.via.i64));
      *out = static_cast<int32_t>(o.via.i64);
      return Status::ok();
    }
    return not_a(key, "an integer", o);
  }

  // A float64 (NaN and Inf included: a trainer's loss may be either) or an integer.
  Status read(std::string_view key, double* out) const {
    const msgpack::object& o = get(key);
    if (o.type == msgpack::type::FLOAT64 || o.type == msgpack::type::FLOAT32)
      *out = o.via.f64;
    else if (o.type == msgpack::type::POSITIVE_INTEGER)
      *out = static_cast<double>(o.via.u64);
    else if (o.type == msgpack::type::NEGATIVE_INTEGER)
      *out = static_cast<double>(o.via.i64);
    else
      return not_a(key, "a number", o);
    return Status::ok();
  }

  Status read(std::string_view key, std::string* out) const {
    const msgpack::object& o = get(key);
    if (o.type != msgpack::type::STR) return not_a(key, "a string", o);
    out->assign(o.via.str.ptr, o.via.str.size);
    return Status::ok();
  }

  Status read(std::string_view key, bool* out) const {
    const msgpack::object& o = get(key);
    if (o.type != msgpack::type::BOOLEAN) return not_a(key, "a bool", o);
    *out = o.via.boolean;
    return Status::ok();
  }

  Status read(std::string_view key, std::vector<uint64_t>* out) const {
    const msgpack::object& o = get(key);
    if (o.type != msgpack::type::ARRAY) return not_a(key, "an array", o);
    if (o.via.array.size > kMaxTensors)
      return error(key, fmt::format("has {} elements, limit is {}", o.via.array.size, kMaxTensors));
    out->clear();
    out->reserve(o.via.array.size);
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      const msgpack::object& e = o.via.array.ptr[i];
      if (e.type != msgpack::type::POSITIVE_INTEGER)
        return not_a(fmt::format("{}[{}]", key, i), "an unsigned integer", e);
      out->push_back(e.via.u64);
    }
    return Status::ok();
  }

  Status read(std::string_view key, Traffic* out) const {
    FieldReader r(kind_, prefix_ + std::string(key) + ".");
    GOSSIP_RETURN_IF_ERROR(r.open(get(key), Schema<Traffic>::kKeys));
    GOSSIP_RETURN_IF_ERROR(r.read("payload_sent", &out->payload_sent));
    GOSSIP_RETURN_IF_ERROR(r.read("payload_recv", &out->payload_recv));
    GOSSIP_RETURN_IF_ERROR(r.read("wire_sent", &out->wire_sent));
    GOSSIP_RETURN_IF_ERROR(r.read("wire_recv", &out->wire_recv));
    GOSSIP_RETURN_IF_ERROR(r.read("msgs_sent", &out->msgs_sent));
    GOSSIP_RETURN_IF_ERROR(r.read("msgs_recv", &out->msgs_recv));
    GOSSIP_RETURN_IF_ERROR(r.read("dropped", &out->dropped));
    return Status::ok();
  }

  Status read(std::string_view key, Timing* out) const {
    FieldReader r(kind_, prefix_ + std::string(key) + ".");
    GOSSIP_RETURN_IF_ERROR(r.open(get(key), Schema<Timing>::kKeys));
    GOSSIP_RETURN_IF_ERROR(r.read("trainer_wait_us", &out->trainer_wait_us));
    GOSSIP_RETURN_IF_ERROR(r.read("trainer_attached_us", &out->trainer_attached_us));
    GOSSIP_RETURN_IF_ERROR(r.read("rounds", &out->rounds));
    GOSSIP_RETURN_IF_ERROR(r.read("round_us", &out->round_us));
    GOSSIP_RETURN_IF_ERROR(r.read("last_round_us", &out->last_round_us));
    GOSSIP_RETURN_IF_ERROR(r.read("last_round_payload", &out->last_round_payload));
    GOSSIP_RETURN_IF_ERROR(r.read("last_overlap_permille", &out->last_overlap_permille));
    if (out->last_overlap_permille > 1000)
      return r.error("last_overlap_permille",
                     fmt::format("is {}, more than 1000", out->last_overlap_permille));
    return Status::ok();
  }

  // Reads the tensors and then checks the layout as a whole with validate_layout.
  Status read(std::string_view key, Layout* out) const {
    const msgpack::object& o = get(key);
    if (o.type != msgpack::type::ARRAY) return not_a(key, "an array", o);
    out->tensors.clear();
    out->tensors.reserve(o.via.array.size);
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      FieldReader r(kind_, fmt::format("{}{}[{}].", prefix_, key, i));
      GOSSIP_RETURN_IF_ERROR(r.open(o.via.array.ptr[i], Schema<TensorSpec>::kKeys));
      TensorSpec t;
      std::string dtype;
      GOSSIP_RETURN_IF_ERROR(r.read("name", &t.name));
      GOSSIP_RETURN_IF_ERROR(r.read("dtype", &dtype));
      GOSSIP_RETURN_IF_ERROR(r.read("numel", &t.numel));
      auto d = parse_dtype(dtype);
      if (!d) return d.status().with_context(r.where("dtype"));
      t.dtype = *d;
      out->tensors.push_back(std::move(t));
    }
    return validate_layout(*out).with_context(where(key));
  }

  Status read(std::string_view key, std::vector<std::string>* out) const {
    const msgpack::object& o = get(key);
    if (o.type != msgpack::type::ARRAY) return not_a(key, "an array", o);
    out->clear();
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      const msgpack::object& e = o.via.array.ptr[i];
      if (e.type != msgpack::type::STR) return not_a(fmt::format("{}[{}]", key, i), "a string", e);
      out->emplace_back(e.via.str.ptr, e.via.str.size);
    }
    return Status::ok();
  }

  Status read(std::string_view key, std::vector<PeerStats>* out) const {
    const msgpack::object& o = get(key);
    if (o.type != msgpack::type::ARRAY) return not_a(key, "an array", o);
    out->clear();
    out->reserve(o.via.array.size);
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      FieldReader r(kind_, fmt::format("{}{}[{}].", prefix_, key, i));
      GOSSIP_RETURN_IF_ERROR(r.open(o.via.array.ptr[i], Schema<PeerStats>::kKeys));
      PeerStats p;
      GOSSIP_RETURN_IF_ERROR(r.read("id", &p.id));
      GOSSIP_RETURN_IF_ERROR(r.read("endpoint", &p.endpoint));
      GOSSIP_RETURN_IF_ERROR(r.read("traffic", &p.traffic));
      GOSSIP_RETURN_IF_ERROR(r.read("silent_ms", &p.silent_ms));
      out->push_back(std::move(p));
    }
    return Status::ok();
  }

  // "attach: field 'layout[3].numel'"
  std::string where(std::string_view key) const {
    return fmt::format("{}: field '{}{}'", kind_, prefix_, key);
  }

 private:
  // Only called for keys of the schema, which open() found present.
  const msgpack::object& get(std::string_view key) const {
    for (size_t k = 0; k < keys_.size(); ++k)
      if (keys_[k] == key) return *vals_[k];
    assert(false && "key not in schema");
    static const msgpack::object kNil;
    return kNil;
  }

  std::string where_prefix() const {
    return prefix_.empty() ? "" : fmt::format("in '{}': ", prefix_.substr(0, prefix_.size() - 1));
  }

  Status error(std::string_view key, const std::string& what) const {
    return Status::protocol(fmt::format("{} {}", where(key), what));
  }
  // `prefixed` false: `path` is already a full path, not a key of this map.
  Status not_a(std::string_view path, const char* want, const msgpack::object& got,
               bool prefixed = true) const {
    std::string field = prefixed ? where(path) : fmt::format("{}: field '{}'", kind_, path);
    return Status::protocol(fmt::format("{} is not {} (it is {})", field, want, type_word(got)));
  }
  Status duplicate(std::string_view key) const {
    return Status::protocol(
        fmt::format("{}: duplicate field '{}{}'", kind_, prefix_, printable(key)));
  }
  const char* kind_;
  std::string prefix_;
  std::span<const std::string_view> keys_;
  std::vector<const msgpack::object*> vals_;
};

Status read_body(const FieldReader& r, Attach* m) {
  GOSSIP_RETURN_IF_ERROR(r.read("protocol", &m->protocol));
  if (m->protocol != kProtocolVersion)
    return Status::protocol(fmt::format("{} is {}, this side speaks {}", r.where("protocol"),
                                        m->protocol, kProtocolVersion));
  GOSSIP_RETURN_IF_ERROR(r.read("trainer", &m->trainer));
  GOSSIP_RETURN_IF_ERROR(r.read("local_rank", &m->local_rank));
  GOSSIP_RETURN_IF_ERROR(r.read("pid", &m->pid));
  GOSSIP_RETURN_IF_ERROR(r.read("layout", &m->layout));
  return r.read("device", &m->device);
}
Status read_body(const FieldReader& r, AttachOk* m) {
  GOSSIP_RETURN_IF_ERROR(r.read("node", &m->node));
  GOSSIP_RETURN_IF_ERROR(r.read("nodes", &m->nodes));
  GOSSIP_RETURN_IF_ERROR(r.read("slot", &m->slot));
  GOSSIP_RETURN_IF_ERROR(r.read("arena", &m->arena));
  GOSSIP_RETURN_IF_ERROR(r.read("arena_bytes", &m->arena_bytes));
  GOSSIP_RETURN_IF_ERROR(r.read("slot_offset", &m->slot_offset));
  GOSSIP_RETURN_IF_ERROR(r.read("offsets", &m->offsets));
  GOSSIP_RETURN_IF_ERROR(r.read("strategy", &m->strategy));
  GOSSIP_RETURN_IF_ERROR(r.read("gradients", &m->gradients));
  GOSSIP_RETURN_IF_ERROR(r.read("period", &m->period));
  GOSSIP_RETURN_IF_ERROR(r.read("post_local", &m->post_local));
  GOSSIP_RETURN_IF_ERROR(r.read("step", &m->step));
  GOSSIP_RETURN_IF_ERROR(r.read("initialized", &m->initialized));
  GOSSIP_RETURN_IF_ERROR(r.read("fragments", &m->fragments));
  if (m->fragments == 0) return Status::protocol("attach_ok: field 'fragments' is 0");
  return r.read("overlap", &m->overlap);
}
Status read_body(const FieldReader& r, Sync* m) {
  GOSSIP_RETURN_IF_ERROR(r.read("step", &m->step));
  GOSSIP_RETURN_IF_ERROR(r.read("whole", &m->whole));
  GOSSIP_RETURN_IF_ERROR(r.read("loss", &m->loss));
  return r.read("losses", &m->losses);
}
Status read_body(const FieldReader& r, SyncOk* m) {
  GOSSIP_RETURN_IF_ERROR(r.read("round", &m->round));
  GOSSIP_RETURN_IF_ERROR(r.read("step", &m->step));
  GOSSIP_RETURN_IF_ERROR(r.read("traffic", &m->traffic));
  return r.read("period", &m->period);
}
Status read_body(const FieldReader&, Start*) { return Status::ok(); }
Status read_body(const FieldReader& r, SyncRange* m) {
  GOSSIP_RETURN_IF_ERROR(r.read("step", &m->step));
  GOSSIP_RETURN_IF_ERROR(r.read("offset", &m->offset));
  GOSSIP_RETURN_IF_ERROR(r.read("numel", &m->numel));
  return r.read("last", &m->last);
}
Status read_body(const FieldReader&, Detach*) { return Status::ok(); }
Status read_body(const FieldReader&, DetachOk*) { return Status::ok(); }
Status read_body(const FieldReader&, StatsRequest*) { return Status::ok(); }
Status read_body(const FieldReader&, Leave*) { return Status::ok(); }
Status read_body(const FieldReader& r, Ban* m) { return r.read("peer", &m->peer); }
Status read_body(const FieldReader& r, Forget* m) { return r.read("peer", &m->peer); }
Status read_body(const FieldReader& r, StatsReply* m) {
  GOSSIP_RETURN_IF_ERROR(r.read("node", &m->node));
  GOSSIP_RETURN_IF_ERROR(r.read("strategy", &m->strategy));
  GOSSIP_RETURN_IF_ERROR(r.read("round", &m->round));
  GOSSIP_RETURN_IF_ERROR(r.read("step", &m->step));
  GOSSIP_RETURN_IF_ERROR(r.read("trainers", &m->trainers));
  GOSSIP_RETURN_IF_ERROR(r.read("traffic", &m->traffic));
  GOSSIP_RETURN_IF_ERROR(r.read("peers", &m->peers));
  return r.read("timing", &m->timing);
}
Status read_body(const FieldReader& r, InspectRequest* m) {
  GOSSIP_RETURN_IF_ERROR(r.read("what", &m->what));
  if (m->what > InspectRequest::kStatus)
    return Status::protocol(fmt::format("inspect: field 'what' is {}, not 0 or 1", m->what));
  return r.read("timeout_ms", &m->timeout_ms);
}
Status read_body(const FieldReader& r, InspectReply* m) { return r.read("parts", &m->parts); }
Status read_body(const FieldReader& r, Error* m) { return r.read("message", &m->message); }
Status read_body(const FieldReader& r, Shutdown* m) { return r.read("reason", &m->reason); }

constexpr std::array<std::string_view, 2> kEnvelopeKeys = {"v", "kind"};

template <typename T>
Result<Message> decode_as(const msgpack::object& o) {
  FieldReader r(Schema<T>::kName, "");
  GOSSIP_RETURN_IF_ERROR(r.open(o, Schema<T>::kKeys, kEnvelopeKeys));
  T m;
  GOSSIP_RETURN_IF_ERROR(read_body(r, &m));
  return Message(std::move(m));
}

// Finds the alternative of Message whose Schema name is `kind`.
template <size_t I = 0>
Result<Message> decode_kind(std::string_view kind, const msgpack::object& o) {
  if constexpr (I == std::variant_size_v<Message>) {
    return Status::protocol(fmt::format("unknown ipc message kind '{}'", printable(kind)));
  } else {
    using T = std::variant_alternative_t<I, Message>;
    if (kind == Schema<T>::kName) return decode_as<T>(o);
    return decode_kind<I + 1>(kind, o);
  }
}

}  // namespace

const char* message_name(const Message& m) {
  return std::visit([](const auto& x) { return Schema<std::decay_t<decltype(x)>>::kName; }, m);
}

std::string encode(const Message& m) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  std::visit(
      [&pk](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        pk.pack_map(static_cast<uint32_t>(kEnvelopeKeys.size() + Schema<T>::kKeys.size()));
        pack_key(pk, "v"), pk.pack_uint32(kProtocolVersion);
        pack_key(pk, "kind"), pack_value(pk, std::string(Schema<T>::kName));
        pack_body(pk, x);
      },
      m);
  return std::string(buf.data(), buf.size());
}

Result<Message> decode(const void* data, size_t size) {
  if (size == 0) return Status::protocol("empty ipc message");
  if (size > kMaxIpcMessageBytes)
    return Status::protocol(
        fmt::format("ipc message is {} bytes, limit {}", size, kMaxIpcMessageBytes));
  ObjectCounter counter;
  size_t counted = 0;
  msgpack::parse(static_cast<const char*>(data), size, counted, counter);
  if (counter.over_budget())
    return Status::protocol(fmt::format("ipc message holds more than {} values", kMaxObjects));
  msgpack::object_handle oh;
  try {
    msgpack::unpack_limit limit(kMaxArray, kMaxMap, kMaxString, /*bin*/ 0, /*ext*/ 0, kMaxDepth);
    size_t off = 0;
    oh = msgpack::unpack(static_cast<const char*>(data), size, off, nullptr, nullptr, limit);
    if (off != size)
      return Status::protocol(fmt::format("{} trailing bytes after ipc message", size - off));
  } catch (const msgpack::size_overflow& e) {
    return Status::protocol(fmt::format(
        "ipc message exceeds a size limit ({}; limits: arrays {}, maps {}, strings {}, depth {})",
        e.what(), kMaxArray, kMaxMap, kMaxString, kMaxDepth));
  } catch (const std::exception& e) {
    return Status::protocol(fmt::format("ipc message is not valid msgpack: {}", e.what()));
  }
  const msgpack::object& o = oh.get();
  if (o.type != msgpack::type::MAP)
    return Status::protocol(fmt::format("ipc message is {}, not a map", type_word(o)));

  // The envelope first: the version decides how the rest is read.
  const msgpack::object* v = nullptr;
  const msgpack::object* kind = nullptr;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR)
      return Status::protocol(
          fmt::format("ipc message has a key that is {}, not a string", type_word(kv.key)));
    if (as_view(kv.key) == "v" && !v) v = &kv.val;
    if (as_view(kv.key) == "kind" && !kind) kind = &kv.val;
  }
  if (!v) return Status::protocol("ipc message lacks the protocol version 'v'");
  if (v->type != msgpack::type::POSITIVE_INTEGER)
    return Status::protocol(
        fmt::format("ipc message field 'v' is not an unsigned integer (it is {})", type_word(*v)));
  if (v->via.u64 != kProtocolVersion)
    return Status::protocol(
        fmt::format("ipc protocol version {}, this side speaks {}", v->via.u64, kProtocolVersion));
  if (!kind) return Status::protocol("ipc message lacks 'kind'");
  if (kind->type != msgpack::type::STR)
    return Status::protocol(
        fmt::format("ipc message field 'kind' is not a string (it is {})", type_word(*kind)));
  return decode_kind(as_view(*kind), o);
}

}  // namespace gossip::proto::ipc

#include "proto/inspect.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <msgpack.hpp>

#include "proto/message.h"
#include "proto/printable.h"

namespace gossip::proto::inspect {
namespace {

// msgpack-c writes a float that holds an integer as that integer, through a cast that
// is undefined from 2^64 on (a hostile peer's 1.8e19 re-encoded here); reports write
// their floats as msgpack floats, always.
class Packer : public msgpack::packer<msgpack::sbuffer> {
 public:
  explicit Packer(msgpack::sbuffer& buf) : msgpack::packer<msgpack::sbuffer>(buf), buf_(buf) {}
  void float32(float v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    char out[5] = {static_cast<char>(0xca)};
    for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>(bits >> (24 - 8 * i));
    buf_.write(out, sizeof out);
  }
  void float64(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    char out[9] = {static_cast<char>(0xcb)};
    for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
    buf_.write(out, sizeof out);
  }

 private:
  msgpack::sbuffer& buf_;
};

// Each record is a msgpack array of its fields in declaration order; a nested record
// is an array too. Positional, so that a report of 64 links stays small.
void put(Packer& pk, uint64_t v) { pk.pack_uint64(v); }
void put(Packer& pk, uint32_t v) { pk.pack_uint32(v); }
void put(Packer& pk, double v) { pk.float64(v); }
void put(Packer& pk, float v) { pk.float32(v); }
void put(Packer& pk, bool v) { v ? pk.pack_true() : pk.pack_false(); }
void put(Packer& pk, const std::string& v) {
  const std::string s = printable_text(v);
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
void put(Packer& pk, const Facts& f);
void put(Packer& pk, const Link& l);
template <class T>
void put(Packer& pk, const std::vector<T>& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const T& x : v) put(pk, x);
}
void put(Packer& pk, const Facts& f) {
  pk.pack_array(3);
  put(pk, f.version), put(pk, f.strategy), put(pk, f.curve);
}
void put(Packer& pk, const Link& l) {
  pk.pack_array(23);
  put(pk, l.to), put(pk, l.endpoint), put(pk, uint32_t{static_cast<uint8_t>(l.connect)});
  put(pk, l.connect_error), put(pk, l.connect_ms);
  put(pk, uint32_t{static_cast<uint8_t>(l.handshake)});
  put(pk, l.connects), put(pk, l.disconnects), put(pk, l.handshake_failures);
  put(pk, l.pings), put(pk, l.pongs), put(pk, l.rtt_ms), put(pk, l.clock_offset_ms);
  put(pk, l.clock_error_ms), put(pk, l.tcp_rtt_ms), put(pk, l.segments_sent);
  put(pk, l.segments_retransmitted), put(pk, l.bandwidth_bytes_per_s);
  put(pk, l.version), put(pk, l.strategy), put(pk, l.silent_ms), put(pk, l.refused);
  put(pk, l.last_refusal);
}

template <class T>
std::string encode_record(const T& r) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  put(pk, r);
  return std::string(buf.data(), buf.size());
}

// Reads one record's array positionally; the first failure sticks and names the field.
class Reader {
 public:
  Reader(const msgpack::object& o, std::string where, size_t fields) : where_(std::move(where)) {
    if (o.type != msgpack::type::ARRAY || o.via.array.size != fields) {
      fail(fmt::format("is not an array of {} fields", fields));
      return;
    }
    items_ = o.via.array.ptr;
    size_ = o.via.array.size;
  }
  const Status& status() const { return status_; }

  const msgpack::object* next(const char* name) {
    if (!status_) return nullptr;
    if (at_ >= size_) return fail(fmt::format("lacks '{}'", name)), nullptr;
    name_ = name;
    return &items_[at_++];
  }
  void read(const char* name, uint64_t& v) {
    const auto* o = next(name);
    if (!o) return;
    if (o->type != msgpack::type::POSITIVE_INTEGER) return fail_field("an unsigned integer");
    v = o->via.u64;
  }
  void read(const char* name, uint32_t& v) {
    uint64_t x = 0;
    read(name, x);
    if (status_ && x > std::numeric_limits<uint32_t>::max()) return fail_field("a 32-bit integer");
    v = static_cast<uint32_t>(x);
  }
  // A measurement: finite, and >= 0 or kNone; a clock offset may be negative.
  void read(const char* name, double& v, bool signed_ok = false) {
    const auto* o = next(name);
    if (!o) return;
    double x = 0;
    if (o->type == msgpack::type::FLOAT64 || o->type == msgpack::type::FLOAT32)
      x = o->via.f64;
    else if (o->type == msgpack::type::POSITIVE_INTEGER)
      x = static_cast<double>(o->via.u64);
    else if (o->type == msgpack::type::NEGATIVE_INTEGER)
      x = static_cast<double>(o->via.i64);
    else
      return fail_field("a number");
    if (!std::isfinite(x) || (!signed_ok && x < 0 && x != kNone))
      return fail_field(fmt::format("finite and >= 0 (it is {})", x));
    v = x;
  }
  void read(const char* name, bool& v) {
    const auto* o = next(name);
    if (!o) return;
    if (o->type != msgpack::type::BOOLEAN) return fail_field("a boolean");
    v = o->via.boolean;
  }
  void read(const char* name, std::string& v) {
    const auto* o = next(name);
    if (!o) return;
    if (o->type != msgpack::type::STR) return fail_field("a string");
    v = printable_text(std::string_view(o->via.str.ptr, o->via.str.size));
  }
  template <class E>
  void read_enum(const char* name, E& v, uint8_t max) {
    uint32_t x = 0;
    read(name, x);
    if (status_ && x > max) return fail_field(fmt::format("a known value (it is {})", x));
    v = static_cast<E>(x);
  }
  // An array of at most `limit` elements, each read by `each(object, index)`.
  template <class Each>
  void read_array(const char* name, size_t limit, Each each) {
    const auto* o = next(name);
    if (!o) return;
    if (o->type != msgpack::type::ARRAY) return fail_field("an array");
    if (o->via.array.size > limit)
      return fail_field(fmt::format("at most {} long (it has {})", limit, o->via.array.size));
    for (uint32_t i = 0; i < o->via.array.size && status_; ++i) {
      Status st = each(o->via.array.ptr[i], i);
      if (!st) status_ = st;
    }
  }
  std::string field_where() const { return fmt::format("{}.{}", where_, name_); }

 private:
  void fail(const std::string& why) {
    if (status_) status_ = Status::protocol(fmt::format("{} {}", where_, why));
  }
  void fail_field(const std::string& what) {
    if (status_) status_ = Status::protocol(fmt::format("{}.{} must be {}", where_, name_, what));
  }
  std::string where_;
  const char* name_ = "";
  const msgpack::object* items_ = nullptr;
  size_t size_ = 0;
  size_t at_ = 0;
  Status status_;
};

Status read_facts(const msgpack::object& o, const std::string& where, Facts& f) {
  Reader r(o, where, 3);
  r.read("version", f.version), r.read("strategy", f.strategy), r.read("curve", f.curve);
  return r.status();
}

Status read_link(const msgpack::object& o, const std::string& where, Link& l) {
  Reader r(o, where, 23);
  r.read("to", l.to), r.read("endpoint", l.endpoint);
  r.read_enum("connect", l.connect, kMaxConnect);
  r.read("connect_error", l.connect_error), r.read("connect_ms", l.connect_ms);
  r.read_enum("handshake", l.handshake, kMaxHandshake);
  r.read("connects", l.connects), r.read("disconnects", l.disconnects);
  r.read("handshake_failures", l.handshake_failures), r.read("pings", l.pings);
  r.read("pongs", l.pongs), r.read("rtt_ms", l.rtt_ms);
  r.read("clock_offset_ms", l.clock_offset_ms, /*signed_ok=*/true);
  r.read("clock_error_ms", l.clock_error_ms), r.read("tcp_rtt_ms", l.tcp_rtt_ms);
  r.read("segments_sent", l.segments_sent);
  r.read("segments_retransmitted", l.segments_retransmitted);
  r.read("bandwidth_bytes_per_s", l.bandwidth_bytes_per_s), r.read("version", l.version);
  r.read("strategy", l.strategy), r.read("silent_ms", l.silent_ms), r.read("refused", l.refused);
  r.read("last_refusal", l.last_refusal);
  if (r.status() && l.pongs > l.pings)
    return Status::protocol(fmt::format("{} has {} pongs to {} pings", where, l.pongs, l.pings));
  return r.status();
}

// Unpacks one record of at most kMaxInspectReportBytes within tight limits.
template <class Read>
Status unpack(const void* data, size_t size, const char* what, Read read) {
  if (size == 0) return Status::protocol(fmt::format("empty {}", what));
  if (size > kMaxInspectReportBytes)
    return Status::protocol(
        fmt::format("{} of {} bytes (at most {})", what, size, kMaxInspectReportBytes));
  const msgpack::unpack_limit limit(/*array*/ kMaxMembers, /*map*/ 0, /*str*/ 4096, /*bin*/ 0,
                                    /*ext*/ 0, /*depth*/ 4);
  msgpack::object_handle oh;
  size_t off = 0;
  try {
    oh = msgpack::unpack(static_cast<const char*>(data), size, off, nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    return Status::protocol(
        fmt::format("{} is not valid msgpack within limits: {}", what, e.what()));
  }
  if (off != size)
    return Status::protocol(fmt::format("{} has {} trailing bytes", what, size - off));
  return read(oh.get());
}

}  // namespace

const char* connect_name(Connect c) {
  switch (c) {
    case Connect::kOk:
      return "ok";
    case Connect::kRefused:
      return "refused";
    case Connect::kTimedOut:
      return "timed out";
    case Connect::kUnreachable:
      return "unreachable";
    case Connect::kUnresolved:
      return "unresolved";
    case Connect::kFailed:
      return "failed";
    case Connect::kNotTried:
      return "not tried";
  }
  return "?";
}

const char* handshake_name(Handshake h) {
  switch (h) {
    case Handshake::kNone:
      return "never connected";
    case Handshake::kOk:
      return "ok";
    case Handshake::kRefused:
      return "key refused";
    case Handshake::kFailed:
      return "failed";
    case Handshake::kPending:
      return "not completed";
    case Handshake::kLost:
      return "disconnected";
  }
  return "?";
}

std::string printable_text(std::string_view s) { return proto::printable_text(s, kMaxText); }

std::string encode(const Facts& f) { return encode_record(f); }

std::string encode(const LinkRow& r) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(4);
  put(pk, r.node), put(pk, r.facts), put(pk, r.links), put(pk, r.refused_keys);
  return std::string(buf.data(), buf.size());
}

std::string encode(const MemberStatus& s) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(13);
  put(pk, s.node), put(pk, s.state), put(pk, s.round), put(pk, s.step), put(pk, s.trainers);
  put(pk, s.sent_bytes), put(pk, s.received_bytes), put(pk, s.round_ms);
  put(pk, s.since_round_s), put(pk, s.last_error), put(pk, s.last_error_age_s);
  put(pk, s.version), put(pk, s.samples);
  return std::string(buf.data(), buf.size());
}

std::string encode(const Summary& s) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(4);
  put(pk, s.asked), put(pk, s.members), put(pk, s.silent), put(pk, s.elapsed_s);
  return std::string(buf.data(), buf.size());
}

Result<Facts> decode_facts(const void* data, size_t size) {
  Facts f;
  GOSSIP_RETURN_IF_ERROR(unpack(data, size, "pong facts", [&](const msgpack::object& o) {
    return read_facts(o, "facts", f);
  }));
  return f;
}

Result<LinkRow> decode_links(const void* data, size_t size) {
  LinkRow row;
  GOSSIP_RETURN_IF_ERROR(unpack(data, size, "link row", [&](const msgpack::object& o) {
    Reader r(o, "row", 4);
    r.read("node", row.node);
    if (const auto* f = r.next("facts"); f)
      GOSSIP_RETURN_IF_ERROR(read_facts(*f, "row.facts", row.facts));
    r.read_array("links", kMaxMembers, [&](const msgpack::object& e, uint32_t i) {
      Link l;
      GOSSIP_RETURN_IF_ERROR(read_link(e, fmt::format("row.links[{}]", i), l));
      row.links.push_back(std::move(l));
      return Status::ok();
    });
    r.read_array("refused_keys", 64, [&](const msgpack::object& e, uint32_t i) {
      if (e.type != msgpack::type::STR)
        return Status::protocol(fmt::format("row.refused_keys[{}] must be a string", i));
      row.refused_keys.push_back(printable_text(std::string_view(e.via.str.ptr, e.via.str.size)));
      return Status::ok();
    });
    return r.status();
  }));
  return row;
}

Result<MemberStatus> decode_status(const void* data, size_t size) {
  MemberStatus s;
  GOSSIP_RETURN_IF_ERROR(unpack(data, size, "member status", [&](const msgpack::object& o) {
    Reader r(o, "status", 13);
    r.read("node", s.node), r.read("state", s.state), r.read("round", s.round);
    r.read("step", s.step), r.read("trainers", s.trainers), r.read("sent_bytes", s.sent_bytes);
    r.read("received_bytes", s.received_bytes), r.read("round_ms", s.round_ms);
    r.read("since_round_s", s.since_round_s), r.read("last_error", s.last_error);
    r.read("last_error_age_s", s.last_error_age_s), r.read("version", s.version);
    r.read_array("samples", kMaxSamples, [&](const msgpack::object& e, uint32_t i) {
      // msgpack writes a float that holds an integer as an integer.
      double v = 0;
      if (e.type == msgpack::type::FLOAT32 || e.type == msgpack::type::FLOAT64)
        v = e.via.f64;
      else if (e.type == msgpack::type::POSITIVE_INTEGER)
        v = static_cast<double>(e.via.u64);
      else if (e.type == msgpack::type::NEGATIVE_INTEGER)
        v = static_cast<double>(e.via.i64);
      else
        return Status::protocol(fmt::format("status.samples[{}] must be a number", i));
      if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
        return Status::protocol(fmt::format("status.samples[{}] is not a finite float", i));
      s.samples.push_back(static_cast<float>(v));
      return Status::ok();
    });
    return r.status();
  }));
  return s;
}

Result<Summary> decode_summary(const void* data, size_t size) {
  Summary s;
  GOSSIP_RETURN_IF_ERROR(unpack(data, size, "inspect summary", [&](const msgpack::object& o) {
    Reader r(o, "summary", 4);
    r.read("asked", s.asked);
    const auto ids = [](std::vector<uint32_t>& out, const char* name) {
      return [&out, name](const msgpack::object& e, uint32_t i) {
        if (e.type != msgpack::type::POSITIVE_INTEGER || e.via.u64 > UINT32_MAX)
          return Status::protocol(fmt::format("summary.{}[{}] must be a node id", name, i));
        out.push_back(static_cast<uint32_t>(e.via.u64));
        return Status::ok();
      };
    };
    r.read_array("members", kMaxMembers, ids(s.members, "members"));
    r.read_array("silent", kMaxMembers, ids(s.silent, "silent"));
    r.read("elapsed_s", s.elapsed_s);
    return r.status();
  }));
  return s;
}

}  // namespace gossip::proto::inspect

#include "proto/message.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <msgpack.hpp>
#include <string_view>
#include <type_traits>

namespace gossip::proto {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kHello:
      return "hello";
    case Kind::kModelChunk:
      return "model-chunk";
    case Kind::kBye:
      return "bye";
    case Kind::kRingAddress:
      return "ring-address";
    case Kind::kNcclId:
      return "nccl-id";
    case Kind::kHeartbeat:
      return "heartbeat";
    case Kind::kJoin:
      return "join";
    case Kind::kStateOffer:
      return "state-offer";
    case Kind::kStateRequest:
      return "state-request";
    case Kind::kStateChunk:
      return "state-chunk";
    case Kind::kRingProbe:
      return "ring-probe";
    case Kind::kCopyRequest:
      return "copy-request";
    case Kind::kPsPush:
      return "ps-push";
    case Kind::kPsPull:
      return "ps-pull";
    case Kind::kPsParams:
      return "ps-params";
    case Kind::kPsReplica:
      return "ps-replica";
    case Kind::kInitialModel:
      return "initial-model";
    case Kind::kTuneReport:
      return "tune-report";
    case Kind::kInspect:
      return "inspect";
    case Kind::kMember:
      return "member";
    case Kind::kRingNorms:
      return "ring-norms";
  }
  return "?";
}

const char* codec_name(CodecId c) {
  switch (c) {
    case CodecId::kNone:
      return "none";
    case CodecId::kFp16:
      return "fp16";
    case CodecId::kBf16:
      return "bf16";
    case CodecId::kInt8:
      return "int8";
    case CodecId::kQsgd:
      return "qsgd";
    case CodecId::kSign:
      return "sign";
    case CodecId::kTopk:
      return "topk";
    case CodecId::kRandk:
      return "randk";
    case CodecId::kChain:
      return "chain";
  }
  return "?";
}

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;
constexpr uint32_t kEnvelopeFields = 7;

// A msgpack float64, whatever its value. pack_double sends integral doubles as
// integers: -0.0 would arrive as +0, and 2^64 is converted to uint64_t out of range,
// undefined behaviour (both found by fuzz/wire_header_fuzzer.cc).
void pack_float64(msgpack::sbuffer& buf, double d) {
  const auto bits = std::bit_cast<uint64_t>(d);
  char out[9] = {static_cast<char>(0xcb)};
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  buf.write(out, sizeof out);
}

struct FieldCounter {
  uint32_t n = 0;
  template <class T>
  void operator()(const char*, const T&) {
    ++n;
  }
};

template <class T>
uint32_t field_count() {
  FieldCounter c;
  T{}.fields(c);
  return c.n;
}

struct FieldPacker {
  msgpack::sbuffer& buf;
  Packer pk{buf};
  void operator()(const char*, bool v) { v ? pk.pack_true() : pk.pack_false(); }
  void operator()(const char*, double v) { pack_float64(buf, v); }
  void operator()(const char*, CodecId v) { pk.pack_uint8(static_cast<uint8_t>(v)); }
  template <class T>
  requires std::is_unsigned_v<T>
  void operator()(const char*, T v) { pk.pack_uint64(v); }
};

// Reads one body's fields in order, each of exactly its type; the first problem is
// kept and named.
struct FieldReader {
  const msgpack::object* items;
  const char* kind;
  uint32_t next = 0;
  Status status;

  const msgpack::object* take() {
    if (!status) return nullptr;
    return &items[next++];
  }
  void bad(const char* name, std::string_view want) {
    status = Status::protocol(fmt::format("{} field '{}' is not {}", kind, name, want));
  }
  void operator()(const char* name, bool& v) {
    const auto* o = take();
    if (!o) return;
    if (o->type != msgpack::type::BOOLEAN) return bad(name, "a boolean");
    v = o->via.boolean;
  }
  void operator()(const char* name, double& v) {
    const auto* o = take();
    if (!o) return;
    // msgpack-cxx may hand back an integral float as an integer (0.0 -> 0).
    if (o->type == msgpack::type::FLOAT64 || o->type == msgpack::type::FLOAT32)
      v = o->via.f64;
    else if (o->type == msgpack::type::POSITIVE_INTEGER)
      v = static_cast<double>(o->via.u64);
    else if (o->type == msgpack::type::NEGATIVE_INTEGER)
      v = static_cast<double>(o->via.i64);
    else
      return bad(name, "a number");
    if (!std::isfinite(v) || v < 0.0)
      status = Status::protocol(fmt::format("{} {} {} is not finite and >= 0", kind, name, v));
  }
  void operator()(const char* name, CodecId& v) {
    const auto* o = take();
    if (!o) return;
    if (o->type != msgpack::type::POSITIVE_INTEGER) return bad(name, "an unsigned integer");
    if (o->via.u64 > kMaxCodecId)
      return void(status = Status::protocol(fmt::format("unknown codec id {}", o->via.u64)));
    v = static_cast<CodecId>(o->via.u64);
  }
  template <class T>
  requires std::is_unsigned_v<T>
  void operator()(const char* name, T& v) {
    const auto* o = take();
    if (!o) return;
    if (o->type != msgpack::type::POSITIVE_INTEGER) return bad(name, "an unsigned integer");
    if (o->via.u64 > std::numeric_limits<T>::max())
      return void(status = Status::protocol(
                      fmt::format("{} field '{}' is {}, out of range", kind, name, o->via.u64)));
    v = static_cast<T>(o->via.u64);
  }
};

template <size_t I = 0>
Body body_of_kind(size_t index) {
  if constexpr (I + 1 < std::variant_size_v<Body>)
    if (index != I) return body_of_kind<I + 1>(index);
  return Body(std::in_place_index<I>);
}

// The rules of each kind beyond its fields' types.
Status check_payload_less(const Envelope& e) {
  if (e.length != 0)
    return Status::protocol(
        fmt::format("{} carries no payload but says length={}", kind_name(e.kind), e.length));
  return Status::ok();
}

Status check_slice(const Envelope& e, uint64_t offset, uint64_t numel, CodecId codec) {
  const char* kind = kind_name(e.kind);
  if (numel == 0) return Status::protocol(fmt::format("{} with numel=0", kind));
  // Divide rather than multiply: numel * 4 wraps for numel >= 2^62.
  if (codec == CodecId::kNone &&
      (e.length % sizeof(float) != 0 || e.length / sizeof(float) != numel))
    return Status::protocol(fmt::format("{} says numel={} but length={} (raw fp32 needs numel * 4)",
                                        kind, numel, e.length));
  if (codec != CodecId::kNone && e.length == 0)
    return Status::protocol(fmt::format("{} {} with an empty payload", codec_name(codec), kind));
  if (offset > UINT64_MAX - numel)
    return Status::protocol(fmt::format("{} offset overflows", kind));
  return Status::ok();
}

Status check(const Envelope& e, const Body& body) {
  return std::visit(
      [&](const auto& m) -> Status {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, ModelChunk>) {
          return check_slice(e, m.offset, m.numel, m.codec);
        } else if constexpr (std::is_same_v<T, PsPush> || std::is_same_v<T, PsParams>) {
          return check_slice(e, m.offset, m.numel, m.codec);
        } else if constexpr (std::is_same_v<T, StateChunk>) {
          return check_slice(e, m.offset, m.numel, CodecId::kNone);
        } else if constexpr (std::is_same_v<T, PsReplica>) {
          if (m.what > PsReplica::kRequest)
            return Status::protocol(fmt::format("ps-replica of unknown what={}", m.what));
          if (m.what == PsReplica::kRequest) return check_payload_less(e);
          if (m.what == PsReplica::kUpdate && m.divisor == 0)
            return Status::protocol("ps-replica with divisor=0");
          return check_slice(e, m.offset, m.numel, CodecId::kNone);
        } else if constexpr (std::is_same_v<T, InitialModel>) {
          if (m.what > InitialModel::kDigest)
            return Status::protocol(fmt::format("initial-model of unknown what={}", m.what));
          if (m.what != InitialModel::kChunk) return check_payload_less(e);
          return check_slice(e, m.offset, m.numel, CodecId::kNone);
        } else if constexpr (std::is_same_v<T, TuneReport>) {
          if (m.samples > kMaxTuneSamples)
            return Status::protocol(
                fmt::format("tune-report of {} samples (at most {})", m.samples, kMaxTuneSamples));
          if (e.length != m.samples * sizeof(float))
            return Status::protocol(fmt::format(
                "tune-report of {} samples with a payload of {} bytes", m.samples, e.length));
          return Status::ok();
        } else if constexpr (std::is_same_v<T, Inspect>) {
          if (m.what > Inspect::kStatus)
            return Status::protocol(fmt::format("inspect of unknown what={}", m.what));
          if (m.what == Inspect::kAskLinks || m.what == Inspect::kAskStatus)
            return check_payload_less(e);
          const uint64_t limit =
              m.what == Inspect::kPing ? kMaxInspectProbeBytes : kMaxInspectReportBytes;
          if (e.length > limit)
            return Status::protocol(
                fmt::format("inspect what={} with a payload of {} bytes (at "
                            "most {})",
                            m.what, e.length, limit));
          return Status::ok();
        } else if constexpr (std::is_same_v<T, NcclId>) {
          if (e.length != kNcclIdBytes)
            return Status::protocol(fmt::format("nccl-id must carry exactly {} bytes, says {}",
                                                kNcclIdBytes, e.length));
          return Status::ok();
        } else if constexpr (std::is_same_v<T, Member>) {
          if (m.what > Member::kLastWhat)
            return Status::protocol(fmt::format("member of unknown what={}", m.what));
          if (m.what == Member::kSync) return check_payload_less(e);
          if (e.length == 0 || e.length > kMaxMemberBytes)
            return Status::protocol(
                fmt::format("member what={} with a payload of {} bytes (1 to {})", m.what, e.length,
                            kMaxMemberBytes));
          return Status::ok();
        } else if constexpr (std::is_same_v<T, RingNorms>) {
          if (m.chunks == 0 || m.chunks > kMaxRingNormChunks)
            return Status::protocol(
                fmt::format("ring-norms of {} chunks (1 to {})", m.chunks, kMaxRingNormChunks));
          if (e.length != m.chunks * sizeof(float))
            return Status::protocol(fmt::format(
                "ring-norms of {} chunks with a payload of {} bytes", m.chunks, e.length));
          return Status::ok();
        } else if constexpr (std::is_same_v<T, RingProbe>) {
          if (m.merge > RingProbe::kMerging)
            return Status::protocol(fmt::format("ring-probe of unknown merge={}", m.merge));
          if (m.members > kMaxRingProbeMembers)
            return Status::protocol(fmt::format("ring-probe of {} members (at most {})", m.members,
                                                kMaxRingProbeMembers));
          if (e.length != m.members * sizeof(uint32_t))
            return Status::protocol(fmt::format(
                "ring-probe of {} members with a payload of {} bytes", m.members, e.length));
          return Status::ok();
        } else if constexpr (std::is_same_v<T, RingAddress>) {
          if (m.port == 0) return Status::protocol("ring-address with port 0");
          if (m.transport > RingAddress::kRdma)
            return Status::protocol(
                fmt::format("ring-address of unknown transport={}", m.transport));
          return check_payload_less(e);
        } else if constexpr (std::is_same_v<T, StateOffer>) {
          if (m.has_state && e.round == 0)
            return Status::protocol("state-offer of a state before round 0");
          if (m.has_state != (m.numel > 0))
            return Status::protocol(
                fmt::format("state-offer with has_state={} of {} elements", m.has_state, m.numel));
          if (!m.has_state) return check_payload_less(e);
          if (m.chunk_elems == 0) return Status::protocol("state-offer with chunk_elems=0");
          const uint64_t chunks = m.numel / m.chunk_elems + (m.numel % m.chunk_elems != 0);
          if (e.length % kStateHashBytes != 0 || e.length / kStateHashBytes != chunks)
            return Status::protocol(fmt::format(
                "state-offer of {} elements in chunks of {} needs a manifest of {} hashes, its "
                "payload has {} bytes",
                m.numel, m.chunk_elems, chunks, e.length));
          return Status::ok();
        } else {
          return check_payload_less(e);
        }
      },
      body);
}

}  // namespace

std::string encode_head(uint32_t from, uint64_t round, const Body& body, uint64_t length,
                        uint64_t epoch) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(kEnvelopeFields);
  pk.pack_uint32(kWireMagic);
  pk.pack_uint32(kWireVersion);
  pk.pack_uint8(static_cast<uint8_t>(kind_of(body)));
  pk.pack_uint32(from);
  pk.pack_uint64(round);
  pk.pack_uint64(length);
  pk.pack_uint64(epoch);
  std::visit(
      [&](auto m) {
        pk.pack_array(field_count<decltype(m)>());
        m.fields(FieldPacker{buf});
      },
      body);
  return std::string(buf.data(), buf.size());
}

Result<Message> decode_head(const void* data, size_t size) {
  if (size == 0) return Status::protocol("empty header frame");
  if (size > kMaxHeaderBytes)
    return Status::protocol(
        fmt::format("header frame is {} bytes, limit {}", size, kMaxHeaderBytes));
  const char* bytes = static_cast<const char*>(data);
  // The envelope is read with loose limits (the frame's size bounds what it can
  // hold), so that another version's envelope, whatever it carries after its version,
  // and a version-1 header (a map) are named rather than refused as garbage. This
  // version's body is a flat array of a few scalars.
  const msgpack::unpack_limit loose(/*array*/ 64, /*map*/ 64, /*str*/ kMaxHeaderBytes,
                                    /*bin*/ kMaxHeaderBytes, /*ext*/ kMaxHeaderBytes, /*depth*/ 4);
  const msgpack::unpack_limit tight(/*array*/ 16, /*map*/ 0, /*str*/ 16, /*bin*/ 0, /*ext*/ 0,
                                    /*depth*/ 2);
  size_t off = 0;
  msgpack::object_handle env;
  try {
    env = msgpack::unpack(bytes, size, off, nullptr, nullptr, loose);
  } catch (const std::exception& e) {
    return Status::protocol(fmt::format("header is not valid msgpack: {}", e.what()));
  }
  const msgpack::object& eo = env.get();
  if (eo.type == msgpack::type::MAP)
    return Status::protocol(fmt::format(
        "a wire version 1 header (gossipd before typed messages); this daemon speaks version {}: "
        "run one gossipd version on every node",
        kWireVersion));
  if (eo.type != msgpack::type::ARRAY || eo.via.array.size < 2)
    return Status::protocol("header does not start with an envelope array");
  // The envelope's fields, all unsigned; the magic and version are checked before
  // anything else is read, so that a message of another version is named, not misread.
  const auto& ev = eo.via.array;
  uint64_t field[kEnvelopeFields] = {};
  constexpr const char* kNames[kEnvelopeFields] = {"magic", "version", "kind", "from",
                                                   "round", "length",  "epoch"};
  for (uint32_t i = 0; i < std::min(ev.size, kEnvelopeFields); ++i) {
    if (ev.ptr[i].type != msgpack::type::POSITIVE_INTEGER)
      return Status::protocol(
          fmt::format("envelope field '{}' is not an unsigned integer", kNames[i]));
    field[i] = ev.ptr[i].via.u64;
  }
  if (field[0] != kWireMagic) return Status::protocol("header lacks the gossipd magic");
  if (field[1] != kWireVersion)
    return Status::protocol(fmt::format(
        "wire version {} ({} than this daemon's {}): run one gossipd version on every node",
        field[1], field[1] > kWireVersion ? "newer" : "older", kWireVersion));
  if (ev.size != kEnvelopeFields)
    return Status::protocol(
        fmt::format("envelope has {} fields, expected {}", ev.size, kEnvelopeFields));

  Message m;
  Envelope& e = m.envelope;
  if (field[2] < 1 || field[2] > kMaxKind)
    return Status::protocol(fmt::format("unknown message kind {}", field[2]));
  e.kind = static_cast<Kind>(field[2]);
  if (field[3] > UINT32_MAX) return Status::protocol("envelope 'from' out of range");
  e.from = static_cast<uint32_t>(field[3]);
  e.round = field[4];
  e.length = field[5];
  e.epoch = field[6];
  if (e.length > kMaxPayloadBytes)
    return Status::protocol(
        fmt::format("payload of {} bytes exceeds limit {}", e.length, kMaxPayloadBytes));

  if (off == size) return Status::protocol(fmt::format("{} lacks its body", kind_name(e.kind)));
  msgpack::object_handle body;
  try {
    body = msgpack::unpack(bytes, size, off, nullptr, nullptr, tight);
  } catch (const std::exception& ex) {
    return Status::protocol(
        fmt::format("{} body is not valid msgpack: {}", kind_name(e.kind), ex.what()));
  }
  if (off != size)
    return Status::protocol(fmt::format("{} trailing bytes after the body", size - off));
  m.body = body_of_kind(field[2] - 1);
  const msgpack::object& bo = body.get();
  Status st = std::visit(
      [&](auto& msg) -> Status {
        using T = std::decay_t<decltype(msg)>;
        const uint32_t want = field_count<T>();
        if (bo.type != msgpack::type::ARRAY || bo.via.array.size != want)
          return Status::protocol(
              fmt::format("{} body must be an array of {} fields", kind_name(e.kind), want));
        FieldReader reader{bo.via.array.ptr, kind_name(e.kind), 0, Status::ok()};
        msg.fields(reader);
        return reader.status;
      },
      m.body);
  GOSSIP_RETURN_IF_ERROR(st);
  GOSSIP_RETURN_IF_ERROR(check(e, m.body));
  return m;
}

Status validate_payload(const Envelope& e, size_t payload_frames, size_t payload_bytes) {
  const size_t want_frames = e.length == 0 ? 0 : 1;
  if (payload_frames != want_frames)
    return Status::protocol(fmt::format("{} has {} payload frames, expected {}", kind_name(e.kind),
                                        payload_frames, want_frames));
  if (payload_bytes != e.length)
    return Status::protocol(fmt::format("{} payload is {} bytes but its envelope says {}",
                                        kind_name(e.kind), payload_bytes, e.length));
  return Status::ok();
}

}  // namespace gossip::proto

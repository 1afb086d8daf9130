#include "proto/message.h"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cmath>
#include <msgpack.hpp>
#include <optional>
#include <string_view>

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
  }
  return "?";
}

namespace {

constexpr std::array<std::string_view, 11> kKeys = {
    "v", "kind", "from", "round", "seq", "tensor", "offset", "codec", "numel", "bytes", "layout"};

// A msgpack float64, whatever its value. pack_double sends integral doubles as
// integers: -0.0 would arrive as +0, and 2^64 (a weight decode_header accepts) is
// converted to uint64_t out of range, undefined behaviour (both found by
// fuzz/wire_header_fuzzer.cc).
void pack_float64(msgpack::sbuffer& buf, double d) {
  const auto bits = std::bit_cast<uint64_t>(d);
  char out[9] = {static_cast<char>(0xcb)};
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  buf.write(out, sizeof out);
}

}  // namespace

std::string encode_header(const Header& h) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  const bool weighted = h.weight != 1.0;
  pk.pack_map(kKeys.size() + (weighted ? 1 : 0));
  pk.pack("v"), pk.pack(h.v);
  pk.pack("kind"), pk.pack(static_cast<uint32_t>(h.kind));
  pk.pack("from"), pk.pack(h.from);
  pk.pack("round"), pk.pack(h.round);
  pk.pack("seq"), pk.pack(h.seq);
  pk.pack("tensor"), pk.pack(h.tensor);
  pk.pack("offset"), pk.pack(h.offset);
  pk.pack("codec"), pk.pack(static_cast<uint32_t>(h.codec));
  pk.pack("numel"), pk.pack(h.numel);
  pk.pack("bytes"), pk.pack(h.bytes);
  pk.pack("layout"), pk.pack(h.layout);
  if (weighted) pk.pack("weight"), pack_float64(buf, h.weight);
  return std::string(buf.data(), buf.size());
}

Result<Header> decode_header(const void* data, size_t size) {
  if (size == 0) return Status::protocol("empty header frame");
  if (size > kMaxHeaderBytes)
    return Status::protocol(
        fmt::format("header frame is {} bytes, limit {}", size, kMaxHeaderBytes));
  msgpack::object_handle oh;
  try {
    // Tight limits: a header is one flat map of small integers.
    msgpack::unpack_limit limit(/*array*/ 0, /*map*/ kKeys.size() + 1, /*str*/ 16, /*bin*/ 0,
                                /*ext*/ 0, /*depth*/ 2);
    size_t off = 0;
    oh = msgpack::unpack(static_cast<const char*>(data), size, off, nullptr, nullptr, limit);
    if (off != size)
      return Status::protocol(fmt::format("{} trailing bytes after header", size - off));
  } catch (const std::exception& e) {
    return Status::protocol(fmt::format("header is not valid msgpack: {}", e.what()));
  }
  const msgpack::object& o = oh.get();
  if (o.type != msgpack::type::MAP) return Status::protocol("header is not a msgpack map");

  std::array<bool, kKeys.size()> seen{};
  std::array<uint64_t, kKeys.size()> val{};
  std::optional<double> weight;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) return Status::protocol("header key is not a string");
    std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
    if (key == "weight") {
      if (weight) return Status::protocol("duplicate header key 'weight'");
      // msgpack-cxx hands integral floats back as integers (0.0 -> 0).
      if (kv.val.type == msgpack::type::POSITIVE_INTEGER)
        weight = static_cast<double>(kv.val.via.u64);
      else if (kv.val.type == msgpack::type::FLOAT64 || kv.val.type == msgpack::type::FLOAT32)
        weight = kv.val.via.f64;
      else
        return Status::protocol("header key 'weight' is not a number");
      if (!std::isfinite(*weight) || *weight < 0.0)
        return Status::protocol(fmt::format("header weight {} is not finite and >= 0", *weight));
      continue;
    }
    size_t idx = kKeys.size();
    for (size_t k = 0; k < kKeys.size(); ++k)
      if (kKeys[k] == key) idx = k;
    if (idx == kKeys.size()) return Status::protocol(fmt::format("unknown header key '{}'", key));
    if (seen[idx]) return Status::protocol(fmt::format("duplicate header key '{}'", key));
    if (kv.val.type != msgpack::type::POSITIVE_INTEGER)
      return Status::protocol(fmt::format("header key '{}' is not an unsigned integer", key));
    seen[idx] = true;
    val[idx] = kv.val.via.u64;
  }
  for (size_t k = 0; k < kKeys.size(); ++k)
    if (!seen[k]) return Status::protocol(fmt::format("header lacks key '{}'", kKeys[k]));

  Header h;
  if (val[0] != kWireVersion)
    return Status::protocol(
        fmt::format("wire version {} (this daemon speaks {})", val[0], kWireVersion));
  h.v = static_cast<uint32_t>(val[0]);
  if (val[1] < 1 || val[1] > kMaxKind)
    return Status::protocol(fmt::format("unknown message kind {}", val[1]));
  h.kind = static_cast<Kind>(val[1]);
  if (val[2] > UINT32_MAX) return Status::protocol("header 'from' out of range");
  h.from = static_cast<uint32_t>(val[2]);
  h.round = val[3];
  h.seq = val[4];
  if (val[5] > UINT32_MAX) return Status::protocol("header 'tensor' out of range");
  h.tensor = static_cast<uint32_t>(val[5]);
  h.offset = val[6];
  if (val[7] > kMaxCodecId) return Status::protocol(fmt::format("unknown codec id {}", val[7]));
  h.codec = static_cast<CodecId>(val[7]);
  h.numel = val[8];
  h.bytes = val[9];
  h.layout = val[10];
  if (weight) {
    if (h.kind != Kind::kModelChunk && h.kind != Kind::kStateChunk)
      return Status::protocol("only model-chunk and state-chunk messages carry a weight");
    h.weight = *weight;
  }

  if (h.bytes > kMaxPayloadBytes)
    return Status::protocol(
        fmt::format("payload of {} bytes exceeds limit {}", h.bytes, kMaxPayloadBytes));
  switch (h.kind) {
    case Kind::kHello:
    case Kind::kBye:
    case Kind::kRingAddress:
    case Kind::kHeartbeat:
    case Kind::kJoin:
    case Kind::kStateOffer:
    case Kind::kStateRequest:
    case Kind::kRingProbe:
    case Kind::kCopyRequest:
      if (h.numel != 0 || h.bytes != 0)
        return Status::protocol(fmt::format("{} carries no payload but says numel={} bytes={}",
                                            kind_name(h.kind), h.numel, h.bytes));
      if (h.kind == Kind::kRingAddress && (h.offset == 0 || h.offset > 65535))
        return Status::protocol(
            fmt::format("ring-address with port {} (must be 1..65535)", h.offset));
      break;
    case Kind::kNcclId:
      if (h.numel != 0 || h.bytes != kNcclIdBytes)
        return Status::protocol(
            fmt::format("nccl-id must carry exactly {} bytes and numel=0, says numel={} bytes={}",
                        kNcclIdBytes, h.numel, h.bytes));
      break;
    case Kind::kStateChunk:
      if (h.codec != CodecId::kNone) return Status::protocol("state-chunk must be raw fp32");
      [[fallthrough]];
    case Kind::kModelChunk:
      if (h.numel == 0) return Status::protocol(fmt::format("{} with numel=0", kind_name(h.kind)));
      // Divide rather than multiply: numel * 4 wraps for numel >= 2^62.
      if (h.codec == CodecId::kNone &&
          (h.bytes % sizeof(float) != 0 || h.bytes / sizeof(float) != h.numel))
        return Status::protocol(fmt::format(
            "model-chunk says numel={} but bytes={} (raw fp32 needs numel * 4)", h.numel, h.bytes));
      if (h.codec != CodecId::kNone && h.bytes == 0)
        return Status::protocol(
            fmt::format("{} model-chunk with an empty payload", codec_name(h.codec)));
      if (h.offset > UINT64_MAX - h.numel) return Status::protocol("model-chunk offset overflows");
      break;
  }
  return h;
}

Status validate_payload(const Header& h, size_t payload_frames, size_t payload_bytes) {
  size_t want_frames = h.bytes == 0 ? 0 : 1;
  if (payload_frames != want_frames)
    return Status::protocol(fmt::format("{} has {} payload frames, expected {}", kind_name(h.kind),
                                        payload_frames, want_frames));
  if (payload_bytes != h.bytes)
    return Status::protocol(fmt::format("{} payload is {} bytes but header says {}",
                                        kind_name(h.kind), payload_bytes, h.bytes));
  return Status::ok();
}

}  // namespace gossip::proto

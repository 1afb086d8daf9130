// The peer wire's head (proto/message.h: an envelope and a typed body): round trips
// of every kind, and every malformed head we could think of refused with a message
// that names the problem. A head of another wire version is refused by its number.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <msgpack.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "proto/message.h"

namespace gossip::proto {
namespace {

using ::testing::HasSubstr;
using Packer = msgpack::packer<msgpack::sbuffer>;
using Item = std::function<void(Packer&)>;
using Items = std::vector<Item>;

Item u(uint64_t v) {
  return [v](Packer& pk) { pk.pack_uint64(v); };
}
Item i64(int64_t v) {
  return [v](Packer& pk) { pk.pack_int64(v); };
}
Item f64(double v) {
  return [v](Packer& pk) { pk.pack_double(v); };
}
Item boolean(bool v) {
  return [v](Packer& pk) { v ? pk.pack_true() : pk.pack_false(); };
}
Item str(std::string v) {
  return [v](Packer& pk) { pk.pack(v); };
}

// A head built item by item, so that tests can drop, add or retype any field.
std::string head_of(const Items& envelope, const Items& body) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(static_cast<uint32_t>(envelope.size()));
  for (const auto& f : envelope) f(pk);
  pk.pack_array(static_cast<uint32_t>(body.size()));
  for (const auto& f : body) f(pk);
  return std::string(buf.data(), buf.size());
}

Items envelope(Kind kind, uint64_t length, uint64_t from = 7, uint64_t round = 9) {
  return {u(kWireMagic), u(kWireVersion), u(static_cast<uint64_t>(kind)),
          u(from),       u(round),        u(length),
          u(0)};
}

ModelChunk chunk() {
  ModelChunk c;
  c.seq = 42;
  c.offset = 1 << 20;
  c.numel = 4096;
  c.layout = 0xdeadbeefcafef00dull;
  return c;
}
constexpr uint64_t kChunkBytes = 4096 * 4;

// The model-chunk of chunk() as items: seq, tensor, offset, numel, codec, weight, layout.
Items chunk_body() {
  return {u(42), u(0), u(1 << 20), u(4096), u(0), f64(0.5), u(0xdeadbeefcafef00dull)};
}

// A valid envelope and nothing after it.
std::string envelope_only(Kind kind) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(static_cast<uint32_t>(envelope(kind, 0).size()));
  for (const auto& f : envelope(kind, 0)) f(pk);
  return std::string(buf.data(), buf.size());
}

Result<Message> decode(const std::string& s) { return decode_head(s.data(), s.size()); }

// Asserts that `r` failed with a protocol error whose message contains `what`.
#define EXPECT_REFUSED(r, what)                                   \
  do {                                                            \
    auto _r = (r);                                                \
    ASSERT_FALSE(_r.is_ok()) << "decoded although it should not"; \
    EXPECT_EQ(_r.status().code(), Status::Code::kProtocol);       \
    EXPECT_THAT(_r.status().message(), HasSubstr(what));          \
  } while (0)

// Decodes what encode_head wrote and checks the envelope.
template <class T>
T round_trip(const T& body, uint64_t length, uint32_t from = 3, uint64_t round = 11) {
  const std::string head = encode_head(from, round, body, length);
  EXPECT_LE(head.size(), kMaxHeaderBytes);
  auto d = decode(head);
  EXPECT_TRUE(d.is_ok()) << d.status().message();
  if (!d) return T{};
  EXPECT_EQ(d->envelope.version, kWireVersion);
  EXPECT_EQ(d->envelope.kind, T::kKind);
  EXPECT_EQ(d->envelope.from, from);
  EXPECT_EQ(d->envelope.round, round);
  EXPECT_EQ(d->envelope.length, length);
  EXPECT_EQ(encode_head(from, round, d->body, length), head) << "one encoding per message";
  return std::get<T>(d->body);
}

// ------------------------------------------------------------------ round trips

TEST(WireHeader, EveryKindRoundTrips) {
  EXPECT_EQ(round_trip(Hello{0x0123456789abcdefull}, 0).layout, 0x0123456789abcdefull);

  ModelChunk c = chunk();
  c.tensor = kPublicCopyTensor;
  c.codec = CodecId::kQsgd;
  c.weight = 0.25;
  const ModelChunk got = round_trip(c, 100, UINT32_MAX, UINT64_MAX);
  EXPECT_EQ(got.seq, c.seq);
  EXPECT_EQ(got.tensor, c.tensor);
  EXPECT_EQ(got.offset, c.offset);
  EXPECT_EQ(got.numel, c.numel);
  EXPECT_EQ(got.codec, c.codec);
  EXPECT_EQ(got.weight, c.weight);
  EXPECT_EQ(got.layout, c.layout);

  round_trip(Bye{}, 0);
  const RingAddress a = round_trip(RingAddress{65535, UINT64_MAX, 17, 5, RingAddress::kRdma}, 0);
  EXPECT_EQ(a.port, 65535);
  EXPECT_EQ(a.token, UINT64_MAX);
  EXPECT_EQ(a.view, 17u);
  EXPECT_EQ(a.layout, 5u);
  EXPECT_EQ(a.transport, RingAddress::kRdma);
  const NcclId n = round_trip(NcclId{3, 8}, kNcclIdBytes);
  EXPECT_EQ(n.generation, 3u);
  EXPECT_EQ(n.layout, 8u);
  round_trip(Heartbeat{}, 0);
  round_trip(Join{}, 0);
  const StateOffer o = round_trip(StateOffer{true, 1234, 40, 6, 16}, 3 * kStateHashBytes);
  EXPECT_TRUE(o.has_state);
  EXPECT_EQ(o.step, 1234u);
  EXPECT_EQ(o.numel, 40u);
  EXPECT_EQ(o.layout, 6u);
  EXPECT_EQ(o.chunk_elems, 16u);
  EXPECT_FALSE(round_trip(StateOffer{}, 0, 1, 0).has_state) << "no state: round 0 is fine";
  const StateRequest q = round_trip(StateRequest{7, 3}, 0);
  EXPECT_EQ(q.first, 7u);
  EXPECT_EQ(q.count, 3u);
  const StateChunk s = round_trip(StateChunk{2, 64, 16, 0.5, 9}, 64);
  EXPECT_EQ(s.seq, 2u);
  EXPECT_EQ(s.offset, 64u);
  EXPECT_EQ(s.numel, 16u);
  EXPECT_EQ(s.weight, 0.5);
  EXPECT_EQ(s.layout, 9u);
  const RingProbe p = round_trip(RingProbe{4, 12, true, 3}, 12);
  EXPECT_EQ(p.epoch, 4u);
  EXPECT_EQ(p.view, 12u);
  EXPECT_TRUE(p.restarted);
  EXPECT_EQ(p.members, 3u);
  EXPECT_EQ(p.merge, RingProbe::kReform);
  EXPECT_EQ(round_trip(RingProbe{4, 12, false, 2, RingProbe::kMerging}, 8).merge,
            RingProbe::kMerging);
  EXPECT_FALSE(p.holds_result);
  EXPECT_TRUE(round_trip(RingProbe{4, 12, false, 2, RingProbe::kReform, true}, 8).holds_result);
  const RingNorms norms = round_trip(RingNorms{12, 5}, 20);
  EXPECT_EQ(norms.view, 12u);
  EXPECT_EQ(norms.chunks, 5u);
  round_trip(CopyRequest{}, 0);
  const PsPush push = round_trip(PsPush{3, 100, 25, CodecId::kNone, 7}, 100);
  EXPECT_EQ(push.shard, 3u);
  EXPECT_EQ(push.offset, 100u);
  EXPECT_EQ(push.numel, 25u);
  EXPECT_EQ(push.layout, 7u);
  EXPECT_EQ(round_trip(PsPush{0, 0, 1000, CodecId::kFp16, 7}, 2000).codec, CodecId::kFp16);
  EXPECT_EQ(round_trip(PsPull{5, 7}, 0).shard, 5u);
  const PsParams params = round_trip(PsParams{1, 8, 4, CodecId::kNone, 7}, 16);
  EXPECT_EQ(params.offset, 8u);
  EXPECT_EQ(params.numel, 4u);
  const PsReplica replica = round_trip(PsReplica{2, 16, 4, PsReplica::kUpdate, 3, 5, 7}, 16);
  EXPECT_EQ(replica.shard, 2u);
  EXPECT_EQ(replica.offset, 16u);
  EXPECT_EQ(replica.what, PsReplica::kUpdate);
  EXPECT_EQ(replica.worker, 3u);
  EXPECT_EQ(replica.divisor, 5u);
  EXPECT_EQ(round_trip(PsReplica{0, 0, 4, PsReplica::kSnapshot, 0, 1, 7}, 16).what,
            PsReplica::kSnapshot);
  EXPECT_EQ(round_trip(PsReplica{0, 0, 0, PsReplica::kRequest, 0, 1, 7}, 0).what,
            PsReplica::kRequest);
}

TEST(WireHeader, ParameterServerSlicesFollowTheSliceRules) {
  // Raw slices are numel * 4 bytes; no slice is empty or overflows; a pull has no payload.
  EXPECT_REFUSED(decode(encode_head(1, 1, PsPush{0, 0, 10, CodecId::kNone, 1}, 39)),
                 "raw fp32 needs numel * 4");
  EXPECT_REFUSED(decode(encode_head(1, 1, PsParams{0, 0, 0, CodecId::kNone, 1}, 0)), "numel=0");
  EXPECT_REFUSED(decode(encode_head(1, 1, PsPush{0, UINT64_MAX, 1, CodecId::kFp16, 1}, 2)),
                 "offset overflows");
  EXPECT_REFUSED(decode(encode_head(1, 1, PsPull{0, 1}, 4)), "carries no payload");
  EXPECT_REFUSED(decode(encode_head(1, 1, PsReplica{0, 0, 4, PsReplica::kUpdate, 0, 1, 1}, 15)),
                 "raw fp32 needs numel * 4");
  EXPECT_REFUSED(decode(encode_head(1, 1, PsReplica{0, 0, 4, PsReplica::kUpdate, 0, 0, 1}, 16)),
                 "divisor=0");
  EXPECT_REFUSED(decode(encode_head(1, 1, PsReplica{0, 0, 0, 3, 0, 1, 1}, 0)), "unknown what=3");
  EXPECT_REFUSED(decode(encode_head(1, 1, PsReplica{0, 0, 0, PsReplica::kRequest, 0, 1, 1}, 4)),
                 "carries no payload");
}

TEST(WireHeader, InitialModelRequestsAndDigestsCarryNothingAndChunksARawSlice) {
  const InitialModel chunk = round_trip(InitialModel{InitialModel::kChunk, 2, 8, 4, 12, 7}, 16);
  EXPECT_EQ(chunk.what, InitialModel::kChunk);
  EXPECT_EQ(chunk.seq, 2u);
  EXPECT_EQ(chunk.offset, 8u);
  EXPECT_EQ(chunk.numel, 4u);
  EXPECT_EQ(chunk.total, 12u);
  EXPECT_EQ(chunk.layout, 7u);
  EXPECT_EQ(round_trip(InitialModel{InitialModel::kRequest, 0, 0, 0, 12, 7}, 0).what,
            InitialModel::kRequest);
  EXPECT_REFUSED(decode(encode_head(1, 0, InitialModel{InitialModel::kChunk, 0, 0, 4, 4, 1}, 15)),
                 "raw fp32 needs numel * 4");
  EXPECT_REFUSED(decode(encode_head(1, 0, InitialModel{InitialModel::kChunk, 0, 0, 0, 4, 1}, 0)),
                 "numel=0");
  EXPECT_REFUSED(decode(encode_head(1, 0, InitialModel{InitialModel::kRequest, 0, 0, 0, 4, 1}, 4)),
                 "carries no payload");
  const InitialModel digest =
      round_trip(InitialModel{InitialModel::kDigest, 0xfeed, 0, 0, 12, 7}, 0);
  EXPECT_EQ(digest.seq, 0xfeedu);
  EXPECT_REFUSED(decode(encode_head(1, 0, InitialModel{InitialModel::kDigest, 1, 0, 0, 4, 1}, 8)),
                 "carries no payload");
  EXPECT_REFUSED(decode(encode_head(1, 0, InitialModel{3, 0, 0, 0, 4, 1}, 0)), "unknown what=3");
}

TEST(WireHeader, LargestChunkFitsTheHeadLimit) {
  ModelChunk c = chunk();
  c.numel = kMaxPayloadBytes / 4;
  c.offset = UINT64_MAX - c.numel;  // the last slice that does not overflow
  c.seq = c.layout = UINT64_MAX;
  c.tensor = UINT32_MAX;
  EXPECT_EQ(round_trip(c, kMaxPayloadBytes, UINT32_MAX, UINT64_MAX).offset, c.offset);
}

TEST(WireHeader, BodyIndexFollowsTheKind) {
  for (uint8_t k = 1; k <= kMaxKind; ++k) {
    Body b;
    // Every kind has a body type whose kKind names it.
    b = [&]() -> Body {
      switch (static_cast<Kind>(k)) {
        case Kind::kHello:
          return Hello{};
        case Kind::kModelChunk:
          return ModelChunk{};
        case Kind::kBye:
          return Bye{};
        case Kind::kRingAddress:
          return RingAddress{};
        case Kind::kNcclId:
          return NcclId{};
        case Kind::kHeartbeat:
          return Heartbeat{};
        case Kind::kJoin:
          return Join{};
        case Kind::kStateOffer:
          return StateOffer{};
        case Kind::kStateRequest:
          return StateRequest{};
        case Kind::kStateChunk:
          return StateChunk{};
        case Kind::kRingProbe:
          return RingProbe{};
        case Kind::kCopyRequest:
          return CopyRequest{};
        case Kind::kPsPush:
          return PsPush{};
        case Kind::kPsPull:
          return PsPull{};
        case Kind::kPsParams:
          return PsParams{};
        case Kind::kPsReplica:
          return PsReplica{};
        case Kind::kInitialModel:
          return InitialModel{};
        case Kind::kTuneReport:
          return TuneReport{};
        case Kind::kInspect:
          return Inspect{};
        case Kind::kMember:
          return Member{};
        case Kind::kRingNorms:
          return RingNorms{};
      }
      return Hello{};
    }();
    EXPECT_EQ(static_cast<uint8_t>(kind_of(b)), k);
    EXPECT_STRNE(kind_name(kind_of(b)), "?");
  }
}

TEST(WireHeader, Names) {
  EXPECT_STREQ(kind_name(Kind::kHello), "hello");
  EXPECT_STREQ(kind_name(Kind::kModelChunk), "model-chunk");
  EXPECT_STREQ(kind_name(Kind::kCopyRequest), "copy-request");
  EXPECT_STREQ(kind_name(Kind::kPsParams), "ps-params");
  EXPECT_STREQ(codec_name(CodecId::kNone), "none");
  EXPECT_EQ(zmtp_frame_overhead(0), 2u);
  EXPECT_EQ(zmtp_frame_overhead(255), 2u);
  EXPECT_EQ(zmtp_frame_overhead(256), 9u);
}

// ------------------------------------------------------------------ versions

TEST(WireHeader, ANewerVersionIsRefusedByNumberNeverRead) {
  for (uint64_t v : {uint64_t{kWireVersion} + 1, uint64_t{255}, uint64_t{1} << 40}) {
    Items e = envelope(Kind::kModelChunk, kChunkBytes);
    e[1] = u(v);
    // Whatever a newer version puts after its version: more envelope fields, another body.
    EXPECT_REFUSED(decode(head_of(e, chunk_body())),
                   fmt::format("wire version {} (newer than this daemon's {})", v, kWireVersion));
    e.push_back(str("a field of the future"));
    EXPECT_REFUSED(decode(head_of(e, {str("x"), f64(1.5)})), "newer than this daemon's");
  }
  Items e = envelope(Kind::kModelChunk, kChunkBytes);
  e[1] = u(kWireVersion + 1);
  // Also when the rest of the frame is not msgpack at all.
  EXPECT_REFUSED(decode(head_of(e, {}) + std::string("\xc1\xc1", 2)), "newer than this daemon's");
}

TEST(WireHeader, AnOlderVersionIsNamed) {
  Items e = envelope(Kind::kHello, 0);
  e[1] = u(1);
  EXPECT_REFUSED(decode(head_of(e, {u(0)})),
                 fmt::format("wire version 1 (older than this daemon's {})", kWireVersion));
  // Version 1 heads were flat msgpack maps: {v: 1, kind: 1, ...}.
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(2), pk.pack("v"), pk.pack(1), pk.pack("kind"), pk.pack(1);
  EXPECT_REFUSED(decode(std::string(buf.data(), buf.size())), "a wire version 1 header");
}

TEST(WireHeader, MagicIsChecked) {
  Items e = envelope(Kind::kHello, 0);
  e[0] = u(kWireMagic + 1);
  EXPECT_REFUSED(decode(head_of(e, {u(0)})), "lacks the gossipd magic");
  e[0] = str("GSPD");
  EXPECT_REFUSED(decode(head_of(e, {u(0)})), "'magic' is not an unsigned integer");
}

// ------------------------------------------------------------------ frame level

TEST(WireHeader, EmptyFrame) {
  EXPECT_REFUSED(decode_head(nullptr, 0), "empty");
  EXPECT_REFUSED(decode(""), "empty");
}

TEST(WireHeader, OversizedFrame) {
  EXPECT_REFUSED(decode(std::string(kMaxHeaderBytes + 1, '\x00')), "limit");
  Items body = chunk_body();
  body[6] = str(std::string(600, 'x'));
  const std::string padded = head_of(envelope(Kind::kModelChunk, kChunkBytes), body);
  EXPECT_REFUSED(decode(padded), std::to_string(padded.size()) + " bytes, limit");
}

TEST(WireHeader, GarbageBytes) {
  // 0xc1 is the one byte msgpack never uses.
  EXPECT_REFUSED(decode(std::string("\xc1", 1)), "not valid msgpack");
  EXPECT_REFUSED(decode(std::string("\xc1\xc1\xc1\xc1", 4)), "not valid msgpack");
  EXPECT_REFUSED(decode("hello, world"), "does not start with an envelope");
  EXPECT_REFUSED(decode(std::string("\x05", 1)), "does not start with an envelope");
  EXPECT_REFUSED(decode(std::string("\xc0", 1)), "does not start with an envelope");
  EXPECT_REFUSED(decode(std::string("\x90", 1)), "does not start with an envelope");
}

TEST(WireHeader, EveryPrefixIsRefused) {
  const std::string full = encode_head(7, 9, chunk(), kChunkBytes);
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_FALSE(decode_head(full.data(), n).is_ok()) << "prefix of " << n << " bytes decoded";
  }
}

TEST(WireHeader, TrailingBytes) {
  const std::string head = encode_head(7, 9, chunk(), kChunkBytes);
  EXPECT_REFUSED(decode(head + "x"), "1 trailing bytes after the body");
  EXPECT_REFUSED(decode(head + head), "trailing bytes");
}

TEST(WireHeader, HugeClaimedSizesFailFast) {
  // A map, array, string or bin claiming 2^32-1 entries must be refused by the
  // unpack limits, not by running out of memory.
  for (const char* s : {"\xdf\xff\xff\xff\xff", "\xdd\xff\xff\xff\xff", "\xdb\xff\xff\xff\xff",
                        "\xc6\xff\xff\xff\xff"})
    EXPECT_REFUSED(decode(std::string(s, 5)), "not valid msgpack");
  // Also as the body, after a valid envelope.
  EXPECT_REFUSED(decode(envelope_only(Kind::kHello) + std::string("\xdd\xff\xff\xff\xff", 5)),
                 "hello body is not valid msgpack");
}

// ------------------------------------------------------------------ envelope fields

TEST(WireHeader, EnvelopeOfTheWrongSize) {
  Items e = envelope(Kind::kHello, 0);
  e.pop_back();
  EXPECT_REFUSED(decode(head_of(e, {u(0)})), "envelope has 6 fields, expected 7");
  e = envelope(Kind::kHello, 0);
  e.push_back(u(0));
  EXPECT_REFUSED(decode(head_of(e, {u(0)})), "envelope has 8 fields, expected 7");
  EXPECT_REFUSED(decode(head_of({u(kWireMagic)}, {u(0)})), "does not start with an envelope");
}

TEST(WireHeader, EnvelopeFieldsAreUnsignedIntegers) {
  const char* names[] = {"magic", "version", "kind", "from", "round", "length", "epoch"};
  for (size_t k = 0; k < 7; ++k) {
    SCOPED_TRACE(names[k]);
    for (const Item& bad : {i64(-1), str("1"), f64(1.5), boolean(true)}) {
      Items e = envelope(Kind::kHello, 0);
      e[k] = bad;
      EXPECT_REFUSED(decode(head_of(e, {u(0)})),
                     fmt::format("envelope field '{}' is not an unsigned integer", names[k]));
    }
  }
}

TEST(WireHeader, UnknownKind) {
  for (uint64_t k : {uint64_t{0}, uint64_t{kMaxKind} + 1, uint64_t{255}, uint64_t{1} << 40}) {
    Items e = envelope(Kind::kHello, 0);
    e[2] = u(k);
    EXPECT_REFUSED(decode(head_of(e, {u(0)})), fmt::format("unknown message kind {}", k));
  }
}

TEST(WireHeader, SenderOutOfRange) {
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kHello, 0, uint64_t{1} << 32), {u(0)})),
                 "'from' out of range");
  EXPECT_TRUE(decode(head_of(envelope(Kind::kHello, 0, UINT32_MAX), {u(0)})).is_ok());
}

TEST(WireHeader, PayloadOverLimit) {
  ModelChunk c = chunk();
  c.numel = kMaxPayloadBytes / 4 + 1;
  EXPECT_REFUSED(decode(encode_head(1, 0, c, c.numel * 4)), "exceeds limit");
}

// ------------------------------------------------------------------ body fields

TEST(WireHeader, BodyMustHaveExactlyItsFields) {
  Items b = chunk_body();
  b.pop_back();
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                 "model-chunk body must be an array of 7 fields");
  b = chunk_body();
  b.push_back(u(1));
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                 "must be an array of 7 fields");
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kBye, 0), {u(1)})),
                 "bye body must be an array of 0");
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kHello, 0), {})),
                 "hello body must be an array of 1");
  // A body of another kind: a hello's fields for a state-offer.
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kStateOffer, 0), {u(0)})),
                 "state-offer body must be an array of 6 fields");
  EXPECT_REFUSED(decode(envelope_only(Kind::kHello)), "hello lacks its body");
}

TEST(WireHeader, BodyFieldsHaveTheirTypes) {
  const char* names[] = {"seq", "tensor", "offset", "numel", "codec", "weight", "layout"};
  for (size_t k = 0; k < 7; ++k) {
    SCOPED_TRACE(names[k]);
    Items b = chunk_body();
    b[k] = str("7");
    EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                   fmt::format("model-chunk field '{}' is not", names[k]));
    if (k == 5) continue;  // the weight is a number, and negative ones have their own message
    b[k] = i64(-1);
    EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                   fmt::format("model-chunk field '{}' is not an unsigned integer", names[k]));
    b[k] = f64(1.5);
    EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                   fmt::format("model-chunk field '{}' is not an unsigned integer", names[k]));
  }
  // A boolean is a boolean, not a number.
  EXPECT_REFUSED(
      decode(head_of(envelope(Kind::kRingProbe, 0), {u(1), u(2), u(1), u(0), u(0), boolean(true)})),
      "ring-probe field 'restarted' is not a boolean");
  EXPECT_REFUSED(
      decode(head_of(envelope(Kind::kRingProbe, 0), {u(1), u(2), boolean(true), u(0), u(0), u(1)})),
      "ring-probe field 'holds_result' is not a boolean");
  EXPECT_TRUE(decode(head_of(envelope(Kind::kRingProbe, 0),
                             {u(1), u(2), boolean(true), u(0), u(0), boolean(false)}))
                  .is_ok());
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kRingProbe, 0),
                                {u(1), u(2), boolean(false), u(0), u(3), boolean(true)})),
                 "ring-probe of unknown merge=3");
  // A version 10 probe (five fields) is refused, naming the count.
  EXPECT_REFUSED(
      decode(head_of(envelope(Kind::kRingProbe, 0), {u(1), u(2), boolean(true), u(0), u(0)})),
      "ring-probe body must be an array of 6 fields");
  // Ring norms: as many floats as chunks, and some.
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kRingNorms, 16), {u(1), u(5)})),
                 "ring-norms of 5 chunks with a payload of 16 bytes");
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kRingNorms, 0), {u(1), u(0)})),
                 "ring-norms of 0 chunks (1 to 1048576)");
}

TEST(WireHeader, NarrowFieldsOverflow) {
  Items b = chunk_body();
  b[1] = u(uint64_t{1} << 32);
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                 "model-chunk field 'tensor' is 4294967296, out of range");
  EXPECT_REFUSED(
      decode(head_of(envelope(Kind::kRingAddress, 0), {u(65536), u(0), u(0), u(0), u(0)})),
      "ring-address field 'port' is 65536, out of range");
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kRingAddress, 0), {u(0), u(0), u(0), u(0), u(0)})),
                 "ring-address with port 0");
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kRingAddress, 0), {u(1), u(0), u(0), u(0), u(2)})),
                 "ring-address of unknown transport=2");
}

TEST(WireHeader, UnknownCodec) {
  for (uint64_t c : {uint64_t{kMaxCodecId} + 1, uint64_t{255}}) {
    Items b = chunk_body();
    b[4] = u(c);
    EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                   fmt::format("unknown codec id {}", c));
  }
}

// ------------------------------------------------------------------ push-sum weight

// Found by fuzz/wire_header_fuzzer: msgpack packs whole-number doubles as integers,
// which lost the sign of -0.0 and was undefined behaviour for 2^64.
TEST(WireHeader, WeightsTravelAsFloat64Exactly) {
  for (double w : {-0.0, 0.0, 2.0, 18446744073709551616.0, 0.375, 1e300, 1e-300, 1.0 / 3.0}) {
    ModelChunk c = chunk();
    c.weight = w;
    const std::string head = encode_head(1, 2, c, kChunkBytes);
    auto d = decode(head);
    ASSERT_TRUE(d.is_ok()) << w << ": " << d.status().message();
    const double got = std::get<ModelChunk>(d->body).weight;
    EXPECT_EQ(std::signbit(got), std::signbit(w)) << w;
    EXPECT_EQ(got, w);
    EXPECT_EQ(encode_head(1, 2, d->body, kChunkBytes), head) << "re-encodes to the same bytes";
  }
}

TEST(WireHeader, BadWeightsAreRefused) {
  for (double w : {-0.5, std::numeric_limits<double>::infinity(), std::nan("")}) {
    Items b = chunk_body();
    b[5] = f64(w);
    EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                   "not finite and >= 0");
  }
  Items b = chunk_body();
  b[5] = i64(-3);  // msgpack's negative integer
  EXPECT_REFUSED(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)),
                 "not finite and >= 0");
  b[5] = u(3);  // an integral weight may come as an integer
  EXPECT_TRUE(decode(head_of(envelope(Kind::kModelChunk, kChunkBytes), b)).is_ok());
}

// ------------------------------------------------------------------ each kind's rules

TEST(WireHeader, KindsWithoutPayloadRefuseALength) {
  const Body bodies[] = {Hello{},       Bye{},          Heartbeat{},
                         Join{},        StateRequest{}, RingAddress{1, 0, 0, 0},
                         CopyRequest{}, StateOffer{}};
  for (const Body& b : bodies) {
    SCOPED_TRACE(kind_name(kind_of(b)));
    EXPECT_TRUE(decode(encode_head(1, 1, b, 0)).is_ok());
    EXPECT_REFUSED(decode(encode_head(1, 1, b, 4)), "carries no payload but says length=4");
  }
}

TEST(WireHeader, RingProbeCarriesFourBytesAMember) {
  EXPECT_TRUE(decode(encode_head(1, 1, RingProbe{2, 7, false, 0}, 0)).is_ok());
  EXPECT_REFUSED(decode(encode_head(1, 1, RingProbe{2, 7, false, 0}, 4)),
                 "ring-probe of 0 members with a payload of 4 bytes");
  EXPECT_REFUSED(decode(encode_head(1, 1, RingProbe{2, 7, false, 3}, 8)),
                 "ring-probe of 3 members with a payload of 8 bytes");
  EXPECT_REFUSED(decode(encode_head(1, 1, RingProbe{2, 7, false, kMaxRingProbeMembers + 1},
                                    4 * (kMaxRingProbeMembers + 1))),
                 "ring-probe of 4097 members (at most 4096)");
}

TEST(WireHeader, MemberMessagesCarryAnEndpointOrAListOfBoundedSize) {
  const Member m = round_trip(Member{Member::kAnswer, 4, 2}, 40);
  EXPECT_EQ(m.what, Member::kAnswer);
  EXPECT_EQ(m.id, 4u);
  EXPECT_EQ(m.epoch, 2u);
  EXPECT_TRUE(decode(encode_head(kNoNode, 0, Member{}, 20)).is_ok()) << "a joiner has no id";
  EXPECT_REFUSED(decode(encode_head(1, 0, Member{Member::kAdd, 4, 1}, 0)),
                 "member what=4 with a payload of 0 bytes");
  EXPECT_REFUSED(decode(encode_head(1, 0, Member{Member::kAdd, 4, 1}, kMaxMemberBytes + 1)),
                 "member what=4 with a payload of 65537 bytes");
  EXPECT_TRUE(decode(encode_head(4, 0, Member{Member::kReady, 4, 1}, 20)).is_ok());
  EXPECT_TRUE(decode(encode_head(2, 0, Member{Member::kSync, 2, 1}, 0)).is_ok());
  EXPECT_REFUSED(decode(encode_head(2, 0, Member{Member::kSync, 2, 1}, 20)),
                 "carries no payload but says length=20");
  EXPECT_TRUE(decode(encode_head(0, 0, Member{Member::kWait, 0, 4}, 30)).is_ok());
  EXPECT_TRUE(decode(encode_head(0, 0, Member{Member::kPropose, 4, 4}, 20)).is_ok());
  EXPECT_TRUE(decode(encode_head(1, 0, Member{Member::kAccept, 4, 4}, 20)).is_ok());
  EXPECT_REFUSED(decode(encode_head(1, 0, Member{Member::kDecline, 4, 4}, 0)),
                 "member what=10 with a payload of 0 bytes");
  EXPECT_TRUE(decode(encode_head(1, 0, Member{Member::kForgotten, 4, 4}, 20)).is_ok());
  EXPECT_REFUSED(decode(encode_head(1, 0, Member{13, 4, 1}, 20)), "member of unknown what=13");
}

// Every message carries its sender's member-list epoch.
TEST(WireHeader, TheEnvelopeCarriesTheSendersEpoch) {
  auto m = decode(encode_head(3, 9, Heartbeat{}, 0, 41));
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->envelope.epoch, 41u);
  EXPECT_EQ(m->envelope.round, 9u);
  auto zero = decode(encode_head(3, 9, Heartbeat{}, 0));
  ASSERT_TRUE(zero.is_ok());
  EXPECT_EQ(zero->envelope.epoch, 0u);
}

TEST(WireHeader, NcclIdCarriesExactlyTheIdsBytes) {
  for (uint64_t n : {uint64_t{0}, kNcclIdBytes - 1, kNcclIdBytes + 1})
    EXPECT_REFUSED(decode(encode_head(0, 1, NcclId{}, n)), "nccl-id must carry exactly 128 bytes");
}

TEST(WireHeader, StateOfferWithAStateNamesItsRound) {
  EXPECT_REFUSED(decode(encode_head(0, 0, StateOffer{true, 5, 8, 0}, 0)),
                 "state-offer of a state before round 0");
}

TEST(WireHeader, StateOfferHasASizeExactlyWhenItHasAState) {
  EXPECT_REFUSED(decode(encode_head(0, 3, StateOffer{true, 5, 0, 0}, 0)),
                 "state-offer with has_state=true of 0 elements");
  EXPECT_REFUSED(decode(encode_head(0, 0, StateOffer{false, 0, 8, 0}, 0)),
                 "state-offer with has_state=false of 8 elements");
}

// The manifest: one hash per chunk, ceil(numel / chunk_elems) of them.
TEST(WireHeader, StateOfferCarriesAHashPerChunk) {
  EXPECT_REFUSED(decode(encode_head(0, 3, StateOffer{true, 5, 8, 0, 0}, 0)),
                 "state-offer with chunk_elems=0");
  for (uint64_t bytes :
       {uint64_t{0}, kStateHashBytes, 4 * kStateHashBytes, 3 * kStateHashBytes + 1})
    EXPECT_REFUSED(decode(encode_head(0, 3, StateOffer{true, 5, 9, 0, 4}, bytes)),
                   "needs a manifest of 3 hashes");
  EXPECT_TRUE(decode(encode_head(0, 3, StateOffer{true, 5, 8, 0, 4}, 2 * kStateHashBytes)).is_ok());
  EXPECT_REFUSED(decode(encode_head(0, 0, StateOffer{}, kStateHashBytes)), "carries no payload");
}

TEST(WireHeader, ChunkSizesMustAgree) {
  ModelChunk c = chunk();
  c.numel = 0;
  EXPECT_REFUSED(decode(encode_head(1, 0, c, 0)), "model-chunk with numel=0");
  c = chunk();
  EXPECT_REFUSED(decode(encode_head(1, 0, c, kChunkBytes - 4)), "raw fp32 needs numel * 4");
  EXPECT_REFUSED(decode(encode_head(1, 0, c, kChunkBytes + 1)), "raw fp32 needs numel * 4");
  c.codec = CodecId::kSign;
  EXPECT_REFUSED(decode(encode_head(1, 0, c, 0)), "sign model-chunk with an empty payload");
  EXPECT_TRUE(decode(encode_head(1, 0, c, 17)).is_ok()) << "only the codec knows its size";
  // numel * 4 wraps to a small number for numel >= 2^62.
  c = chunk();
  c.numel = (uint64_t{1} << 62) + 1;
  EXPECT_REFUSED(decode(encode_head(1, 0, c, 4)), "raw fp32 needs numel * 4");
  StateChunk s{0, 0, 4, 1.0, 0};
  EXPECT_REFUSED(decode(encode_head(1, 1, s, 12)), "state-chunk says numel=4 but length=12");
  s.numel = 0;
  EXPECT_REFUSED(decode(encode_head(1, 1, s, 0)), "state-chunk with numel=0");
}

TEST(WireHeader, OffsetOverflow) {
  ModelChunk c = chunk();
  c.offset = UINT64_MAX - c.numel + 1;
  EXPECT_REFUSED(decode(encode_head(1, 0, c, kChunkBytes)), "model-chunk offset overflows");
  StateChunk s{0, UINT64_MAX, 1, 1.0, 0};
  EXPECT_REFUSED(decode(encode_head(1, 1, s, 4)), "state-chunk offset overflows");
}

TEST(WireHeader, ValidatePayload) {
  Envelope e;
  e.kind = Kind::kModelChunk;
  e.length = 16;
  EXPECT_TRUE(validate_payload(e, 1, 16).is_ok());
  EXPECT_THAT(validate_payload(e, 0, 0).message(), HasSubstr("0 payload frames, expected 1"));
  EXPECT_THAT(validate_payload(e, 1, 15).message(),
              HasSubstr("payload is 15 bytes but its envelope says 16"));
  e.kind = Kind::kHello;
  e.length = 0;
  EXPECT_TRUE(validate_payload(e, 0, 0).is_ok());
  EXPECT_THAT(validate_payload(e, 1, 0).message(), HasSubstr("1 payload frames, expected 0"));
}

// ------------------------------------------------------------------ in-test fuzzing

// Whatever decodes keeps the decoder's promises and re-encodes to itself.
void check_consistent(const std::string& s) {
  auto d = decode(s);
  if (!d) {
    EXPECT_FALSE(d.status().message().empty());
    return;
  }
  EXPECT_LE(d->envelope.length, kMaxPayloadBytes);
  // msgpack has several widths for one integer, so the bytes may differ; the
  // encoding of what was decoded must decode to itself.
  const auto& e = d->envelope;
  const std::string again = encode_head(e.from, e.round, d->body, e.length);
  auto d2 = decode(again);
  ASSERT_TRUE(d2.is_ok()) << d2.status().message();
  EXPECT_EQ(encode_head(e.from, e.round, d2->body, e.length), again);
}

TEST(WireHeaderFuzz, RandomBytes) {
  std::mt19937_64 rng(12345);
  for (int it = 0; it < 3000; ++it) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    // Start some with an envelope and the magic so the decoder gets further.
    if (it % 2 == 0) s = encode_head(1, 2, Hello{}, 0).substr(0, 6 + rng() % 4) + s;
    check_consistent(s);
  }
}

TEST(WireHeaderFuzz, SingleByteMutations) {
  std::mt19937_64 rng(777);
  const std::string base[] = {encode_head(7, 9, chunk(), kChunkBytes),
                              encode_head(1, 3, RingProbe{1, 2, false, 2}, 8)};
  int decoded = 0;
  for (int it = 0; it < 5000; ++it) {
    std::string s = base[it % 2];
    const size_t pos = rng() % s.size();
    switch (rng() % 3) {
      case 0:
        s[pos] = static_cast<char>(rng());
        break;
      case 1:
        s[pos] = static_cast<char>(s[pos] ^ (1 << (rng() % 8)));
        break;
      default:
        s.erase(pos, 1);
        break;
    }
    check_consistent(s);
    decoded += decode(s).is_ok();
  }
  // Some mutations hit values only (e.g. round, seq) and still decode.
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace gossip::proto

// The peer wire header (proto/message.h): round trips, and every malformed header we
// could think of must be refused with a message that names the problem.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

// A flat msgpack map built key by key, so tests can drop, repeat or retype any field.
struct Field {
  std::string key;
  std::function<void(Packer&)> pack;
};
using Fields = std::vector<Field>;

Field u(std::string key, uint64_t v) {
  return {std::move(key), [v](Packer& pk) { pk.pack_uint64(v); }};
}
Field i(std::string key, int64_t v) {
  return {std::move(key), [v](Packer& pk) { pk.pack_int64(v); }};
}
Field s(std::string key, std::string v) {
  return {std::move(key), [v](Packer& pk) { pk.pack(v); }};
}

Field f64(std::string key, double v) {
  return {std::move(key), [v](Packer& pk) { pk.pack_double(v); }};
}

std::string pack_map(const Fields& fields) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(static_cast<uint32_t>(fields.size()));
  for (const auto& f : fields) {
    pk.pack(f.key);
    f.pack(pk);
  }
  return std::string(buf.data(), buf.size());
}

Fields fields_of(const Header& h) {
  return {u("v", h.v),           u("kind", static_cast<uint64_t>(h.kind)),
          u("from", h.from),     u("round", h.round),
          u("seq", h.seq),       u("tensor", h.tensor),
          u("offset", h.offset), u("codec", static_cast<uint64_t>(h.codec)),
          u("numel", h.numel),   u("bytes", h.bytes),
          u("layout", h.layout)};
}

Fields with(Fields f, Field repl) {
  for (auto& x : f)
    if (x.key == repl.key) x = std::move(repl);
  return f;
}
Fields without(Fields f, const std::string& key) {
  std::erase_if(f, [&](const Field& x) { return x.key == key; });
  return f;
}

Header chunk() {
  Header h;
  h.kind = Kind::kModelChunk;
  h.from = 7;
  h.round = 123456789012ull;
  h.seq = 42;
  h.tensor = 0;
  h.offset = 1 << 20;
  h.numel = 4096;
  h.bytes = 4096 * 4;
  h.layout = 0xdeadbeefcafef00dull;
  return h;
}

Result<Header> decode(const std::string& s) { return decode_header(s.data(), s.size()); }

// Asserts that `r` failed with a protocol error whose message contains `what`.
#define EXPECT_REFUSED(r, what)                                   \
  do {                                                            \
    auto _r = (r);                                                \
    ASSERT_FALSE(_r.is_ok()) << "decoded although it should not"; \
    EXPECT_EQ(_r.status().code(), Status::Code::kProtocol);       \
    EXPECT_THAT(_r.status().message(), HasSubstr(what));          \
  } while (0)

void expect_same(const Header& a, const Header& b) {
  EXPECT_EQ(a.v, b.v);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.from, b.from);
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.tensor, b.tensor);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.codec, b.codec);
  EXPECT_EQ(a.numel, b.numel);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.weight, b.weight);
}

// ------------------------------------------------------------------ round trips

TEST(WireHeader, RoundTripHello) {
  Header h;
  h.kind = Kind::kHello;
  h.from = 3;
  h.layout = 0x0123456789abcdefull;
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
}

TEST(WireHeader, RoundTripModelChunk) {
  Header h = chunk();
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
}

TEST(WireHeader, RoundTripBye) {
  Header h;
  h.kind = Kind::kBye;
  h.from = UINT32_MAX;
  h.round = UINT64_MAX;
  h.seq = UINT64_MAX;
  h.tensor = UINT32_MAX;
  h.offset = UINT64_MAX;
  h.layout = UINT64_MAX;
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
}

TEST(WireHeader, RoundTripLargestChunk) {
  Header h = chunk();
  h.numel = kMaxPayloadBytes / 4;
  h.bytes = kMaxPayloadBytes;
  h.offset = UINT64_MAX - h.numel;  // the last slice that does not overflow
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
  EXPECT_LE(encode_header(h).size(), kMaxHeaderBytes);
}

TEST(WireHeader, KeyOrderDoesNotMatter) {
  Fields f = fields_of(chunk());
  std::reverse(f.begin(), f.end());
  auto d = decode(pack_map(f));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(chunk(), *d);
}

TEST(WireHeader, Names) {
  EXPECT_STREQ(kind_name(Kind::kHello), "hello");
  EXPECT_STREQ(kind_name(Kind::kModelChunk), "model-chunk");
  EXPECT_STREQ(kind_name(Kind::kBye), "bye");
  EXPECT_STREQ(codec_name(CodecId::kNone), "none");
  EXPECT_EQ(zmtp_frame_overhead(0), 2u);
  EXPECT_EQ(zmtp_frame_overhead(255), 2u);
  EXPECT_EQ(zmtp_frame_overhead(256), 9u);
}

// ------------------------------------------------------------------ frame level

TEST(WireHeader, EmptyFrame) {
  EXPECT_REFUSED(decode_header(nullptr, 0), "empty");
  EXPECT_REFUSED(decode(""), "empty");
}

TEST(WireHeader, OversizedFrame) {
  std::string big(kMaxHeaderBytes + 1, '\x00');
  EXPECT_REFUSED(decode(big), "limit");
  // A syntactically valid map padded with a long string value is still too big.
  std::string padded = pack_map(with(fields_of(chunk()), s("layout", std::string(600, 'x'))));
  EXPECT_REFUSED(decode(padded), std::to_string(padded.size()) + " bytes, limit");
}

TEST(WireHeader, GarbageBytes) {
  // 0xc1 is the one byte msgpack never uses.
  EXPECT_REFUSED(decode(std::string("\xc1", 1)), "not valid msgpack");
  EXPECT_REFUSED(decode(std::string("\xc1\xc1\xc1\xc1", 4)), "not valid msgpack");
  EXPECT_REFUSED(decode("hello, world"), "");  // a fixint then trailing bytes, or worse
}

TEST(WireHeader, EveryPrefixIsRefused) {
  std::string full = encode_header(chunk());
  for (size_t n = 0; n < full.size(); ++n) {
    auto d = decode_header(full.data(), n);
    EXPECT_FALSE(d.is_ok()) << "prefix of " << n << " bytes decoded";
    if (n > 0) {
      EXPECT_THAT(d.status().message(), HasSubstr("not valid msgpack")) << n;
    }
  }
}

TEST(WireHeader, NotAMap) {
  EXPECT_REFUSED(decode(std::string("\x90", 1)), "not a msgpack map");  // []
  // A non-empty array is already refused by the unpack limits (a header has none).
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(2), pk.pack(1), pk.pack(2);
  EXPECT_REFUSED(decode(std::string(buf.data(), buf.size())), "array size overflow");
  EXPECT_REFUSED(decode(std::string("\x05", 1)), "not a msgpack map");
  EXPECT_REFUSED(decode(std::string("\xc0", 1)), "not a msgpack map");  // nil
}

TEST(WireHeader, TrailingBytes) {
  std::string s = encode_header(chunk()) + "x";
  EXPECT_REFUSED(decode(s), "1 trailing bytes");
  std::string two = encode_header(chunk()) + encode_header(chunk());
  EXPECT_REFUSED(decode(two), "trailing bytes");
}

TEST(WireHeader, HugeClaimedSizesFailFast) {
  // A map or array header claiming 2^32-1 entries must be refused by the unpack
  // limits, not by running out of memory.
  EXPECT_REFUSED(decode(std::string("\xdf\xff\xff\xff\xff", 5)), "not valid msgpack");
  EXPECT_REFUSED(decode(std::string("\xdd\xff\xff\xff\xff", 5)), "not valid msgpack");
  EXPECT_REFUSED(decode(std::string("\xdb\xff\xff\xff\xff", 5)), "not valid msgpack");
  EXPECT_REFUSED(decode(std::string("\xc6\xff\xff\xff\xff", 5)), "not valid msgpack");
}

// ------------------------------------------------------------------ fields

TEST(WireHeader, WrongVersion) {
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("v", 2)))), "wire version 2");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("v", 0)))), "wire version 0");
  // The message says which version this side speaks.
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("v", 2)))),
                 "speaks " + std::to_string(kWireVersion));
}

TEST(WireHeader, UnknownKind) {
  for (uint64_t k : {uint64_t{0}, uint64_t{kMaxKind} + 1, uint64_t{255}, uint64_t{1} << 40}) {
    EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("kind", k)))),
                   "unknown message kind " + std::to_string(k));
  }
}

TEST(WireHeader, UnknownCodec) {
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("codec", 8)))), "unknown codec id 8");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("codec", 255)))),
                 "unknown codec id 255");
}

TEST(WireHeader, MissingEachKey) {
  for (const auto& f : fields_of(chunk())) {
    SCOPED_TRACE(f.key);
    EXPECT_REFUSED(decode(pack_map(without(fields_of(chunk()), f.key))),
                   "lacks key '" + f.key + "'");
  }
}

TEST(WireHeader, UnknownKey) {
  // One key replaced by an unknown one (a 12th key would hit the map size limit first).
  Fields f = without(fields_of(chunk()), "layout");
  f.push_back(u("extra", 1));
  EXPECT_REFUSED(decode(pack_map(f)), "unknown header key 'extra'");
  Fields g = without(fields_of(chunk()), "seq");
  g.push_back(u("Seq", 0));
  EXPECT_REFUSED(decode(pack_map(g)), "unknown header key 'Seq'");
}

TEST(WireHeader, TooManyKeys) {
  Fields f = fields_of(chunk());
  f.push_back(f64("weight", 0.5));
  f.push_back(u("extra", 1));
  EXPECT_REFUSED(decode(pack_map(f)), "map size overflow");
}

// ------------------------------------------------------------------ push-sum weight

TEST(WireHeader, WeightIsOptionalAndDefaultsToOne) {
  auto d = decode(pack_map(fields_of(chunk())));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->weight, 1.0);
  // Unweighted headers are byte-for-byte what they were before the field existed.
  EXPECT_EQ(encode_header(chunk()), pack_map(fields_of(chunk())));
}

TEST(WireHeader, WeightRoundTripsExactly) {
  for (double w : {0.0, 0.5, 1.0 / 3.0, 1e-300, 7.25e10}) {
    Header h = chunk();
    h.weight = w;
    auto d = decode(encode_header(h));
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    expect_same(h, *d);
  }
}

// Found by fuzz/wire_header_fuzzer: msgpack packs whole-number doubles as integers,
// which lost the sign of -0.0 and was undefined behaviour for 2^64.
TEST(WireHeader, WeightsTravelAsFloat64Exactly) {
  for (double w : {-0.0, 0.0, 2.0, 18446744073709551616.0, 0.375, 1e300}) {
    Header h = chunk();
    h.weight = w;
    auto d = decode(encode_header(h));
    ASSERT_TRUE(d.is_ok()) << w << ": " << d.status().message();
    EXPECT_EQ(std::signbit(d->weight), std::signbit(w)) << w;
    EXPECT_EQ(d->weight, w);
    EXPECT_EQ(encode_header(*d), encode_header(h)) << "re-encodes to the same bytes";
  }
}

TEST(WireHeader, BadWeightsAreRefused) {
  auto with = [](Field w) {
    Fields f = fields_of(chunk());
    f.push_back(std::move(w));
    return pack_map(f);
  };
  EXPECT_REFUSED(decode(with(s("weight", "1"))), "'weight' is not a number");
  EXPECT_REFUSED(decode(with(f64("weight", -0.5))), "not finite and >= 0");
  EXPECT_REFUSED(decode(with(f64("weight", std::numeric_limits<double>::infinity()))),
                 "not finite and >= 0");
  EXPECT_REFUSED(decode(with(f64("weight", std::nan("")))), "not finite and >= 0");
  Fields twice = fields_of(chunk());
  twice.pop_back();  // room for two weights under the map size limit
  twice.push_back(f64("weight", 0.5));
  twice.push_back(f64("weight", 0.5));
  EXPECT_REFUSED(decode(pack_map(twice)), "duplicate header key 'weight'");
  Header hello;
  hello.kind = Kind::kHello;
  Fields f = fields_of(hello);
  f.push_back(f64("weight", 0.5));
  EXPECT_REFUSED(decode(pack_map(f)), "only model-chunk and state-chunk messages carry a weight");
}

TEST(WireHeader, NonStringKey) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(1), pk.pack(1), pk.pack(1);
  EXPECT_REFUSED(decode(std::string(buf.data(), buf.size())), "key is not a string");
}

TEST(WireHeader, DuplicateKey) {
  // Each key repeated in place of another one, so the map keeps its 11 entries.
  const Fields all = fields_of(chunk());
  for (size_t k = 0; k < all.size(); ++k) {
    SCOPED_TRACE(all[k].key);
    Fields g = all;
    g[(k + 1) % all.size()] = all[k];
    EXPECT_REFUSED(decode(pack_map(g)), "duplicate header key '" + all[k].key + "'");
  }
}

TEST(WireHeader, NegativeValue) {
  for (const auto& f : fields_of(chunk())) {
    SCOPED_TRACE(f.key);
    EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), i(f.key, -1)))),
                   "'" + f.key + "' is not an unsigned integer");
  }
}

TEST(WireHeader, NonIntegerValues) {
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), s("round", "7")))),
                 "'round' is not an unsigned integer");
  // msgpack-cxx packs an integral double as an integer: use a fraction.
  Fields f = with(fields_of(chunk()), {"seq", [](Packer& pk) { pk.pack_double(1.5); }});
  EXPECT_REFUSED(decode(pack_map(f)), "'seq' is not an unsigned integer");
  f = with(fields_of(chunk()), {"from", [](Packer& pk) { pk.pack_true(); }});
  EXPECT_REFUSED(decode(pack_map(f)), "'from' is not an unsigned integer");
  f = with(fields_of(chunk()), {"tensor", [](Packer& pk) { pk.pack_nil(); }});
  EXPECT_REFUSED(decode(pack_map(f)), "'tensor' is not an unsigned integer");
  f = with(fields_of(chunk()), {"offset", [](Packer& pk) { pk.pack_array(0); }});
  EXPECT_REFUSED(decode(pack_map(f)), "'offset' is not an unsigned integer");
  f = with(fields_of(chunk()), {"layout", [](Packer& pk) { pk.pack_map(0); }});
  EXPECT_REFUSED(decode(pack_map(f)), "'layout' is not an unsigned integer");
}

TEST(WireHeader, Uint32Overflow) {
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("from", 1ull << 32)))),
                 "'from' out of range");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("tensor", UINT64_MAX)))),
                 "'tensor' out of range");
  // The largest uint32 is fine.
  EXPECT_TRUE(decode(pack_map(with(fields_of(chunk()), u("from", UINT32_MAX)))).is_ok());
}

// ------------------------------------------------------------------ consistency

TEST(WireHeader, HelloOrByeWithPayload) {
  Header h;
  h.kind = Kind::kHello;
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("numel", 1)))), "hello carries no payload");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("bytes", 4)))), "bytes=4");
  h.kind = Kind::kBye;
  EXPECT_REFUSED(decode(pack_map(with(with(fields_of(h), u("numel", 2)), u("bytes", 8)))),
                 "bye carries no payload");
}

// The ring transport's port, told to the left neighbor: a real port, no payload.
TEST(WireHeader, RingAddressCarriesAPortAndNothingElse) {
  Header h;
  h.kind = Kind::kRingAddress;
  h.from = 2;
  h.offset = 40123;
  h.layout = 7;
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("offset", 0)))), "ring-address with port 0");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("offset", 65536)))), "port 65536");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("bytes", 4)))),
                 "ring-address carries no payload");
}

TEST(WireHeader, RingProbeRoundTripsAndCarriesNoPayload) {
  Header h;
  h.kind = Kind::kRingProbe;
  h.from = 3;
  h.round = 17;           // next round
  h.offset = 2;           // epoch
  h.seq = 0xfeedbeefull;  // view
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("numel", 1)))),
                 "ring-probe carries no payload");
}

TEST(WireHeader, CopyRequestRoundTripsAndCarriesNoPayload) {
  Header h;
  h.kind = Kind::kCopyRequest;
  h.from = 4;
  h.round = 9;  // the sender's next round
  h.layout = 0xabcdull;
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
  EXPECT_STREQ(kind_name(Kind::kCopyRequest), "copy-request");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("bytes", 4)))),
                 "copy-request carries no payload");
}

TEST(WireHeader, NcclIdCarriesExactlyTheIdsBytes) {
  Header h;
  h.kind = Kind::kNcclId;
  h.from = 0;
  h.round = 5;
  h.bytes = kNcclIdBytes;
  auto d = decode(encode_header(h));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_same(h, *d);
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("bytes", 127)))), "exactly 128 bytes");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(h), u("numel", 32)))), "numel=32");
}

TEST(WireHeader, ChunkWithoutElements) {
  EXPECT_REFUSED(decode(pack_map(with(with(fields_of(chunk()), u("numel", 0)), u("bytes", 0)))),
                 "numel=0");
}

TEST(WireHeader, BytesMustBeNumelTimesFour) {
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("bytes", 4096 * 4 - 1)))),
                 "numel=4096 but bytes=16383");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("bytes", 4096 * 2)))),
                 "numel=4096 but bytes=8192");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("numel", 4095)))),
                 "numel=4095 but bytes=16384");
}

TEST(WireHeader, NumelTimesFourMustNotWrap) {
  // 2^62 * 4 wraps to 0 in 64 bits, 2^62 + 1 to 4: neither matches the payload.
  EXPECT_REFUSED(
      decode(pack_map(with(with(fields_of(chunk()), u("numel", 1ull << 62)), u("bytes", 0)))),
      "bytes=0");
  EXPECT_REFUSED(
      decode(pack_map(with(with(fields_of(chunk()), u("numel", (1ull << 62) + 1)), u("bytes", 4)))),
      "bytes=4");
}

TEST(WireHeader, OffsetOverflow) {
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("offset", UINT64_MAX)))),
                 "offset overflows");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("offset", UINT64_MAX - 4095)))),
                 "offset overflows");
}

TEST(WireHeader, PayloadOverLimit) {
  uint64_t numel = kMaxPayloadBytes / 4 + 1;
  EXPECT_REFUSED(
      decode(pack_map(with(with(fields_of(chunk()), u("numel", numel)), u("bytes", numel * 4)))),
      "exceeds limit");
  EXPECT_REFUSED(decode(pack_map(with(fields_of(chunk()), u("bytes", UINT64_MAX)))),
                 "exceeds limit");
}

// ------------------------------------------------------------------ payload frames

TEST(WireHeader, ValidatePayload) {
  Header h = chunk();
  EXPECT_TRUE(validate_payload(h, 1, h.bytes).is_ok());
  Status st = validate_payload(h, 0, 0);
  EXPECT_FALSE(st.is_ok());
  EXPECT_THAT(st.message(), HasSubstr("0 payload frames, expected 1"));
  st = validate_payload(h, 2, h.bytes);
  EXPECT_THAT(st.message(), HasSubstr("2 payload frames, expected 1"));
  st = validate_payload(h, 1, h.bytes - 1);
  EXPECT_EQ(st.code(), Status::Code::kProtocol);
  EXPECT_THAT(st.message(), HasSubstr("payload is 16383 bytes but header says 16384"));

  Header hello;
  EXPECT_TRUE(validate_payload(hello, 0, 0).is_ok());
  st = validate_payload(hello, 1, 0);
  EXPECT_THAT(st.message(), HasSubstr("hello has 1 payload frames, expected 0"));
}

// ------------------------------------------------------------------ fuzz

// If a byte string decodes, the header is self-consistent: it re-encodes and decodes
// to the same header.
void check_consistent(const std::string& bytes) {
  auto d = decode(bytes);
  if (!d.is_ok()) {
    EXPECT_FALSE(d.status().message().empty());
    return;
  }
  auto again = decode(encode_header(*d));
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  expect_same(*d, *again);
  EXPECT_TRUE(validate_payload(*d, d->bytes ? 1 : 0, d->bytes).is_ok());
  if (d->kind == Kind::kModelChunk || d->kind == Kind::kStateChunk) {
    EXPECT_GT(d->numel, 0u);
    EXPECT_EQ(d->bytes, d->numel * 4);
    EXPECT_LE(d->bytes, kMaxPayloadBytes);
  } else {
    EXPECT_EQ(d->bytes, 0u);
  }
}

TEST(WireHeaderFuzz, RandomBytes) {
  std::mt19937_64 rng(12345);
  for (int it = 0; it < 3000; ++it) {
    size_t n = rng() % 64;
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    // Start some with a map header so the decoder gets past the first byte.
    if (n > 0 && it % 2 == 0) s[0] = static_cast<char>(0x80 | (rng() % 16));
    check_consistent(s);
  }
}

TEST(WireHeaderFuzz, SingleByteMutations) {
  std::mt19937_64 rng(777);
  const std::string base[] = {encode_header(chunk()), encode_header(Header{})};
  int decoded = 0;
  for (int it = 0; it < 5000; ++it) {
    std::string s = base[it % 2];
    size_t pos = rng() % s.size();
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

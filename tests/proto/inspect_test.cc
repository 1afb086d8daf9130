// The reports of gossipctl doctor and status --cluster (proto/inspect.h): they come
// from peers, so every malformed or hostile one must be refused with a reason, and
// what is kept of a string must be safe to print on a terminal.
#include "proto/inspect.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <msgpack.hpp>

#include "proto/message.h"

namespace gossip::proto::inspect {
namespace {

using ::testing::HasSubstr;

Link sample_link() {
  Link l;
  l.to = 3;
  l.endpoint = "tcp://10.0.0.3:7003";
  l.connect = Connect::kRefused;
  l.connect_error = "Connection refused";
  l.connect_ms = 0.2;
  l.handshake = Handshake::kPending;
  l.connects = 4, l.disconnects = 3, l.handshake_failures = 1;
  l.pings = 5, l.pongs = 2, l.rtt_ms = 0.4;
  l.clock_offset_ms = -12.5, l.clock_error_ms = 0.2;
  l.tcp_rtt_ms = 0.05, l.segments_sent = 1000, l.segments_retransmitted = 7;
  l.bandwidth_bytes_per_s = 1.2e9;
  l.version = "0.9.0", l.strategy = "local-sgd";
  l.silent_ms = 1500, l.refused = 2, l.last_refusal = "wire version 2";
  return l;
}

TEST(Inspect, ALinkRowRoundTrips) {
  LinkRow row{2, {"0.9.0", "gossip", true}, {sample_link(), Link{}}, {"key abc from 1.2.3.4"}};
  const std::string bytes = encode(row);
  auto back = decode_links(bytes.data(), bytes.size());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->node, 2u);
  EXPECT_EQ(back->facts.strategy, "gossip");
  EXPECT_TRUE(back->facts.curve);
  ASSERT_EQ(back->links.size(), 2u);
  const Link& l = back->links[0];
  EXPECT_EQ(l.connect, Connect::kRefused);
  EXPECT_EQ(l.handshake, Handshake::kPending);
  EXPECT_EQ(l.connect_error, "Connection refused");
  EXPECT_DOUBLE_EQ(l.clock_offset_ms, -12.5);
  EXPECT_EQ(l.segments_retransmitted, 7u);
  EXPECT_EQ(l.last_refusal, "wire version 2");
  EXPECT_EQ(back->links[1].rtt_ms, kNone);
  EXPECT_EQ(back->refused_keys, std::vector<std::string>{"key abc from 1.2.3.4"});
}

TEST(Inspect, AMemberStatusAndASummaryRoundTrip) {
  MemberStatus s;
  s.node = 4, s.state = "training", s.round = 17, s.step = 68, s.trainers = 2;
  s.sent_bytes = 1 << 20, s.received_bytes = 2 << 20, s.round_ms = 12.5;
  s.last_error = "round 3: peer 2 silent", s.last_error_age_s = 30;
  s.samples = {1.5f, -2.0f, 0.0f};
  const std::string bytes = encode(s);
  auto back = decode_status(bytes.data(), bytes.size());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->step, 68u);
  EXPECT_EQ(back->last_error, "round 3: peer 2 silent");
  EXPECT_EQ(back->samples, s.samples);
  Summary sum{1, {0, 1, 2}, {2}, 1.25};
  const std::string sb = encode(sum);
  auto sback = decode_summary(sb.data(), sb.size());
  ASSERT_TRUE(sback.is_ok()) << sback.status().message();
  EXPECT_EQ(sback->members, sum.members);
  EXPECT_EQ(sback->silent, sum.silent);
}

TEST(Inspect, StringsArePrintableAndBounded) {
  MemberStatus s;
  s.last_error = "\x1b]0;owned\x07" + std::string(1000, 'a');
  const std::string bytes = encode(s);
  auto back = decode_status(bytes.data(), bytes.size());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->last_error.size(), kMaxText);
  EXPECT_EQ(back->last_error.substr(0, 9), "?]0;owned");
  // A hostile sender does not go through encode(): the decoder cuts too.
  msgpack::sbuffer buf;
  msgpack::packer pk(buf);
  pk.pack_array(3);
  pk.pack(std::string("\x1b[2J") + std::string(500, 'v'));
  pk.pack(std::string("gossip"));
  pk.pack(false);
  auto f = decode_facts(buf.data(), buf.size());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version.size(), kMaxText);
  EXPECT_EQ(f->version[0], '?');
}

TEST(Inspect, MalformedReportsAreRefusedWithAReason) {
  const auto refused = [](const std::string& bytes) {
    auto r = decode_links(bytes.data(), bytes.size());
    EXPECT_FALSE(r.is_ok());
    return r.is_ok() ? std::string() : r.status().message();
  };
  EXPECT_THAT(refused(""), HasSubstr("empty"));
  EXPECT_THAT(refused(std::string("\xc1", 1)), HasSubstr("msgpack"));
  EXPECT_THAT(refused(std::string(kMaxInspectReportBytes + 1, '\x90')), HasSubstr("at most"));
  LinkRow row{1, {}, {sample_link()}, {}};
  EXPECT_THAT(refused(encode(row) + "x"), HasSubstr("trailing"));
  // A field of the wrong type, a NaN, an unknown enum value, more pongs than pings.
  const auto with_link = [&](auto change) {
    msgpack::sbuffer buf;
    msgpack::packer pk(buf);
    const std::string good = encode(LinkRow{1, {}, {sample_link()}, {}});
    msgpack::object_handle oh = msgpack::unpack(good.data(), good.size());
    msgpack::object o = oh.get();
    msgpack::zone z;
    std::vector<msgpack::object> fields(o.via.array.ptr[2].via.array.ptr[0].via.array.ptr,
                                        o.via.array.ptr[2].via.array.ptr[0].via.array.ptr + 23);
    change(fields, z);
    pk.pack_array(4);
    pk.pack(o.via.array.ptr[0]);
    pk.pack(o.via.array.ptr[1]);
    pk.pack_array(1);
    pk.pack_array(static_cast<uint32_t>(fields.size()));
    for (const auto& f : fields) pk.pack(f);
    pk.pack_array(0);
    return std::string(buf.data(), buf.size());
  };
  EXPECT_THAT(refused(with_link([](auto& f, auto& z) { f[0] = msgpack::object("x", z); })),
              HasSubstr("links[0].to must be an unsigned integer"));
  EXPECT_THAT(refused(with_link([](auto& f, auto&) {
                f[11] = msgpack::object(std::numeric_limits<double>::quiet_NaN());
              })),
              HasSubstr("rtt_ms must be finite"));
  EXPECT_THAT(refused(with_link([](auto& f, auto&) { f[11] = msgpack::object(-5.0); })),
              HasSubstr("rtt_ms must be finite and >= 0"));
  EXPECT_THAT(refused(with_link([](auto& f, auto&) { f[2] = msgpack::object(99); })),
              HasSubstr("connect must be a known value"));
  EXPECT_THAT(refused(with_link([](auto& f, auto&) { f[10] = msgpack::object(9); })),
              HasSubstr("pongs to"));
  EXPECT_THAT(refused(with_link([](auto& f, auto&) { f.pop_back(); })), HasSubstr("23 fields"));
}

TEST(Inspect, TooManySamplesOrMembersAreRefused) {
  MemberStatus s;
  s.samples.assign(kMaxSamples + 1, 1.0f);
  const std::string bytes = encode(s);
  auto r = decode_status(bytes.data(), bytes.size());
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("samples must be at most 128 long"));
  // A length that claims more than the bytes hold is refused by the unpacker's limit.
  std::string huge("\x94\x00\xdd\xff\xff\xff\xff", 7);
  auto h = decode_summary(huge.data(), huge.size());
  EXPECT_FALSE(h.is_ok());
}

}  // namespace
}  // namespace gossip::proto::inspect

// The trainer <-> daemon IPC codec (proto/ipc.h): round trips of every message, and
// strict, crash-free refusal of malformed messages with errors that name the field.

#include "proto/ipc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <msgpack.hpp>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace gossip::proto::ipc {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Packer = msgpack::packer<msgpack::sbuffer>;

// ------------------------------------------------------------------ a msgpack tree
// Tests take a real encoded message apart, change one thing and pack it again.

struct Val;
using Array = std::vector<Val>;
using Map = std::vector<std::pair<Val, Val>>;
struct Raw {
  std::string bytes;  // packed verbatim: lets a test write hostile headers
};
struct Nil {};

struct Val {
  std::variant<Nil, bool, uint64_t, int64_t, double, std::string, Array, Map, Raw> v;
};

Val U(uint64_t x) { return Val{x}; }
Val I(int64_t x) { return Val{x}; }
Val S(std::string s) { return Val{std::move(s)}; }
Val B(bool b) { return Val{b}; }
Val F(double d) { return Val{d}; }
Val R(std::string bytes) { return Val{Raw{std::move(bytes)}}; }
Val A(Array a) { return Val{std::move(a)}; }
Val M(Map m) { return Val{std::move(m)}; }

void pack(msgpack::sbuffer& buf, const Val& x) {
  struct Visitor {
    msgpack::sbuffer& buf;
    Packer pk{buf};
    void operator()(Nil) { pk.pack_nil(); }
    void operator()(bool b) { b ? pk.pack_true() : pk.pack_false(); }
    void operator()(uint64_t u) { pk.pack_uint64(u); }
    void operator()(int64_t i) { pk.pack_int64(i); }
    void operator()(double d) { pk.pack_double(d); }
    void operator()(const std::string& s) { pk.pack(s); }
    void operator()(const Array& a) {
      pk.pack_array(static_cast<uint32_t>(a.size()));
      for (const auto& e : a) pack(buf, e);
    }
    void operator()(const Map& m) {
      pk.pack_map(static_cast<uint32_t>(m.size()));
      for (const auto& [k, v] : m) pack(buf, k), pack(buf, v);
    }
    void operator()(const Raw& r) { buf.write(r.bytes.data(), r.bytes.size()); }
  };
  std::visit(Visitor{buf}, x.v);
}

std::string bytes(const Val& x) {
  msgpack::sbuffer buf;
  pack(buf, x);
  return std::string(buf.data(), buf.size());
}

Val from_object(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return Val{Nil{}};
    case msgpack::type::BOOLEAN:
      return B(o.via.boolean);
    case msgpack::type::POSITIVE_INTEGER:
      return U(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return I(o.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return F(o.via.f64);
    case msgpack::type::STR:
      return S(std::string(o.via.str.ptr, o.via.str.size));
    case msgpack::type::ARRAY: {
      Array a;
      for (uint32_t i = 0; i < o.via.array.size; ++i) a.push_back(from_object(o.via.array.ptr[i]));
      return A(std::move(a));
    }
    case msgpack::type::MAP: {
      Map m;
      for (uint32_t i = 0; i < o.via.map.size; ++i)
        m.emplace_back(from_object(o.via.map.ptr[i].key), from_object(o.via.map.ptr[i].val));
      return M(std::move(m));
    }
    default:
      ADD_FAILURE() << "unexpected msgpack type " << o.type;
      return Val{Nil{}};
  }
}

Val tree(const std::string& s) {
  msgpack::object_handle oh = msgpack::unpack(s.data(), s.size());
  return from_object(oh.get());
}
Val tree(const Message& m) { return tree(encode(m)); }

Map& map_of(Val& x) { return std::get<Map>(x.v); }
Array& array_of(Val& x) { return std::get<Array>(x.v); }

// The value under string key `key` of a map.
Val& at(Val& map, const std::string& key) {
  for (auto& [k, v] : map_of(map))
    if (auto* s = std::get_if<std::string>(&k.v); s && *s == key) return v;
  ADD_FAILURE() << "no key " << key;
  static Val none;
  return none;
}
void erase(Val& map, const std::string& key) {
  std::erase_if(map_of(map), [&](const auto& kv) {
    auto* s = std::get_if<std::string>(&kv.first.v);
    return s && *s == key;
  });
}
void add(Val& map, const std::string& key, Val v) {
  map_of(map).emplace_back(S(key), std::move(v));
}
std::vector<std::string> keys(Val& map) {
  std::vector<std::string> out;
  for (auto& [k, v] : map_of(map)) out.push_back(std::get<std::string>(k.v));
  return out;
}

// ------------------------------------------------------------------ samples

Layout sample_layout() {
  Layout l;
  l.tensors = {{"conv1.weight", DType::kF32, 32 * 3 * 5 * 5},
               {"conv1.bias", DType::kF32, 32},
               {"fc1.weight", DType::kF32, 1u << 20},
               {"fc1.bias", DType::kF32, 1},
               {"fc2.weight", DType::kF32, (uint64_t{1} << 33) + 7}};
  return l;
}

Traffic sample_traffic(uint64_t seed) {
  Traffic t;
  t.payload_sent = seed + 1;
  t.payload_recv = seed + 2;
  t.wire_sent = seed + (uint64_t{1} << 40);
  t.wire_recv = UINT64_MAX - seed;
  t.msgs_sent = seed + 5;
  t.msgs_recv = seed + 6;
  t.dropped = seed + 7;
  return t;
}

Attach sample_attach() {
  Attach a;
  a.trainer = "rank-3 (pid 4242)";
  a.local_rank = 3;
  a.pid = 4242;
  a.layout = sample_layout();
  a.device = "cuda:1";
  return a;
}

AttachOk sample_attach_ok() {
  AttachOk ok;
  ok.node = 2;
  ok.nodes = 16;
  ok.slot = UINT32_MAX;
  ok.arena = "/gossipd-1000-2-31337";
  ok.arena_bytes = uint64_t{5} << 33;
  ok.slot_offset = uint64_t{1} << 35;
  ok.offsets = {0, 2400, 2432, 1050976, 1050992};
  ok.strategy = "local-sgd";
  ok.gradients = true;
  ok.period = 8;
  ok.post_local = 100;
  ok.step = 123456789;
  ok.initialized = true;
  ok.fragments = 4;
  ok.overlap = 2;
  return ok;
}

SyncOk sample_sync_ok() { return SyncOk{77, 616, sample_traffic(1000)}; }

StatsReply sample_stats_reply() {
  StatsReply r;
  r.node = 5;
  r.strategy = "choco";
  r.round = 99;
  r.step = 990;
  r.trainers = 4;
  r.traffic = sample_traffic(10);
  r.peers = {{1, "tcp://10.0.0.1:5555", sample_traffic(20), 1234},
             {UINT32_MAX, "tcp://[::1]:6000", sample_traffic(30), 0},
             {9, "", Traffic{}, kNeverHeard}};
  r.timing = {1500000, 9000000, 42, 840000, 21000, 4096, 250};
  return r;
}

std::vector<Message> samples() {
  return {sample_attach(),
          sample_attach_ok(),
          Sync{UINT64_MAX, false, 2.302585, 16},
          sample_sync_ok(),
          Detach{},
          DetachOk{},
          StatsRequest{},
          sample_stats_reply(),
          Error{"layout differs: tensor 2 'fc1.weight'"},
          Shutdown{"SIGTERM"},
          Start{},
          SyncRange{UINT64_MAX, 1000, 250, true},
          InspectRequest{InspectRequest::kStatus, 2500},
          InspectReply{{std::string("\x94\x00", 2), std::string(60 << 10, 'x')}},
          Leave{},
          Ban{7},
          Forget{3}};
}

// ------------------------------------------------------------------ comparisons

void expect_eq(const Traffic& a, const Traffic& b) {
  EXPECT_EQ(a.payload_sent, b.payload_sent);
  EXPECT_EQ(a.payload_recv, b.payload_recv);
  EXPECT_EQ(a.wire_sent, b.wire_sent);
  EXPECT_EQ(a.wire_recv, b.wire_recv);
  EXPECT_EQ(a.msgs_sent, b.msgs_sent);
  EXPECT_EQ(a.msgs_recv, b.msgs_recv);
  EXPECT_EQ(a.dropped, b.dropped);
}
void expect_eq(const Attach& a, const Attach& b) {
  EXPECT_EQ(a.protocol, b.protocol);
  EXPECT_EQ(a.trainer, b.trainer);
  EXPECT_EQ(a.local_rank, b.local_rank);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.device, b.device);
}
void expect_eq(const AttachOk& a, const AttachOk& b) {
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.nodes, b.nodes);
  EXPECT_EQ(a.slot, b.slot);
  EXPECT_EQ(a.arena, b.arena);
  EXPECT_EQ(a.arena_bytes, b.arena_bytes);
  EXPECT_EQ(a.slot_offset, b.slot_offset);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.strategy, b.strategy);
  EXPECT_EQ(a.gradients, b.gradients);
  EXPECT_EQ(a.period, b.period);
  EXPECT_EQ(a.post_local, b.post_local);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.initialized, b.initialized);
  EXPECT_EQ(a.fragments, b.fragments);
  EXPECT_EQ(a.overlap, b.overlap);
}
void expect_eq(const Sync& a, const Sync& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.whole, b.whole);
  if (std::isnan(b.loss))
    EXPECT_TRUE(std::isnan(a.loss)) << a.loss;
  else
    EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.losses, b.losses);
}
void expect_eq(const SyncOk& a, const SyncOk& b) {
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.step, b.step);
  expect_eq(a.traffic, b.traffic);
}
void expect_eq(const Start&, const Start&) {}
void expect_eq(const SyncRange& a, const SyncRange& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.numel, b.numel);
  EXPECT_EQ(a.last, b.last);
}
void expect_eq(const Detach&, const Detach&) {}
void expect_eq(const DetachOk&, const DetachOk&) {}
void expect_eq(const StatsRequest&, const StatsRequest&) {}
void expect_eq(const StatsReply& a, const StatsReply& b) {
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.strategy, b.strategy);
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.trainers, b.trainers);
  expect_eq(a.traffic, b.traffic);
  ASSERT_EQ(a.peers.size(), b.peers.size());
  for (size_t i = 0; i < a.peers.size(); ++i) {
    EXPECT_EQ(a.peers[i].id, b.peers[i].id);
    EXPECT_EQ(a.peers[i].endpoint, b.peers[i].endpoint);
    expect_eq(a.peers[i].traffic, b.peers[i].traffic);
    EXPECT_EQ(a.peers[i].silent_ms, b.peers[i].silent_ms);
  }
  EXPECT_EQ(a.timing.trainer_wait_us, b.timing.trainer_wait_us);
  EXPECT_EQ(a.timing.trainer_attached_us, b.timing.trainer_attached_us);
  EXPECT_EQ(a.timing.rounds, b.timing.rounds);
  EXPECT_EQ(a.timing.round_us, b.timing.round_us);
  EXPECT_EQ(a.timing.last_round_us, b.timing.last_round_us);
  EXPECT_EQ(a.timing.last_round_payload, b.timing.last_round_payload);
  EXPECT_EQ(a.timing.last_overlap_permille, b.timing.last_overlap_permille);
}
void expect_eq(const InspectRequest& a, const InspectRequest& b) {
  EXPECT_EQ(a.what, b.what);
  EXPECT_EQ(a.timeout_ms, b.timeout_ms);
}
void expect_eq(const InspectReply& a, const InspectReply& b) { EXPECT_EQ(a.parts, b.parts); }
void expect_eq(const Error& a, const Error& b) { EXPECT_EQ(a.message, b.message); }
void expect_eq(const Shutdown& a, const Shutdown& b) { EXPECT_EQ(a.reason, b.reason); }
void expect_eq(const Leave&, const Leave&) {}
void expect_eq(const Ban& a, const Ban& b) { EXPECT_EQ(a.peer, b.peer); }
void expect_eq(const Forget& a, const Forget& b) { EXPECT_EQ(a.peer, b.peer); }

void expect_eq(const Message& a, const Message& b) {
  ASSERT_EQ(a.index(), b.index()) << message_name(a) << " vs " << message_name(b);
  std::visit([&](const auto& x) { expect_eq(x, std::get<std::decay_t<decltype(x)>>(b)); }, a);
}

Result<Message> decode(const std::string& s) { return ipc::decode(s.data(), s.size()); }
Result<Message> decode(const Val& v) { return decode(bytes(v)); }

#define EXPECT_REFUSED(r, matcher)                                \
  do {                                                            \
    auto _r = (r);                                                \
    ASSERT_FALSE(_r.is_ok()) << "decoded although it should not"; \
    EXPECT_THAT(_r.status().message(), matcher);                  \
  } while (0)

// ------------------------------------------------------------------ round trips

TEST(Ipc, RoundTripEveryMessage) {
  for (const Message& m : samples()) {
    SCOPED_TRACE(message_name(m));
    auto d = decode(encode(m));
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    expect_eq(m, *d);
    EXPECT_EQ(encode(*d), encode(m));
  }
}

TEST(Ipc, RoundTripDefaults) {
  Message defaults[] = {AttachOk{}, Sync{}, SyncOk{}, StatsReply{}, Error{}, Shutdown{}};
  for (const Message& m : defaults) {
    SCOPED_TRACE(message_name(m));
    auto d = decode(encode(m));
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    expect_eq(m, *d);
  }
}

TEST(Ipc, RoundTripIntegerExtremes) {
  Attach a = sample_attach();
  for (int32_t pid : {0, -1, INT32_MIN, INT32_MAX}) {
    a.pid = pid;
    a.local_rank = UINT32_MAX;
    auto d = decode(encode(a));
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    expect_eq(Message(a), *d);
  }
}

TEST(Ipc, RoundTripLargestLayout) {
  Attach a = sample_attach();
  a.layout.tensors.clear();
  for (size_t i = 0; i < kMaxTensors; ++i)
    a.layout.tensors.push_back({"t" + std::to_string(i), DType::kF32, i + 1});
  AttachOk ok = sample_attach_ok();
  ok.offsets = tensor_offsets(a.layout);
  for (const Message& m : {Message(a), Message(ok)}) {
    auto d = decode(encode(m));
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    expect_eq(m, *d);
  }
}

TEST(Ipc, MessageNames) {
  std::vector<std::string> names;
  for (const Message& m : samples()) names.push_back(message_name(m));
  EXPECT_EQ(names, (std::vector<std::string>{"attach", "attach_ok", "sync", "sync_ok", "detach",
                                             "detach_ok", "stats", "stats_reply", "error",
                                             "shutdown", "start", "sync_range", "inspect",
                                             "inspect_reply", "leave", "ban", "forget"}));
}

// The format other implementations (the Python client) read and write.
TEST(Ipc, WireFormat) {
  Val t = tree(sample_attach());
  EXPECT_THAT(keys(t), (std::vector<std::string>{"v", "kind", "protocol", "trainer", "local_rank",
                                                 "pid", "layout", "device"}));
  EXPECT_EQ(std::get<uint64_t>(at(t, "v").v), kProtocolVersion);
  EXPECT_EQ(std::get<std::string>(at(t, "kind").v), "attach");
  Val& t0 = array_of(at(t, "layout"))[0];
  EXPECT_THAT(keys(t0), (std::vector<std::string>{"name", "dtype", "numel"}));
  EXPECT_EQ(std::get<std::string>(at(t0, "name").v), "conv1.weight");
  EXPECT_EQ(std::get<std::string>(at(t0, "dtype").v), "f32");
  EXPECT_EQ(std::get<uint64_t>(at(t0, "numel").v), 2400u);

  Val s = tree(sample_stats_reply());
  EXPECT_THAT(keys(at(s, "traffic")),
              (std::vector<std::string>{"payload_sent", "payload_recv", "wire_sent", "wire_recv",
                                        "msgs_sent", "msgs_recv", "dropped"}));
  Val& p0 = array_of(at(s, "peers"))[0];
  EXPECT_THAT(keys(p0), (std::vector<std::string>{"id", "endpoint", "traffic", "silent_ms"}));
  EXPECT_EQ(std::get<uint64_t>(at(p0, "silent_ms").v), 1234u);

  Val d = tree(Detach{});
  EXPECT_THAT(keys(d), (std::vector<std::string>{"v", "kind"}));
}

TEST(Ipc, KeyOrderDoesNotMatter) {
  for (const Message& m : samples()) {
    Val t = tree(m);
    std::reverse(map_of(t).begin(), map_of(t).end());
    auto d = decode(t);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    expect_eq(m, *d);
  }
}

TEST(Ipc, AcceptsFloat32Alias) {
  Val t = tree(sample_attach());
  at(array_of(at(t, "layout"))[1], "dtype") = S("float32");
  auto d = decode(t);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_eq(Message(sample_attach()), *d);
}

// ------------------------------------------------------------------ envelope

TEST(Ipc, EmptyAndOversized) {
  EXPECT_REFUSED(ipc::decode(nullptr, 0), HasSubstr("empty"));
  // Refused on its size alone, before any parsing.
  std::string big(kMaxIpcMessageBytes + 1, '\xc0');
  EXPECT_REFUSED(decode(big),
                 AllOf(HasSubstr(std::to_string(kMaxIpcMessageBytes + 1)), HasSubstr("limit")));
}

TEST(Ipc, NotMsgpack) {
  EXPECT_REFUSED(decode(std::string("\xc1", 1)), HasSubstr("not valid msgpack"));
  EXPECT_REFUSED(decode(std::string("\x81\xc1\x00", 3)), HasSubstr("not valid msgpack"));
}

TEST(Ipc, NotAMap) {
  EXPECT_REFUSED(decode(A({S("v"), U(1)})), HasSubstr("is an array, not a map"));
  EXPECT_REFUSED(decode(U(1)), HasSubstr("not a map"));
  EXPECT_REFUSED(decode(S("attach")), HasSubstr("not a map"));
  EXPECT_REFUSED(decode(Val{Nil{}}), HasSubstr("not a map"));
}

TEST(Ipc, AWholeSyncRoundTrips) {
  auto d = decode(encode(Sync{12, true}));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  ASSERT_TRUE(std::holds_alternative<Sync>(*d));
  expect_eq(std::get<Sync>(*d), Sync{12, true});
}

TEST(Ipc, ASyncCarriesANonFiniteLossAsItIs) {
  // The divergence watch needs the trainer's NaN or Inf, not a stand-in.
  for (double loss : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    auto d = decode(encode(Sync{3, false, loss, 2}));
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    expect_eq(std::get<Sync>(*d), Sync{3, false, loss, 2});
  }
  Val t = tree(Sync{3, false, 1.0, 1});
  at(t, "loss") = S("low");
  EXPECT_REFUSED(decode(t), HasSubstr("sync: field 'loss' is not a number (it is a string)"));
  t = tree(Sync{3, false, 1.0, 1});
  at(t, "losses") = F(1.5);
  EXPECT_REFUSED(decode(t), HasSubstr("sync: field 'losses' is not an unsigned integer"));
}

TEST(Ipc, AttachOkWithNoFragmentsIsRefused) {
  Val t = tree(sample_attach_ok());
  at(t, "fragments") = U(0);
  EXPECT_REFUSED(decode(t), HasSubstr("attach_ok: field 'fragments' is 0"));
}

TEST(Ipc, TrailingBytes) {
  EXPECT_REFUSED(decode(encode(Detach{}) + '\0'), HasSubstr("1 trailing bytes"));
  EXPECT_REFUSED(decode(encode(Sync{1}) + encode(Sync{2})), HasSubstr("trailing bytes"));
}

TEST(Ipc, WrongVersion) {
  for (uint64_t v : {uint64_t{0}, uint64_t{kProtocolVersion} + 1, uint64_t{1} << 40}) {
    Val t = tree(Sync{5});
    at(t, "v") = U(v);
    auto d = decode(t);
    EXPECT_REFUSED(d, AllOf(HasSubstr("version " + std::to_string(v)),
                            HasSubstr("speaks " + std::to_string(kProtocolVersion))));
    EXPECT_EQ(d.status().code(), Status::Code::kProtocol);
  }
  Val t = tree(Sync{5});
  at(t, "v") = S("1");
  EXPECT_REFUSED(decode(t), HasSubstr("'v' is not an unsigned integer"));
  at(t, "v") = I(-1);
  EXPECT_REFUSED(decode(t), HasSubstr("'v' is not an unsigned integer"));
  erase(t, "v");
  EXPECT_REFUSED(decode(t), HasSubstr("lacks the protocol version 'v'"));
}

TEST(Ipc, AttachProtocolField) {
  Val t = tree(sample_attach());
  at(t, "protocol") = U(kProtocolVersion + 1);
  EXPECT_REFUSED(decode(t), AllOf(HasSubstr("attach: field 'protocol' is " +
                                            std::to_string(kProtocolVersion + 1)),
                                  HasSubstr("speaks " + std::to_string(kProtocolVersion))));
}

TEST(Ipc, UnknownKind) {
  Val t = tree(Detach{});
  at(t, "kind") = S("frobnicate");
  EXPECT_REFUSED(decode(t), HasSubstr("unknown ipc message kind 'frobnicate'"));
  at(t, "kind") = S("");
  EXPECT_REFUSED(decode(t), HasSubstr("unknown ipc message kind ''"));
  at(t, "kind") = S("Attach");  // case matters
  EXPECT_REFUSED(decode(t), HasSubstr("unknown ipc message kind 'Attach'"));
  at(t, "kind") = U(1);
  EXPECT_REFUSED(decode(t), HasSubstr("'kind' is not a string"));
  erase(t, "kind");
  EXPECT_REFUSED(decode(t), HasSubstr("lacks 'kind'"));
}

TEST(Ipc, KindDecidesTheFields) {
  // A sync body under the kind "detach" has an unknown field.
  Val t = tree(Sync{3});
  at(t, "kind") = S("detach");
  EXPECT_REFUSED(decode(t), HasSubstr("detach: unknown field 'step'"));
}

TEST(Ipc, NonStringKey) {
  Val t = tree(Detach{});
  map_of(t).emplace_back(U(7), U(1));
  EXPECT_REFUSED(decode(t), HasSubstr("not a string"));
  Val a = tree(sample_attach());
  map_of(array_of(at(a, "layout"))[2]).emplace_back(U(7), U(1));
  EXPECT_REFUSED(decode(a), HasSubstr("in 'layout[2]': a key is an unsigned integer"));
}

// ------------------------------------------------------------------ fields

TEST(Ipc, MissingEachField) {
  for (const Message& m : samples()) {
    Val full = tree(m);
    for (const std::string& key : keys(full)) {
      if (key == "v" || key == "kind") continue;
      SCOPED_TRACE(key);
      Val t = full;
      erase(t, key);
      EXPECT_REFUSED(decode(t),
                     HasSubstr(std::string(message_name(m)) + ": missing field '" + key + "'"));
    }
  }
}

TEST(Ipc, MissingNestedField) {
  Val a = tree(sample_attach());
  for (const char* key : {"name", "dtype", "numel"}) {
    Val t = a;
    erase(array_of(at(t, "layout"))[1], key);
    EXPECT_REFUSED(decode(t), HasSubstr(std::string("attach: missing field 'layout[1].") + key));
  }
  Val s = tree(sample_stats_reply());
  erase(at(array_of(at(s, "peers"))[2], "traffic"), "dropped");
  EXPECT_REFUSED(decode(s), HasSubstr("stats_reply: missing field 'peers[2].traffic.dropped'"));
  Val o = tree(sample_sync_ok());
  erase(at(o, "traffic"), "wire_recv");
  EXPECT_REFUSED(decode(o), HasSubstr("sync_ok: missing field 'traffic.wire_recv'"));
}

TEST(Ipc, UnknownField) {
  for (const Message& m : samples()) {
    Val t = tree(m);
    add(t, "colour", S("blue"));
    EXPECT_REFUSED(decode(t), HasSubstr(std::string(message_name(m)) + ": unknown field 'colour'"));
  }
  Val a = tree(sample_attach());
  add(array_of(at(a, "layout"))[4], "requires_grad", B(true));
  EXPECT_REFUSED(decode(a), HasSubstr("attach: unknown field 'layout[4].requires_grad'"));
  Val s = tree(sample_stats_reply());
  add(at(array_of(at(s, "peers"))[0], "traffic"), "retries", U(1));
  EXPECT_REFUSED(decode(s), HasSubstr("stats_reply: unknown field 'peers[0].traffic.retries'"));
}

TEST(Ipc, DuplicateField) {
  for (const Message& m : samples()) {
    Val full = tree(m);
    for (const std::string& key : keys(full)) {
      SCOPED_TRACE(key);
      Val t = full;
      add(t, key, at(full, key));
      EXPECT_REFUSED(decode(t),
                     HasSubstr(std::string(message_name(m)) + ": duplicate field '" + key + "'"));
    }
  }
  Val a = tree(sample_attach());
  add(array_of(at(a, "layout"))[0], "numel", U(1));
  EXPECT_REFUSED(decode(a), HasSubstr("attach: duplicate field 'layout[0].numel'"));
}

// The value of a wrong type for each field: a string where a number is expected and
// a number where anything else is.
Val wrong_type(const Val& v) {
  // A number field takes an integer too (a loss of 2): a string is wrong for it.
  return std::holds_alternative<uint64_t>(v.v) || std::holds_alternative<int64_t>(v.v) ||
                 std::holds_alternative<double>(v.v)
             ? S("12")
             : U(12);
}

TEST(Ipc, WrongTypeOfEachField) {
  for (const Message& m : samples()) {
    Val full = tree(m);
    for (const std::string& key : keys(full)) {
      if (key == "v" || key == "kind") continue;
      SCOPED_TRACE(key);
      Val t = full;
      at(t, key) = wrong_type(at(full, key));
      EXPECT_REFUSED(decode(t),
                     AllOf(HasSubstr(std::string(message_name(m)) + ": field '" + key + "' is not"),
                           HasSubstr("(it is ")));
    }
  }
}

TEST(Ipc, WrongTypeNested) {
  Val a = tree(sample_attach());
  at(array_of(at(a, "layout"))[3], "numel") = S("1");
  EXPECT_REFUSED(decode(a),
                 HasSubstr("attach: field 'layout[3].numel' is not an unsigned integer"));

  a = tree(sample_attach());
  at(array_of(at(a, "layout"))[0], "name") = U(1);
  EXPECT_REFUSED(decode(a), HasSubstr("attach: field 'layout[0].name' is not a string"));

  a = tree(sample_attach());
  array_of(at(a, "layout"))[2] = A({});
  EXPECT_REFUSED(decode(a), HasSubstr("attach: field 'layout[2]' is not a map (it is an array)"));

  Val ok = tree(sample_attach_ok());
  array_of(at(ok, "offsets"))[3] = I(-4);
  EXPECT_REFUSED(decode(ok), HasSubstr("attach_ok: field 'offsets[3]' is not an unsigned integer"));

  ok = tree(sample_attach_ok());
  at(ok, "initialized") = U(1);
  EXPECT_REFUSED(decode(ok), HasSubstr("attach_ok: field 'initialized' is not a bool"));

  Val s = tree(sample_stats_reply());
  at(at(array_of(at(s, "peers"))[1], "traffic"), "msgs_sent") = F(1.5);
  EXPECT_REFUSED(decode(s), HasSubstr("field 'peers[1].traffic.msgs_sent' is not an unsigned "
                                      "integer (it is a float)"));

  s = tree(sample_stats_reply());
  at(s, "traffic") = A({});
  EXPECT_REFUSED(decode(s), HasSubstr("stats_reply: field 'traffic' is not a map"));
}

TEST(Ipc, NegativeForUnsigned) {
  Val t = tree(Sync{1});
  at(t, "step") = I(-1);
  EXPECT_REFUSED(decode(t), HasSubstr("sync: field 'step' is not an unsigned integer (it is a "
                                      "negative integer)"));
}

TEST(Ipc, IntegerRanges) {
  Val a = tree(sample_attach());
  at(a, "local_rank") = U(uint64_t{1} << 32);
  EXPECT_REFUSED(decode(a), HasSubstr("attach: field 'local_rank' is 4294967296, out of range "
                                      "for uint32"));
  a = tree(sample_attach());
  at(a, "pid") = U(uint64_t{1} << 31);
  EXPECT_REFUSED(decode(a), HasSubstr("attach: field 'pid' is 2147483648, out of range for int32"));
  a = tree(sample_attach());
  at(a, "pid") = I(int64_t{INT32_MIN} - 1);
  EXPECT_REFUSED(decode(a), HasSubstr("field 'pid' is -2147483649, out of range for int32"));
  a = tree(sample_attach());
  at(a, "pid") = S("42");
  EXPECT_REFUSED(decode(a), HasSubstr("field 'pid' is not an integer"));

  for (const char* key : {"node", "nodes", "slot"}) {
    Val ok = tree(sample_attach_ok());
    at(ok, key) = U(UINT64_MAX);
    EXPECT_REFUSED(decode(ok), HasSubstr(std::string("field '") + key + "' is " +
                                         std::to_string(UINT64_MAX) + ", out of range"));
  }
  Val s = tree(sample_stats_reply());
  at(array_of(at(s, "peers"))[0], "id") = U(uint64_t{1} << 32);
  EXPECT_REFUSED(decode(s), HasSubstr("field 'peers[0].id' is 4294967296, out of range"));
  Val overlap = tree(sample_stats_reply());
  at(at(overlap, "timing"), "last_overlap_permille") = U(1001);
  EXPECT_REFUSED(decode(overlap),
                 HasSubstr("field 'timing.last_overlap_permille' is 1001, more than 1000"));
}

// ------------------------------------------------------------------ layouts

TEST(Ipc, BadDtype) {
  Val a = tree(sample_attach());
  at(array_of(at(a, "layout"))[1], "dtype") = S("f64");
  auto d = decode(a);
  EXPECT_REFUSED(
      d, AllOf(HasSubstr("attach: field 'layout[1].dtype'"), HasSubstr("unsupported dtype 'f64'")));
  EXPECT_EQ(d.status().code(), Status::Code::kInvalid);
  // A known dtype, but not the other tensors': one dtype for the whole model.
  at(array_of(at(a, "layout"))[1], "dtype") = S("bf16");
  EXPECT_REFUSED(decode(a), HasSubstr("is bf16 and tensor 0"));
}

Val attach_with(const Layout& l) {
  Attach a = sample_attach();
  a.layout = l;
  return tree(a);  // encode does not validate: a buggy trainer could send this
}

TEST(Ipc, InvalidLayouts) {
  auto expect_invalid = [](const Layout& l, const std::string& what) {
    auto d = decode(attach_with(l));
    EXPECT_REFUSED(d, AllOf(HasSubstr("attach: field 'layout'"), HasSubstr(what)));
    EXPECT_EQ(d.status().code(), Status::Code::kInvalid);
  };
  expect_invalid(Layout{}, "layout has no tensors");

  Layout dup = sample_layout();
  dup.tensors[3].name = "conv1.bias";
  expect_invalid(dup, "tensor 3 'conv1.bias' appears twice");

  Layout zero = sample_layout();
  zero.tensors[2].numel = 0;
  expect_invalid(zero, "tensor 2 'fc1.weight' has 0 elements");

  Layout unnamed = sample_layout();
  unnamed.tensors[0].name = "";
  expect_invalid(unnamed, "tensor 0 has an empty name");

  Layout long_name = sample_layout();
  long_name.tensors[1].name = std::string(kMaxTensorNameBytes + 1, 'n');
  expect_invalid(long_name, "tensor 1 name is 257 bytes");

  Layout huge = sample_layout();
  huge.tensors[4].numel = kMaxModelNumel;
  expect_invalid(huge, "layout exceeds");

  Layout many;
  for (size_t i = 0; i <= kMaxTensors; ++i)
    many.tensors.push_back({"t" + std::to_string(i), DType::kF32, 1});
  expect_invalid(many, "layout has 65537 tensors, limit is 65536");
}

TEST(Ipc, TooManyOffsets) {
  AttachOk ok = sample_attach_ok();
  ok.offsets.assign(kMaxTensors + 1, 0);
  EXPECT_REFUSED(decode(encode(ok)),
                 HasSubstr("attach_ok: field 'offsets' has 65537 elements, limit is 65536"));
}

// ------------------------------------------------------------------ hostile input

TEST(Ipc, EveryPrefixIsRefused) {
  for (const Message& m : samples()) {
    SCOPED_TRACE(message_name(m));
    std::string full = encode(m);
    for (size_t n = 0; n < full.size(); ++n) {
      auto d = ipc::decode(full.data(), n);
      ASSERT_FALSE(d.is_ok()) << "prefix of " << n << " of " << full.size() << " bytes decoded";
      EXPECT_EQ(d.status().code(), Status::Code::kProtocol);
    }
  }
}

// A container header claiming 2^32-1 entries: refused by the unpack limits at once,
// without reserving memory for the claimed entries.
TEST(Ipc, HugeClaimedSizes) {
  auto start = std::chrono::steady_clock::now();
  const std::string map32("\xdf\xff\xff\xff\xff", 5);
  const std::string array32("\xdd\xff\xff\xff\xff", 5);
  const std::string str32("\xdb\xff\xff\xff\xff", 5);
  const std::string bin32("\xc6\xff\xff\xff\xff", 5);
  const std::string ext32("\xc9\xff\xff\xff\xff\x01", 6);

  EXPECT_REFUSED(decode(map32), HasSubstr("size limit (map size overflow"));
  EXPECT_REFUSED(decode(array32), HasSubstr("size limit (array size overflow"));
  EXPECT_REFUSED(decode(str32), HasSubstr("ipc message"));

  // The same headers where the decoder would otherwise trust them: as a field value.
  for (const std::string& raw : {map32, array32, str32, bin32, ext32}) {
    Val a = tree(sample_attach());
    at(a, "layout") = R(raw);
    EXPECT_REFUSED(decode(a), HasSubstr("ipc message"));
    Val s = tree(sample_stats_reply());
    array_of(at(s, "peers"))[0] = R(raw);
    EXPECT_REFUSED(decode(s), HasSubstr("ipc message"));
  }
  // The largest array the limits allow, with no elements behind it.
  Val a = tree(sample_attach());
  at(a, "layout") = R(std::string("\xdd\x00\x01\x00\x01", 5));  // 65537 entries
  EXPECT_REFUSED(decode(a), HasSubstr("not valid msgpack"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
}

// msgpack::objects are 24 bytes: 16 MiB of one-byte values must not unpack into
// hundreds of MB. A first pass counts the values before anything is allocated.
TEST(Ipc, TooManyValues) {
  std::string nils(32, '\xc0');
  // An array of 65537 arrays of 32 nils: 2.1 M values in 2.2 MB.
  std::string many("\xdd\x00\x01\x00\x01", 5);
  for (int i = 0; i < 65537; ++i) many += std::string("\xdc\x00\x20", 3) + nils;
  Val t = tree(Error{"x"});
  at(t, "message") = R(many);
  EXPECT_REFUSED(decode(t), HasSubstr("ipc message holds more than 2097152 values"));
}

// The value budget still fits the largest valid message: a stats_reply with as many
// peers as an array may hold.
TEST(Ipc, RoundTripManyPeers) {
  StatsReply r = sample_stats_reply();
  r.peers.resize(kMaxTensors + 1);
  for (size_t i = 0; i < r.peers.size(); ++i) r.peers[i].id = static_cast<uint32_t>(i);
  std::string bytes = encode(r);
  ASSERT_LE(bytes.size(), kMaxIpcMessageBytes);
  auto d = decode(bytes);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  expect_eq(Message(r), *d);
}

TEST(Ipc, DeepNestingIsRefused) {
  Val v = U(1);
  for (int i = 0; i < 100; ++i) v = A({v});
  Val t = tree(Error{"x"});
  at(t, "message") = v;
  EXPECT_REFUSED(decode(t), HasSubstr("depth size overflow"));
  // Nesting in a map key is refused just the same.
  std::string deep(100000, '\x91');  // fixarray of 1, 100000 levels
  EXPECT_REFUSED(decode(deep), HasSubstr("ipc message"));
}

TEST(Ipc, LongStringsAreRefused) {
  Val t = tree(Error{"x"});
  at(t, "message") = S(std::string(1 << 20, 'x'));
  EXPECT_REFUSED(decode(t), HasSubstr("str size overflow"));
  // A binary or extension value is never accepted.
  at(t, "message") = R(std::string("\xc4\x01z", 3));
  EXPECT_REFUSED(decode(t), HasSubstr("ipc message"));
}

// If a mutated message still decodes, the result is self-consistent: encoding it and
// decoding again gives the same message.
void check_consistent(const std::string& s) {
  auto d = decode(s);
  if (!d.is_ok()) {
    EXPECT_FALSE(d.status().message().empty());
    return;
  }
  std::string again = encode(*d);
  auto d2 = decode(again);
  ASSERT_TRUE(d2.is_ok()) << d2.status().message();
  expect_eq(*d, *d2);
  EXPECT_EQ(encode(*d2), again);
  if (auto* a = std::get_if<Attach>(&*d)) {
    EXPECT_TRUE(validate_layout(a->layout).is_ok());
  }
}

TEST(IpcFuzz, SingleByteMutations) {
  std::mt19937_64 rng(2024);
  std::vector<std::string> base;
  for (const Message& m : samples()) base.push_back(encode(m));
  int decoded = 0;
  for (int it = 0; it < 6000; ++it) {
    std::string s = base[it % base.size()];
    size_t pos = rng() % s.size();
    switch (rng() % 4) {
      case 0:
        s[pos] = static_cast<char>(rng());
        break;
      case 1:
        s[pos] = static_cast<char>(s[pos] ^ (1 << (rng() % 8)));
        break;
      case 2:
        s.erase(pos, 1);
        break;
      default:
        s.insert(pos, 1, static_cast<char>(rng()));
        break;
    }
    check_consistent(s);
    decoded += decode(s).is_ok();
  }
  EXPECT_GT(decoded, 0);  // mutations of string and integer values still decode
}

TEST(IpcFuzz, RandomBytes) {
  std::mt19937_64 rng(99);
  for (int it = 0; it < 3000; ++it) {
    std::string s(rng() % 96, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    if (!s.empty() && it % 2 == 0) s[0] = static_cast<char>(0x80 | (rng() % 16));
    check_consistent(s);
  }
}

}  // namespace
}  // namespace gossip::proto::ipc

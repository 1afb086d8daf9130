// Writes the seed corpora of the fuzz targets from the real encoders, so that the
// fuzzers start from inputs that get past the first checks:
//
//   fuzz_make_corpus OUT_DIR EXAMPLE_TOML
//
// makes OUT_DIR/{wire_header,codec_decode,ipc_message,inspect_report,config}/ and fills them (files
// are overwritten, none removed). The committed corpora under fuzz/corpus/ are its
// output for daemon/gossipd.example.toml (README.md says when to run it again).
// Everything is deterministic: the same build writes the same bytes.

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "compression/codec_spec.h"
#include "fuzz/codec_case.h"
#include "proto/inspect.h"
#include "proto/ipc.h"
#include "proto/message.h"

namespace gossip::fuzz {
namespace {

namespace fs = std::filesystem;

class CorpusWriter {
 public:
  CorpusWriter(fs::path root, std::string_view target) : dir_(root / target) {
    fs::create_directories(dir_);
  }
  bool write(const std::string& name, std::string_view bytes) {
    std::ofstream out(dir_ / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ++count_;
    total_ += bytes.size();
    if (out.good()) return true;
    std::fprintf(stderr, "make_corpus: cannot write %s\n", (dir_ / name).c_str());
    return false;
  }
  ~CorpusWriter() {
    std::printf("make_corpus: %s: %zu files, %zu bytes\n", dir_.c_str(), count_, total_);
  }

 private:
  fs::path dir_;
  size_t count_ = 0;
  size_t total_ = 0;
};

// ---------------------------------------------------------------- wire headers

bool write_wire_headers(const fs::path& root) {
  CorpusWriter out(root, "wire_header");
  bool ok = true;
  constexpr uint32_t kFrom = 3;
  constexpr uint64_t kRound = 17, kLayout = 0x1234abcd5678ef00ull;
  auto write = [&](const std::string& name, const proto::Body& body, uint64_t length) {
    const std::string frame = proto::encode_head(kFrom, kRound, body, length);
    if (auto back = proto::decode_head(frame.data(), frame.size()); !back) {
      std::fprintf(stderr, "make_corpus: %s does not decode: %s\n", name.c_str(),
                   back.status().message().c_str());
      ok = false;
    }
    ok &= out.write(name, frame);
  };
  // Every kind with its fields set, then the variants that matter to the decoder.
  write("hello", proto::Hello{kLayout}, 0);
  write("bye", proto::Bye{}, 0);
  write("ring-address", proto::RingAddress{7001, 0x5eed, 4, kLayout}, 0);
  write("ring-address_rdma",
        proto::RingAddress{7001, 0x5eed, 4, kLayout, proto::RingAddress::kRdma}, 0);
  write("nccl-id", proto::NcclId{2, kLayout}, proto::kNcclIdBytes);
  write("heartbeat", proto::Heartbeat{}, 0);
  write("heartbeat_ask", proto::Heartbeat{true}, 0);
  write("join", proto::Join{}, 0);
  write("state-offer", proto::StateOffer{true, 1234, 2048, kLayout, 1024},
        2 * proto::kStateHashBytes);
  write("state-offer_none", proto::StateOffer{}, 0);
  write("state-request", proto::StateRequest{4, 2}, 0);
  write("state-chunk", proto::StateChunk{1, 4096, 1000, 1.0, kLayout}, 4000);
  write("state-chunk_weighted", proto::StateChunk{0, 0, 256, 0.5, kLayout}, 1024);
  write("ring-probe", proto::RingProbe{3, 9, false, 3}, 12);
  write("ring-probe_restarted", proto::RingProbe{3, 9, true, 4}, 16);
  write("ring-probe_offer", proto::RingProbe{3, 9, false, 2, proto::RingProbe::kOffer}, 8);
  write("copy-request", proto::CopyRequest{}, 0);
  write("ps-push", proto::PsPush{1, 4096, 1000, proto::CodecId::kNone, kLayout}, 4000);
  write("ps-push_fp16", proto::PsPush{0, 0, 1000, proto::CodecId::kFp16, kLayout}, 2000);
  write("ps-pull", proto::PsPull{2, kLayout}, 0);
  write("ps-params", proto::PsParams{0, 0, 1000, proto::CodecId::kNone, kLayout}, 4000);
  write("ps-replica", proto::PsReplica{0, 0, 1000, proto::PsReplica::kUpdate, 2, 4, kLayout}, 4000);
  write("ps-replica_snapshot",
        proto::PsReplica{1, 8, 100, proto::PsReplica::kSnapshot, 0, 1, kLayout}, 400);
  write("ps-replica_request", proto::PsReplica{1, 0, 0, proto::PsReplica::kRequest, 0, 1, kLayout},
        0);
  write("initial-model_request",
        proto::InitialModel{proto::InitialModel::kRequest, 0, 0, 0, 2000, kLayout}, 0);
  write("initial-model_chunk",
        proto::InitialModel{proto::InitialModel::kChunk, 1, 1000, 1000, 2000, kLayout}, 4000);
  write("tune-report", proto::TuneReport{3, 0.004, 0.012, 48000, 0.2, 1.6e6, 512}, 2048);
  write("inspect_ping", proto::Inspect{proto::Inspect::kPing, 7, 1764150000000000, 0}, 1024);
  write("inspect_ask", proto::Inspect{proto::Inspect::kAskLinks, 7, 1764150000000000, 0}, 0);
  write("inspect_links", proto::Inspect{proto::Inspect::kLinks, 7, 1764150000000000, 0}, 200);
  write("member_join", proto::Member{proto::Member::kJoinRequest, 0, 0}, 21);
  write("member_answer", proto::Member{proto::Member::kAnswer, 3, 1}, 88);
  write("member_add", proto::Member{proto::Member::kAdd, 4, 1}, 21);
  write("member_ready", proto::Member{proto::Member::kReady, 4, 1}, 21);
  write("member_sync", proto::Member{proto::Member::kSync, 2, 1}, 0);
  write("member_wait", proto::Member{proto::Member::kWait, 0, 4}, 120);
  write("member_propose", proto::Member{proto::Member::kPropose, 4, 4}, 21);
  write("member_decline", proto::Member{proto::Member::kDecline, 4, 4}, 40);
  write("ring-norms", proto::RingNorms{3, 8}, 32);
  static_assert(proto::kMaxKind == 21, "a new kind: add its seed above");
  write("model-chunk_raw", proto::ModelChunk{2, 0, 4096, 1000, proto::CodecId::kNone, 1.0, kLayout},
        4000);
  write("model-chunk_raw_weight0",
        proto::ModelChunk{0, 0, 0, 256, proto::CodecId::kNone, 0.0, kLayout}, 1024);
  write("model-chunk_public_copy",
        proto::ModelChunk{0, proto::kPublicCopyTensor, 0, 256, proto::CodecId::kNone, 1.0, kLayout},
        1024);
  // A model chunk per codec; only the codec knows its payload's exact size.
  for (uint8_t id = 1; id <= proto::kMaxCodecId; ++id) {
    const auto codec = static_cast<proto::CodecId>(id);
    write(fmt::format("model-chunk_{}", proto::codec_name(codec)),
          proto::ModelChunk{2, 0, 0, 1000, codec, 0.5, kLayout}, 517);
  }
  return ok;
}

// ---------------------------------------------------------------- codec payloads

// Deterministic values with a spread of magnitudes, zeros and signs (mt19937's output
// is fixed by the standard; the distributions are not, so none is used).
std::vector<float> sample_values(uint32_t n, uint32_t seed) {
  std::vector<float> x(n);
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (uint32_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const auto r = static_cast<uint32_t>(s >> 33);
    const float unit = static_cast<float>(r & 0xffffff) / 16777216.0f;  // [0, 1)
    const int scale = static_cast<int>((r >> 24) % 9) - 4;              // 1e-4 .. 1e4
    float v = (unit - 0.5f) * std::pow(10.0f, static_cast<float>(scale));
    if (i % 17 == 5) v = 0.0f;
    x[i] = v;
  }
  return x;
}

bool write_codec_payloads(const fs::path& root) {
  CorpusWriter out(root, "codec_decode");
  bool ok = true;
  struct Seed {
    CodecChoice choice;
    const char* name;
  };
  using F = CodecFamily;
  // param: block - 1 (int8, sign), levels - 1 (qsgd), ratio * 1024 - 1 (topk, randk).
  std::vector<Seed> seeds = {
      {{F::kNone, false, false, 0, 100, 0}, "none_100"},
      {{F::kNone, false, false, 0, 0, 0}, "none_0"},
      {{F::kFp16, false, false, 0, 100, 0}, "fp16_100"},
      {{F::kBf16, false, false, 0, 100, 0}, "bf16_100"},
      {{F::kInt8, false, false, 255, 600, 0}, "int8_256_600"},
      {{F::kInt8, false, false, 6, 50, 0}, "int8_7_50"},
      {{F::kInt8, false, false, 0, 9, 0}, "int8_1_9"},
      {{F::kQsgd, false, false, 15, 700, 5}, "qsgd_16_700"},
      {{F::kQsgd, false, false, 0, 33, 6}, "qsgd_1_33"},
      {{F::kQsgd, false, false, 254, 20, 7}, "qsgd_255_20"},
      {{F::kSign, false, false, 255, 600, 0}, "sign_256_600"},
      {{F::kSign, false, false, 4, 61, 0}, "sign_5_61"},
      {{F::kTopk, false, false, 101, 500, 0}, "topk_0.1_500"},
      {{F::kTopk, false, false, 1023, 40, 0}, "topk_1_40"},
      {{F::kTopk, false, true, 511, 64, 0}, "topk_0.5_fp16_64"},
      {{F::kTopk, true, false, 0, 69000, 9}, "topk_approx_69000"},
      {{F::kTopk, true, true, 9, 66000, 10}, "topk_approx_fp16_66000"},
      {{F::kRandk, false, false, 101, 500, 11}, "randk_0.1_500"},
      {{F::kRandk, false, true, 255, 100, 12}, "randk_0.25_fp16_100"},
      {{F::kTopk, false, false, 101 | (0 << 12), 3000, 0, true, 3}, "chain_topk_0.1_q2_auto"},
      {{F::kTopk, false, false, 20 | (1 << 12), 4095, 0, true, 2}, "chain_topk_q4_delta"},
      {{F::kTopk, false, false, 200 | (2 << 12), 4095, 0, true, 1}, "chain_topk_q8_chunk12"},
      {{F::kTopk, false, false, 10 | (3 << 12), 3000, 0, true, 0}, "chain_topk_f32_eliasfano"},
      {{F::kTopk, true, false, 9 | (3 << 12), 66000, 3, true, 3}, "chain_topk_approx_q2_ef"},
      {{F::kRandk, false, false, 101, 500, 11, true, 2}, "chain_randk_q4"},
  };
  for (const Seed& s : seeds) {
    auto made = compression::make_codec(s.choice.spec());
    if (!made) {
      std::fprintf(stderr, "make_corpus: %s: %s\n", s.name, made.status().message().c_str());
      ok = false;
      continue;
    }
    const auto x = sample_values(s.choice.numel, static_cast<uint32_t>(s.choice.seed));
    std::vector<std::byte> payload;
    const compression::CodecContext ctx{s.choice.seed, nullptr};
    if (Status st = made->codec->encode(x, ctx, payload); !st) {
      std::fprintf(stderr, "make_corpus: %s: %s\n", s.name, st.message().c_str());
      ok = false;
      continue;
    }
    // A seed the decoder refuses would only exercise the size check.
    std::vector<float> y(x.size());
    if (Status st = made->codec->decode(payload, ctx, y); !st) {
      std::fprintf(stderr, "make_corpus: %s does not decode: %s\n", s.name, st.message().c_str());
      ok = false;
      continue;
    }
    std::string bytes = s.choice.prefix();
    bytes.append(reinterpret_cast<const char*>(payload.data()), payload.size());
    const auto back =
        parse_codec_case(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (!back || back->choice.spec() != s.choice.spec() || back->choice.numel != s.choice.numel ||
        back->choice.seed != s.choice.seed) {
      std::fprintf(stderr, "make_corpus: %s: the prefix does not read back as written\n", s.name);
      ok = false;
      continue;
    }
    ok &= out.write(s.name, bytes);
  }
  return ok;
}

// ---------------------------------------------------------------- inspect reports

// One of each report (proto/inspect.h), behind the selector byte inspect_report_fuzzer
// reads first.
std::vector<std::pair<std::string, std::string>> inspect_seeds() {
  namespace in = proto::inspect;
  in::Link l;
  l.to = 2, l.endpoint = "tcp://10.0.0.2:7000", l.connect = in::Connect::kOk, l.connect_ms = 0.2;
  l.handshake = in::Handshake::kOk, l.connects = 1, l.pings = 5, l.pongs = 5, l.rtt_ms = 0.3;
  l.clock_offset_ms = -0.5, l.clock_error_ms = 0.15, l.tcp_rtt_ms = 0.1, l.segments_sent = 900;
  l.bandwidth_bytes_per_s = 1.1e9, l.version = "0.9.0", l.strategy = "gossip", l.silent_ms = 20;
  in::LinkRow row{1, {"0.9.0", "gossip", true}, {l}, {"public key abc from 10.0.0.9, 1 time"}};
  in::MemberStatus st;
  st.node = 1, st.state = "training", st.round = 12, st.step = 48, st.trainers = 1;
  st.round_ms = 3.5, st.samples = {0.25f, -1.5f, 2.0f};
  return {{"summary", std::string(1, '\0') + in::encode(in::Summary{0, {0, 1, 2}, {2}, 1.5})},
          {"links", std::string(1, '\1') + in::encode(row)},
          {"status", std::string(1, '\2') + in::encode(st)},
          {"facts", std::string(1, '\3') + in::encode(row.facts)}};
}

bool write_inspect_reports(const fs::path& root) {
  CorpusWriter out(root, "inspect_report");
  bool ok = true;
  for (const auto& [name, bytes] : inspect_seeds()) ok &= out.write(name, bytes);
  return ok;
}

// ---------------------------------------------------------------- IPC messages

bool write_ipc_messages(const fs::path& root) {
  namespace ipc = proto::ipc;
  CorpusWriter out(root, "ipc_message");
  ipc::Attach attach;
  attach.trainer = "trainer-0";
  attach.local_rank = 1;
  attach.pid = 4242;
  attach.layout.tensors = {{"fc1.weight", proto::DType::kF32, 784 * 128},
                           {"fc1.bias", proto::DType::kF32, 128},
                           {"fc2.weight", proto::DType::kF32, 1280}};
  ipc::Attach attach_gpu = attach;
  attach_gpu.device = "cuda:0";
  attach_gpu.pid = -1;
  attach_gpu.layout.tensors = {{"w", proto::DType::kF32, 1}};
  ipc::Attach attach_bf16 = attach;
  attach_bf16.layout.tensors = {{"w", proto::DType::kBF16, 100}, {"b", proto::DType::kBF16, 3}};

  ipc::AttachOk attach_ok;
  attach_ok.node = 2;
  attach_ok.nodes = 4;
  attach_ok.slot = 1;
  attach_ok.arena = "/gossipd-1000-2-77";
  attach_ok.arena_bytes = 1 << 20;
  attach_ok.slot_offset = 4096;
  attach_ok.offsets = {0, 100352, 100480};
  attach_ok.strategy = "local-sgd";
  attach_ok.period = 4;
  attach_ok.post_local = 10;
  attach_ok.step = 12;
  attach_ok.initialized = true;

  ipc::Traffic traffic{1000, 2000, 1100, 2100, 10, 20, 1};
  ipc::SyncOk sync_ok{5, 20, traffic};
  ipc::StatsReply stats;
  stats.node = 1;
  stats.strategy = "gossip";
  stats.round = 9;
  stats.step = 36;
  stats.trainers = 2;
  stats.traffic = traffic;
  stats.peers = {{0, "tcp://127.0.0.1:7000", traffic, 12},
                 {2, "tcp://[::1]:7002", ipc::Traffic{}, ipc::kNeverHeard}};

  const std::pair<const char*, ipc::Message> messages[] = {
      {"attach", attach},
      {"attach_gpu", attach_gpu},
      {"attach_bf16", attach_bf16},
      {"attach_ok", attach_ok},
      {"sync", ipc::Sync{7}},
      {"sync_ok", sync_ok},
      {"start", ipc::Start{}},
      {"sync_range", ipc::SyncRange{3, 4096, 1024, true}},
      {"detach", ipc::Detach{}},
      {"detach_ok", ipc::DetachOk{}},
      {"stats", ipc::StatsRequest{}},
      {"stats_reply", stats},
      {"error", ipc::Error{"layout mismatch: tensor 0 'fc1.weight'"}},
      {"shutdown", ipc::Shutdown{"SIGTERM"}},
      {"inspect", ipc::InspectRequest{ipc::InspectRequest::kLinks, 10000}},
      {"inspect_reply", ipc::InspectReply{{inspect_seeds().front().second}}},
      {"leave", ipc::Leave{}},
      {"ban", ipc::Ban{2}},
      {"forget", ipc::Forget{3}},
  };
  bool ok = true;
  for (const auto& [name, m] : messages) {
    const std::string bytes = ipc::encode(m);
    if (auto back = ipc::decode(bytes.data(), bytes.size()); !back) {
      std::fprintf(stderr, "make_corpus: %s does not decode: %s\n", name,
                   back.status().message().c_str());
      ok = false;
    }
    ok &= out.write(name, bytes);
  }
  return ok;
}

// ---------------------------------------------------------------- configs

constexpr std::string_view kNodeMinimal = R"([node]
id = 3
listen = "tcp://10.0.0.3:7000"
run_dir = "/run/gossipd"
)";

// Three nodes 0..2 seen from node 0; strategy sections are appended.
constexpr std::string_view kThreeNodes = R"([node]
id = 0
listen = "tcp://127.0.0.1:7000"
run_dir = "/tmp/gossipd"
seed = 42

[[peers]]
id = 0
endpoint = "tcp://127.0.0.1:7000"

[[peers]]
id = 1
endpoint = "tcp://127.0.0.1:7001"

[[peers]]
id = 2
endpoint = "tcp://127.0.0.1:7002"
)";

constexpr std::string_view kFourNodesIpv6 = R"([node]
id = 1
listen = "tcp://[::1]:7001"
run_dir = "/tmp/g"
log_level = "warn"
max_trainers = 64
metrics_port = 9100

[[peers]]
id = 0
endpoint = "tcp://[::1]:7000"

[[peers]]
id = 2
endpoint = "tcp://[::1]:7002"

[[peers]]
id = 3
endpoint = "tcp://host-3.example:7003"
)";

// ZeroMQ's published CURVE test keys (RFC 26): never used outside tests.
constexpr std::string_view kCurve = R"([node]
id = 0
listen = "tcp://127.0.0.1:7000"
run_dir = "/tmp/gossipd"
secret_key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"

[[peers]]
id = 1
endpoint = "tcp://127.0.0.1:7001"
public_key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
)";

bool write_configs(const fs::path& root, const fs::path& example) {
  CorpusWriter out(root, "config");
  std::ifstream in(example, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "make_corpus: cannot read %s\n", example.c_str());
    return false;
  }
  const std::string example_text((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
  const std::string three(kThreeNodes);
  const std::string four(kFourNodesIpv6);
  const std::pair<const char*, std::string> docs[] = {
      {"example.toml", example_text},
      {"minimal.toml", std::string(kNodeMinimal)},
      {"gossip_ring_topk.toml", three + R"(
[strategy]
name = "gossip"
topology = "ring"
codec = "topk:0.01:approx:fp16+ef"
patience = 2.5
codec_threads = 4
)"},
      {"choco_int8.toml", three + R"(
[strategy]
name = "choco"
topology = "complete"
gamma = 0.4
codec = "int8:128"
)"},
      {"push_sum.toml", four + R"(
[strategy]
name = "push-sum"
delay = 3
nonfinite = "clip"
)"},
      {"async_torus.toml", four + R"(
[strategy]
name = "async-gossip"
topology = "torus:2x2"
staleness = 2
codec = "sign:64+ef"
)"},
      {"allreduce_qsgd.toml", three + R"(
[strategy]
name = "allreduce"
transport = "tcp"
codec = "qsgd:16"
chunk_bytes = 1048576
round_timeout = 1e3
)"},
      {"local_sgd_nesterov.toml", four + R"(
[strategy]
name = "local-sgd"
period = 8
post_local = 100
transport = "allgather"
codec = "randk:0.05:fp16"

[strategy.outer]
optimizer = "nesterov"
lr = 0.7
momentum = 0.5
)"},
      {"curve.toml", std::string(kCurve)},
      // Refused documents, so that the error paths have seeds too.
      {"bad_typo.toml", std::string(kNodeMinimal) + "\n[strategy]\nperoid = 4\n"},
      {"bad_type.toml", std::string(kNodeMinimal) + "\n[strategy]\nperiod = \"4\"\n"},
      {"bad_endpoint.toml", "[node]\nid = 0\nlisten = \"tcp://x\"\nrun_dir = \"/tmp\"\n"},
      {"bad_duplicate_peer.toml",
       three + "\n[[peers]]\nid = 2\nendpoint = \"tcp://127.0.0.1:7009\"\n"},
      {"bad_toml.toml", "[node\nid = = 0\n"},
  };
  bool ok = true;
  for (const auto& [name, text] : docs) ok &= out.write(name, text);
  return ok;
}

}  // namespace
}  // namespace gossip::fuzz

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR EXAMPLE_TOML\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  bool ok = gossip::fuzz::write_wire_headers(root);
  ok &= gossip::fuzz::write_codec_payloads(root);
  ok &= gossip::fuzz::write_ipc_messages(root);
  ok &= gossip::fuzz::write_inspect_reports(root);
  ok &= gossip::fuzz::write_configs(root, argv[2]);
  return ok ? 0 : 1;
}

// The device codecs (compression/cuda/device_codecs.h) against the CPU codecs:
// the same payload bytes for the same input and seed, the same decoded floats,
// the same verdicts (and messages) on bad input and bad payloads, and device error
// feedback equal to the CPU's round after round. Every codec, on random and
// adversarial data of lengths 0, 1, odd, and 2^20 + 3.
//
// Tests that need a GPU skip with the reason when none is present; the parameter
// tests and the no-device error path run everywhere.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "compression/codec_spec.h"
#include "compression/cuda/device_buffer.h"
#include "compression/cuda/device_codecs.h"
#include "compression/cuda/device_error_feedback.h"
#include "compression/error_feedback.h"
#include "compression/sparse_encoding.h"
#include "tests/param_name.h"

namespace gossip::compression::cuda {

// gtest names parameters with this (found by ADL) instead of their raw bytes.
void PrintTo(const DeviceCodecParams& p, std::ostream* os) {
  *os << spec_of(p);
  if (p.id == proto::CodecId::kQsgd) *os << "/bucket " << p.bucket;
}

namespace {

using Bytes = std::vector<std::byte>;
using proto::CodecId;

constexpr float kFltMax = std::numeric_limits<float>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = 12345.0f;

// Why the GPU tests cannot run here, or "" when a device is present.
std::string no_device_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(err);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount found none";
  return "";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

std::string first_difference(const Bytes& a, const Bytes& b) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return "first difference at byte " + std::to_string(i);
  return "equal";
}

// Floats in device memory (tests only: failures abort the test).
class DeviceFloats {
 public:
  explicit DeviceFloats(size_t n) : n_(n) {
    auto b = DeviceBuffer::persistent(n * sizeof(float));
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    if (b) buf_ = std::move(*b);
  }
  explicit DeviceFloats(const std::vector<float>& host) : DeviceFloats(host.size()) {
    upload(host);
  }

  void upload(const std::vector<float>& host) {
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(get(), host.data(), n_ * 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<float> download() const {
    std::vector<float> host(n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), get(), n_ * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }
  float* get() const { return buf_.as<float>(); }

 private:
  size_t n_;
  DeviceBuffer buf_;
};

// ---------------------------------------------------------------------------
// Inputs.

std::vector<float> normal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(gen) * scale;
  return x;
}

struct DataSet {
  std::string name;
  std::vector<float> x;
};

std::vector<DataSet> data_sets() {
  std::vector<DataSet> sets;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{257}, size_t{1001},
                   size_t{65539}, (size_t{1} << 20) + 3})
    sets.push_back({"normal" + std::to_string(n), normal(n, n + 1)});
  std::vector<float> adv = {
      0.0f,        -0.0f,           1e-45f,       -1e-45f,      1.17549435e-38f,
      1.0f,        -1.0f,           0.5f,         1.5f,         2.5f,
      126.5f,      127.0f,          65504.0f,     65519.0f,     65520.0f,
      0x1p-24f,    0x1p-25f,        3 * 0x1p-25f, 1 + 0x1p-11f, 1 + 3 * 0x1p-11f,
      1 + 0x1p-8f, 0x1p-126f * 127, 1e-40f,       3e29f};
  std::vector<float> rep;
  for (int r = 0; r < 300; ++r)
    for (float v : adv) rep.push_back(r % 3 ? v : -v);
  std::shuffle(rep.begin(), rep.end(), std::mt19937_64(3));
  sets.push_back({"adversarial", rep});
  std::vector<float> extreme = normal(3001, 4, 1e37f);
  extreme[17] = kFltMax;
  extreme[2000] = -kFltMax;
  sets.push_back({"extreme", extreme});  // int8 and sign only: qsgd refuses the norm
  sets.push_back({"zeros", std::vector<float>(4099, 0.0f)});
  std::vector<float> ties(70001);
  std::mt19937_64 gen(5);
  for (auto& v : ties) v = static_cast<float>(static_cast<int>(gen() % 7) - 3) * 0.25f;
  sets.push_back({"ties", ties});
  return sets;
}

// ---------------------------------------------------------------------------
// The codecs under test.

DeviceCodecParams params(CodecId id, uint32_t block = kDefaultInt8Block, uint32_t levels = 16,
                         uint32_t bucket = kDefaultQsgdBucket) {
  DeviceCodecParams p;
  p.id = id;
  p.block = block;
  p.levels = levels;
  p.bucket = bucket;
  return p;
}

DeviceCodecParams sparse(CodecId id, double ratio, bool fp16 = false, bool approximate = false) {
  DeviceCodecParams p;
  p.id = id;
  p.ratio = ratio;
  p.values = fp16 ? ValueType::kF16 : ValueType::kF32;
  p.approximate = approximate;
  return p;
}

std::vector<DeviceCodecParams> all_codecs() {
  return {params(CodecId::kNone),
          params(CodecId::kFp16),
          params(CodecId::kBf16),
          params(CodecId::kInt8, 256),
          params(CodecId::kInt8, 1),
          params(CodecId::kInt8, 7),
          params(CodecId::kInt8, 1000),  // staged in pieces of 32, the last one short
          params(CodecId::kSign, 256),
          params(CodecId::kSign, 1),
          params(CodecId::kSign, 13),
          params(CodecId::kSign, 33),
          params(CodecId::kQsgd, 0, 16, 512),
          params(CodecId::kQsgd, 0, 1, 7),
          params(CodecId::kQsgd, 0, 5, 100),
          params(CodecId::kQsgd, 0, 3, 1),
          params(CodecId::kQsgd, 0, 32767, 512),
          sparse(CodecId::kTopk, 0.01),
          sparse(CodecId::kTopk, 0.001, true),
          sparse(CodecId::kTopk, 0.5),
          sparse(CodecId::kTopk, 1.0),
          sparse(CodecId::kTopk, 0.01, false, true),
          sparse(CodecId::kRandk, 0.01),
          sparse(CodecId::kRandk, 0.25, true),
          sparse(CodecId::kRandk, 1.0)};
}

std::string param_name(const testing::TestParamInfo<DeviceCodecParams>& info) {
  std::string s = spec_of(info.param);
  if (info.param.id == CodecId::kQsgd) s += "_bucket" + std::to_string(info.param.bucket);
  return gtest_param_name(s);
}

// The CPU payload the device must reproduce: for topk:approx, the exact selection
// (the device always selects exactly; an approximate receiver accepts it).
std::unique_ptr<Codec> reference_encoder(const DeviceCodecParams& p) {
  DeviceCodecParams ref = p;
  ref.approximate = false;
  return make_host_codec(ref);
}

class CudaCodecs : public testing::TestWithParam<DeviceCodecParams> {
 protected:
  void SetUp() override {
    if (std::string why = no_device_reason(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Device encode (host payload, and for dense codecs the device payload too).
  Status device_encode(const DeviceCodecParams& p, const std::vector<float>& x, uint64_t seed,
                       Bytes& out) {
    DeviceFloats d_x(x);
    Status st = encode(p, d_x.get(), x.size(), seed, out, stream_);
    if (st.is_ok() && is_dense(p.id)) {
      const uint64_t bytes = dense_payload_bytes(p, x.size());
      auto d_out = DeviceBuffer::persistent(bytes);
      EXPECT_TRUE(d_out.is_ok());
      EXPECT_TRUE(
          encode_dense(p, d_x.get(), x.size(), seed, d_out->as<std::byte>(), stream_).is_ok());
      Bytes again(bytes);
      if (bytes > 0) {
        EXPECT_EQ(cudaMemcpy(again.data(), d_out->as<void>(), bytes, cudaMemcpyDeviceToHost),
                  cudaSuccess);
      }
      EXPECT_EQ(again, out) << "encode_dense differs from encode";
    }
    return st;
  }

  // Device decode into a sentinel-filled buffer; also through decode_dense for dense codecs.
  Status device_decode(const DeviceCodecParams& p, const Bytes& payload, uint64_t seed, uint64_t n,
                       std::vector<float>& y) {
    DeviceFloats d_y(std::vector<float>(n, kSentinel));
    Status st = decode(p, payload, seed, d_y.get(), n, stream_);
    y = d_y.download();
    if (is_dense(p.id)) {
      auto d_in = DeviceBuffer::persistent(payload.size());
      EXPECT_TRUE(d_in.is_ok());
      if (!payload.empty()) {
        EXPECT_EQ(
            cudaMemcpy(d_in->as<void>(), payload.data(), payload.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
      }
      DeviceFloats d_y2(std::vector<float>(n, kSentinel));
      Status st2 = decode_dense(p, d_in->as<std::byte>(), payload.size(), d_y2.get(), n, stream_);
      EXPECT_EQ(st2.code(), st.code()) << st2.message();
      EXPECT_EQ(st2.message(), st.message());
      EXPECT_TRUE(same_bits(d_y2.download(), y)) << "decode_dense differs from decode";
    }
    return st;
  }

  cudaStream_t stream_ = nullptr;
};

// ---------------------------------------------------------------------------

TEST_P(CudaCodecs, EncodesTheCpuBytes) {
  const DeviceCodecParams p = GetParam();
  auto cpu = reference_encoder(p);
  for (const DataSet& set : data_sets()) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{42}}) {
      const std::string what = spec_of(p) + " on " + set.name + " seed " + std::to_string(seed);
      Bytes want, got;
      CodecContext ctx;
      ctx.seed = seed;
      const Status cst = cpu->encode(set.x, ctx, want);
      const Status dst = device_encode(p, set.x, seed, got);
      ASSERT_EQ(cst.code(), dst.code())
          << what << ": cpu '" << cst.message() << "', device '" << dst.message() << "'";
      EXPECT_EQ(cst.message(), dst.message()) << what;
      if (!cst.is_ok()) continue;
      ASSERT_EQ(want, got) << what << ": " << first_difference(want, got);
      if (p.id == CodecId::kTopk) {
        // Said as sets, for a readable failure: the indices are the CPU's.
        auto w = decode_sparse(want, set.x.size(), "topk"),
             g = decode_sparse(got, set.x.size(), "topk");
        ASSERT_TRUE(w.is_ok() && g.is_ok());
        EXPECT_EQ(w->indices, g->indices) << what;
      }
      if (p.approximate) {
        std::vector<float> y(set.x.size());
        EXPECT_TRUE(make_host_codec(p)->decode(got, ctx, y).is_ok()) << what;
      }
    }
  }
}

TEST_P(CudaCodecs, DecodesTheCpuFloats) {
  const DeviceCodecParams p = GetParam();
  auto cpu = make_host_codec(p);
  for (const DataSet& set : data_sets()) {
    const uint64_t seed = 7;
    CodecContext ctx;
    ctx.seed = seed;
    Bytes payload;
    if (!cpu->encode(set.x, ctx, payload).is_ok())
      continue;  // refused input: see EncodesTheCpuBytes
    std::vector<float> want(set.x.size(), kSentinel), got;
    ASSERT_TRUE(cpu->decode(payload, ctx, want).is_ok());
    const Status st = device_decode(p, payload, seed, set.x.size(), got);
    ASSERT_TRUE(st.is_ok()) << spec_of(p) << " on " << set.name << ": " << st.message();
    EXPECT_TRUE(same_bits(want, got)) << spec_of(p) << " on " << set.name;
  }
}

// Truncated, extended and corrupted payloads: the CPU's verdict, and an untouched
// output when refused; the same floats when accepted.
TEST_P(CudaCodecs, RefusesWhatTheCpuRefuses) {
  const DeviceCodecParams p = GetParam();
  auto cpu = make_host_codec(p);
  std::mt19937_64 gen(17);
  for (uint64_t n : {uint64_t{1}, uint64_t{9}, uint64_t{1001}}) {
    CodecContext ctx;
    ctx.seed = 3;
    Bytes good;
    ASSERT_TRUE(cpu->encode(normal(n, n), ctx, good).is_ok());
    std::vector<Bytes> bad;
    bad.push_back(Bytes(good.begin(), good.end() - 1));
    Bytes longer = good;
    longer.push_back(std::byte{0});
    bad.push_back(longer);
    for (int trial = 0; trial < 60; ++trial) {
      Bytes b = good;
      const size_t at = gen() % b.size();
      b[at] = trial % 3 == 0   ? std::byte{0x80}
              : trial % 3 == 1 ? std::byte{0xff}
                               : b[at] ^ std::byte{0x01};
      bad.push_back(b);
    }
    for (float s : {kNaN, -kInf, -0.0f, -1.0f, kFltMax}) {  // dense: the first scale or norm
      Bytes b = good;
      if (is_dense(p.id) && p.id != CodecId::kNone && p.id != CodecId::kFp16 &&
          p.id != CodecId::kBf16) {
        std::memcpy(b.data(), &s, 4);
        bad.push_back(b);
      }
    }
    for (size_t i = 0; i < bad.size(); ++i) {
      const std::string what =
          spec_of(p) + " n " + std::to_string(n) + " variant " + std::to_string(i);
      std::vector<float> want(n, kSentinel), got;
      const Status cst = cpu->decode(bad[i], ctx, want);
      const Status dst = device_decode(p, bad[i], ctx.seed, n, got);
      ASSERT_EQ(cst.code(), dst.code())
          << what << ": cpu '" << cst.message() << "', device '" << dst.message() << "'";
      EXPECT_EQ(cst.message(), dst.message()) << what;
      // Refused: both outputs untouched (all sentinels). Accepted: the same floats
      // (but for a NaN that rand-k scaled, see device_codecs.h).
      const bool scaled_nan =
          p.id == CodecId::kRandk &&
          std::any_of(want.begin(), want.end(), [](float v) { return std::isnan(v); });
      if (!scaled_nan) {
        EXPECT_TRUE(same_bits(want, got)) << what;
      }
    }
  }
}

TEST_P(CudaCodecs, RefusesNonFiniteInputLikeTheCpu) {
  const DeviceCodecParams p = GetParam();
  auto cpu = reference_encoder(p);
  for (float bad : {kInf, -kInf, kNaN}) {
    for (size_t at : {size_t{0}, size_t{600}, size_t{4095}}) {
      std::vector<float> x = normal(4096, at);
      x[at] = bad;
      if (at > 0) x[at - 1] = 3e38f;  // qsgd: a norm beyond fp32 in the same bucket decides nothing
      Bytes want, got;
      const Status cst = cpu->encode(x, {}, want);
      const Status dst = device_encode(p, x, 0, got);
      ASSERT_EQ(cst.code(), dst.code())
          << spec_of(p) << ": cpu '" << cst.message() << "', device '" << dst.message() << "'";
      EXPECT_EQ(cst.message(), dst.message());
      if (cst.is_ok()) {
        EXPECT_EQ(want, got);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CudaCodecs, testing::ValuesIn(all_codecs()), param_name);

// ---------------------------------------------------------------------------

class CudaCodecsSeeds : public CudaCodecs {};

// Stochastic codecs: the same seed gives the same bytes on both sides, another
// seed other bytes.
TEST_F(CudaCodecsSeeds, QsgdAndRandkFollowTheSeed) {
  const auto x = normal(100003, 9);
  for (const DeviceCodecParams& p :
       {params(CodecId::kQsgd, 0, 16, 512), sparse(CodecId::kRandk, 0.05)}) {
    Bytes a, b, c;
    ASSERT_TRUE(device_encode(p, x, 1, a).is_ok());
    ASSERT_TRUE(device_encode(p, x, 1, b).is_ok());
    ASSERT_TRUE(device_encode(p, x, 2, c).is_ok());
    EXPECT_EQ(a, b) << spec_of(p);
    EXPECT_NE(a, c) << spec_of(p);
    Bytes cpu;
    CodecContext ctx;
    ctx.seed = 2;
    ASSERT_TRUE(make_host_codec(p)->encode(x, ctx, cpu).is_ok());
    EXPECT_EQ(cpu, c) << spec_of(p);
  }
}

// Error feedback: device and CPU residuals, payloads and sent values stay equal,
// bit for bit, over rounds on slices of the buffer.
TEST_F(CudaCodecsSeeds, ErrorFeedbackEqualsTheCpu) {
  const size_t n = 50021;
  for (const DeviceCodecParams& p :
       {sparse(CodecId::kTopk, 0.01), params(CodecId::kSign, 256), params(CodecId::kInt8, 256),
        params(CodecId::kQsgd, 0, 4, 512), sparse(CodecId::kRandk, 0.1, true)}) {
    auto codec = make_host_codec(p);
    ErrorFeedback cpu(*codec, n);
    auto dev = DeviceErrorFeedback::create(p, n);
    ASSERT_TRUE(dev.is_ok()) << dev.status().message();
    for (int round = 0; round < 6; ++round) {
      const size_t offset = round % 2 ? 1000 : 0, count = n - 2000 * (round % 2);
      const auto u = normal(count, 100 + round, 0.1f);
      CodecContext ctx;
      ctx.seed = static_cast<uint64_t>(round);
      Bytes want, got;
      std::vector<float> sent_cpu(count);
      ASSERT_TRUE(cpu.encode(u, offset, ctx, want, sent_cpu).is_ok());
      DeviceFloats d_u(u), d_sent(count);
      const Status st = dev->encode(d_u.get(), offset, count, ctx.seed, got, d_sent.get(), stream_);
      ASSERT_TRUE(st.is_ok()) << spec_of(p) << ": " << st.message();
      ASSERT_EQ(want, got) << spec_of(p) << " round " << round;
      EXPECT_TRUE(same_bits(sent_cpu, d_sent.download())) << spec_of(p) << " round " << round;
      std::vector<float> residual(n);
      ASSERT_EQ(cudaMemcpy(residual.data(), dev->residual(), n * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_TRUE(
          same_bits(std::vector<float>(cpu.residual().begin(), cpu.residual().end()), residual))
          << spec_of(p) << " round " << round;
    }
    // A failing encode leaves the residual as it was.
    std::vector<float> before(n);
    ASSERT_EQ(cudaMemcpy(before.data(), dev->residual(), n * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<float> bad = normal(10, 1);
    bad[3] = kNaN;
    DeviceFloats d_bad(bad), d_sent(10);
    Bytes out;
    const Status st = dev->encode(d_bad.get(), 5, 10, 0, out, d_sent.get(), stream_);
    if (p.id != CodecId::kRandk) {  // rand-k carries NaN through
      EXPECT_FALSE(st.is_ok()) << spec_of(p);
    }
    if (!st.is_ok()) {
      std::vector<float> after(n);
      ASSERT_EQ(cudaMemcpy(after.data(), dev->residual(), n * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_TRUE(same_bits(before, after)) << spec_of(p);
    }
    EXPECT_FALSE(
        dev->encode(d_bad.get(), n - 5, 10, 0, out, d_sent.get(), stream_).is_ok());  // outside
  }
}

// ---------------------------------------------------------------------------
// No GPU needed.

TEST(DeviceCodecParams, RoundTripTheCpuSpecs) {
  for (const char* spec :
       {"none", "fp16", "bf16", "int8", "int8:7", "sign", "sign:1", "qsgd:16", "qsgd:32767",
        "topk:0.01", "topk:0.25:approx:fp16", "topk:1", "randk:0.001", "randk:0.5:fp16"}) {
    auto made = make_codec(spec);
    ASSERT_TRUE(made.is_ok()) << spec;
    auto p = device_params(*made->codec);
    ASSERT_TRUE(p.is_ok()) << spec << ": " << p.status().message();
    EXPECT_EQ(spec_of(*p), made->codec->spec());
    EXPECT_EQ(make_host_codec(*p)->spec(), made->codec->spec());
    if (is_dense(p->id)) {
      for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{1000003}})
        EXPECT_EQ(dense_payload_bytes(*p, n), made->codec->max_encoded_bytes(n)) << spec;
    }
  }
  DeviceCodecParams bad;
  bad.id = CodecId::kInt8;
  bad.block = 0;
  EXPECT_FALSE(check_params(bad).is_ok());
  bad = sparse(CodecId::kTopk, 1.5);
  EXPECT_FALSE(check_params(bad).is_ok());
}

// Without a device every call fails with a CUDA error in its Status, never a crash.
TEST(DeviceCodecsWithoutGpu, ReportTheCudaError) {
  if (no_device_reason().empty()) GTEST_SKIP() << "a CUDA device is present";
  Bytes out;
  for (const DeviceCodecParams& p : all_codecs()) {
    const Status st = encode(p, nullptr, 100, 0, out, nullptr);
    EXPECT_EQ(st.code(), Status::Code::kIoError) << spec_of(p) << ": " << st.message();
    EXPECT_NE(st.message().find("cuda: "), std::string::npos) << st.message();
  }
  EXPECT_FALSE(DeviceErrorFeedback::create(params(CodecId::kSign), 10).is_ok());
}

}  // namespace
}  // namespace gossip::compression::cuda

// DeviceCodecParams to and from the CPU codecs, and the dense payload sizes
// (each the CPU codec's formula).

#include <fmt/format.h>

#include <charconv>
#include <string_view>
#include <vector>

#include "compression/cuda/device_codecs.h"
#include "compression/cuda/device_math.h"

namespace gossip::compression::cuda {

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

template <typename T>
bool parse_number(std::string_view text, T& v) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

Result<DeviceCodecParams> device_params(const Codec& codec) {
  const std::string spec = codec.spec();
  auto parts = split(spec, ':');
  auto bad = [&] {
    return Status::invalid(fmt::format("device codecs: no device form of codec '{}'", spec));
  };
  DeviceCodecParams p;
  p.id = codec.id();
  const std::string_view name = parts[0];
  bool ok = true;
  if (name == "none" || name == "fp16" || name == "bf16") {
    ok = parts.size() == 1;
  } else if (name == "int8" || name == "sign") {
    ok = parts.size() == 2 && parse_number(parts[1], p.block);
  } else if (name == "qsgd") {
    ok = parts.size() == 2 && parse_number(parts[1], p.levels);
  } else if (name == "topk" || name == "randk") {
    ok = parts.size() >= 2 && parse_number(parts[1], p.ratio);
    for (size_t i = 2; ok && i < parts.size(); ++i) {
      if (parts[i] == "approx") {
        p.approximate = true;
      } else if (parts[i] == "fp16") {
        p.values = ValueType::kF16;
      } else {
        ok = false;
      }
    }
  } else {
    ok = false;
  }
  if (!ok || spec_of(p) != spec) return bad();
  GOSSIP_RETURN_IF_ERROR(check_params(p));
  return p;
}

std::unique_ptr<Codec> make_host_codec(const DeviceCodecParams& p) {
  switch (p.id) {
    case proto::CodecId::kNone:
      return make_none();
    case proto::CodecId::kFp16:
      return make_fp16();
    case proto::CodecId::kBf16:
      return make_bf16();
    case proto::CodecId::kInt8:
      return make_int8(p.block);
    case proto::CodecId::kSign:
      return make_sign(p.block);
    case proto::CodecId::kQsgd:
      return make_qsgd(p.levels, p.bucket);
    case proto::CodecId::kTopk:
      return make_topk(p.ratio, p.approximate, p.values);
    case proto::CodecId::kRandk:
      return make_randk(p.ratio, p.values);
    case proto::CodecId::kChain:
      return nullptr;  // device_params() gives a chain no device form
  }
  return nullptr;
}

std::string spec_of(const DeviceCodecParams& p) {
  const char* fp16 = p.values == ValueType::kF16 ? ":fp16" : "";
  switch (p.id) {
    case proto::CodecId::kNone:
      return "none";
    case proto::CodecId::kFp16:
      return "fp16";
    case proto::CodecId::kBf16:
      return "bf16";
    case proto::CodecId::kInt8:
      return fmt::format("int8:{}", p.block);
    case proto::CodecId::kSign:
      return fmt::format("sign:{}", p.block);
    case proto::CodecId::kQsgd:
      return fmt::format("qsgd:{}", p.levels);
    case proto::CodecId::kTopk:
      return fmt::format("topk:{}{}{}", p.ratio, p.approximate ? ":approx" : "", fp16);
    case proto::CodecId::kRandk:
      return fmt::format("randk:{}{}", p.ratio, fp16);
    case proto::CodecId::kChain:
      return "chain";
  }
  return fmt::format("codec#{}", static_cast<int>(p.id));
}

Status check_params(const DeviceCodecParams& p) {
  switch (p.id) {
    case proto::CodecId::kNone:
    case proto::CodecId::kFp16:
    case proto::CodecId::kBf16:
      return Status::ok();
    case proto::CodecId::kInt8:
    case proto::CodecId::kSign:
      if (p.block == 0) return Status::invalid(fmt::format("{}: block size 0", spec_of(p)));
      return Status::ok();
    case proto::CodecId::kQsgd:
      if (p.levels == 0 || p.bucket == 0)
        return Status::invalid(fmt::format("{}: levels and bucket must be positive", spec_of(p)));
      return Status::ok();
    case proto::CodecId::kTopk:
    case proto::CodecId::kRandk:
      if (!(p.ratio > 0 && p.ratio <= 1))
        return Status::invalid(fmt::format("{}: ratio must be in (0, 1]", spec_of(p)));
      return Status::ok();
    case proto::CodecId::kChain:
      return Status::invalid("device codecs: the composed codecs run on the CPU only");
  }
  return Status::invalid(fmt::format("device codecs: unknown codec id {}", static_cast<int>(p.id)));
}

bool is_dense(proto::CodecId id) {
  return id != proto::CodecId::kTopk && id != proto::CodecId::kRandk &&
         id != proto::CodecId::kChain;
}

uint64_t dense_payload_bytes(const DeviceCodecParams& p, uint64_t n) {
  switch (p.id) {
    case proto::CodecId::kNone:
      return 4 * n;
    case proto::CodecId::kFp16:
    case proto::CodecId::kBf16:
      return 2 * n;
    case proto::CodecId::kInt8:
      return 4 * block_count(n, p.block) + n;
    case proto::CodecId::kSign:
      return 4 * block_count(n, p.block) + (n + 7) / 8;
    case proto::CodecId::kQsgd:
      return 4 * block_count(n, p.bucket) + (n * qsgd_code_bits(p.levels) + 7) / 8;
    default:
      return 0;
  }
}

}  // namespace gossip::compression::cuda

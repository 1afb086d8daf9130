#include "compression/codec_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <vector>

namespace gossip::compression {

const char* codec_forms() {
  return "none, fp16, bf16, int8[:BLOCK], qsgd:LEVELS, sign[:BLOCK], topk:RATIO[:approx][:fp16], "
         "randk:RATIO[:fp16], or a chain topk:RATIO[:approx][+quant:BITS][+idx:MODE] | "
         "randk:RATIO+quant:BITS (BITS 2, 4 or 8; MODE auto, delta, chunk12 or eliasfano), each "
         "optionally followed by +ef; RATIO in (0,1]";
}

std::string CodecSpec::canonical() const { return codec->spec() + (error_feedback ? "+ef" : ""); }

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

Status bad(std::string_view spec, const std::string& why) {
  return Status::invalid(fmt::format("codec '{}': {} (valid forms: {})", spec, why, codec_forms()));
}

Result<uint32_t> parse_count(std::string_view spec, std::string_view what, std::string_view text,
                             uint32_t lo, uint32_t hi) {
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    return bad(spec,
               fmt::format("{} must be an integer in [{}, {}], got '{}'", what, lo, hi, text));
  return v;
}

Result<double> parse_ratio(std::string_view spec, std::string_view text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v <= 0 || v > 1)
    return bad(spec, fmt::format("ratio must be a number in (0, 1], got '{}'", text));
  return v;
}

// The stages after a chain's selection: topk:R[:approx] or randk:R, then quant:BITS
// and idx:MODE, each at most once.
Result<std::unique_ptr<Codec>> make_chain_of(std::string_view spec,
                                             std::span<const std::string_view> stages) {
  ChainOptions o;
  auto first = split(stages[0], ':');
  if (first[0] != "topk" && first[0] != "randk")
    return bad(spec, fmt::format("a chain starts with topk or randk, not '{}'", first[0]));
  o.randk = first[0] == "randk";
  if (first.size() < 2)
    return bad(spec, fmt::format("{} needs a ratio, e.g. {}:0.01", first[0], first[0]));
  auto ratio = parse_ratio(spec, first[1]);
  if (!ratio) return ratio.status();
  o.ratio = *ratio;
  for (auto opt : std::span(first).subspan(2)) {
    if (opt == "approx" && !o.randk && !o.approximate)
      o.approximate = true;
    else
      return bad(spec, fmt::format("unknown or misplaced option '{}' for {} in a chain{}", opt,
                                   first[0], opt == "fp16" ? " (quantize with +quant:BITS)" : ""));
  }
  bool quant = false, idx = false;
  for (auto stage : stages.subspan(1)) {
    if (stage == "ef") return bad(spec, "+ef goes at the end, once");
    auto parts = split(stage, ':');
    if (parts[0] == "quant" && !quant && parts.size() == 2) {
      auto bits = parse_count(spec, "quant's bits", parts[1], 2, 8);
      if (!bits) return bits.status();
      if (*bits != 2 && *bits != 4 && *bits != 8)
        return bad(spec, fmt::format("quant takes 2, 4 or 8 bits, not {}", *bits));
      o.value_bits = *bits;
      quant = true;
    } else if (parts[0] == "idx" && !idx && parts.size() == 2) {
      if (o.randk)
        return bad(spec, "rand-k's indices are implicit (derived from the seed): no idx stage");
      if (parts[1] == "auto")
        o.indices = ChainOptions::Indices::kAuto;
      else if (parts[1] == "delta")
        o.indices = ChainOptions::Indices::kDelta;
      else if (parts[1] == "chunk12")
        o.indices = ChainOptions::Indices::kChunk12;
      else if (parts[1] == "eliasfano")
        o.indices = ChainOptions::Indices::kEliasFano;
      else
        return bad(spec, fmt::format("unknown index encoding '{}'", parts[1]));
      idx = true;
    } else {
      return bad(spec, fmt::format("unknown, repeated or malformed stage '{}'", stage));
    }
  }
  if (o.randk && !quant)
    return bad(spec, "a rand-k chain needs a quant stage (randk:RATIO alone is the rand-k codec)");
  return make_chain(o);
}

}  // namespace

Result<CodecSpec> make_codec(std::string_view spec) {
  CodecSpec out;
  std::string_view body = spec;
  constexpr std::string_view kEf = "+ef";
  if (body.ends_with(kEf)) {
    out.error_feedback = true;
    body.remove_suffix(kEf.size());
  }
  if (body.empty()) return bad(spec, "empty codec name");
  if (auto stages = split(body, '+'); stages.size() > 1) {
    auto chain = make_chain_of(spec, stages);
    if (!chain) return chain.status();
    out.codec = std::move(chain).value();
    return out;
  }
  auto parts = split(body, ':');
  std::string_view name = parts[0];
  auto args = std::span(parts).subspan(1);
  auto no_args = [&]() -> Status {
    return args.empty() ? Status::ok() : bad(spec, fmt::format("{} takes no parameter", name));
  };

  if (name == "none" || name == "fp16" || name == "bf16") {
    GOSSIP_RETURN_IF_ERROR(no_args());
    out.codec = name == "none" ? make_none() : name == "fp16" ? make_fp16() : make_bf16();
  } else if (name == "int8" || name == "sign") {
    if (args.size() > 1) return bad(spec, fmt::format("{} takes at most a block size", name));
    uint32_t block = name == "int8" ? kDefaultInt8Block : kDefaultSignBlock;
    if (!args.empty()) {
      auto b = parse_count(spec, "block size", args[0], 1, 1u << 24);
      if (!b) return b.status();
      block = *b;
    }
    out.codec = name == "int8" ? make_int8(block) : make_sign(block);
  } else if (name == "qsgd") {
    if (args.size() != 1) return bad(spec, "qsgd needs a number of levels, e.g. qsgd:16");
    auto levels = parse_count(spec, "levels", args[0], 1, 32767);
    if (!levels) return levels.status();
    out.codec = make_qsgd(*levels, kDefaultQsgdBucket);
  } else if (name == "topk" || name == "randk") {
    if (args.empty()) return bad(spec, fmt::format("{} needs a ratio, e.g. {}:0.01", name, name));
    auto ratio = parse_ratio(spec, args[0]);
    if (!ratio) return ratio.status();
    bool approx = false, fp16 = false;
    for (auto opt : args.subspan(1)) {
      if (opt == "approx" && name == "topk" && !approx && !fp16) {
        approx = true;
      } else if (opt == "fp16" && !fp16) {
        fp16 = true;
      } else {
        return bad(spec, fmt::format("unknown or misplaced option '{}' for {}", opt, name));
      }
    }
    auto values = fp16 ? ValueType::kF16 : ValueType::kF32;
    out.codec = name == "topk" ? make_topk(*ratio, approx, values) : make_randk(*ratio, values);
  } else {
    return bad(spec, fmt::format("unknown codec '{}'", name));
  }
  return out;
}

}  // namespace gossip::compression

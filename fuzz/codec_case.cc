#include "fuzz/codec_case.h"

#include <fmt/format.h>

namespace gossip::fuzz {

namespace {

constexpr const char* kIndexModes[] = {"auto", "delta", "chunk12", "eliasfano"};

uint64_t load_le(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void store_le(std::string& out, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

std::string CodecChoice::quant() const {
  constexpr const char* kQuant[] = {"", "+quant:8", "+quant:4", "+quant:2"};
  return kQuant[chain_bits & 3];
}

std::string CodecChoice::spec() const {
  // A ratio with a short exact decimal form, so that the spec string parses back to
  // the very double the sender used.
  const double ratio = static_cast<double>(1 + param % 1024) / 1024.0;
  switch (family) {
    case CodecFamily::kNone:
      return "none";
    case CodecFamily::kFp16:
      return "fp16";
    case CodecFamily::kBf16:
      return "bf16";
    case CodecFamily::kInt8:
      return fmt::format("int8:{}", 1 + uint32_t{param});
    case CodecFamily::kQsgd:
      return fmt::format("qsgd:{}", 1 + param % 32767);
    case CodecFamily::kSign:
      return fmt::format("sign:{}", 1 + uint32_t{param});
    case CodecFamily::kTopk:
      if (chain)
        return fmt::format("topk:{}{}{}+idx:{}", ratio, approx ? ":approx" : "", quant(),
                           kIndexModes[(param >> 12) & 3]);
      return fmt::format("topk:{}{}{}", ratio, approx ? ":approx" : "", fp16 ? ":fp16" : "");
    case CodecFamily::kRandk:
      if (chain) return fmt::format("randk:{}{}", ratio, chain_bits == 0 ? "+quant:8" : quant());
      return fmt::format("randk:{}{}", ratio, fp16 ? ":fp16" : "");
  }
  return "?";
}

std::string CodecChoice::prefix() const {
  std::string out;
  out.push_back(static_cast<char>(static_cast<uint8_t>(family) | (approx ? 0x08 : 0) |
                                  (fp16 ? 0x10 : 0) | (chain ? 0x20 : 0) | (chain_bits << 6)));
  store_le(out, param, 2);
  const bool large = numel >= kCodecCaseLargeBase;
  store_le(out, (large ? numel - kCodecCaseLargeBase : numel) & kCodecCaseSmallNumel, 2);
  out.push_back(static_cast<char>(large ? kCodecCaseLargeMark : 0));
  store_le(out, seed, 8);
  return out;
}

std::optional<CodecCase> parse_codec_case(const uint8_t* data, size_t size) {
  if (size < kCodecCasePrefix) return std::nullopt;
  CodecCase c;
  c.choice.family = static_cast<CodecFamily>(data[0] % kCodecFamilies);
  c.choice.approx = c.choice.family == CodecFamily::kTopk && (data[0] & 0x08);
  c.choice.fp16 =
      (c.choice.family == CodecFamily::kTopk || c.choice.family == CodecFamily::kRandk) &&
      (data[0] & 0x10);
  c.choice.chain =
      (c.choice.family == CodecFamily::kTopk || c.choice.family == CodecFamily::kRandk) &&
      (data[0] & 0x20);
  c.choice.chain_bits = c.choice.chain ? data[0] >> 6 : 0;
  c.choice.param = static_cast<uint16_t>(load_le(data + 1, 2));
  c.choice.numel = static_cast<uint32_t>(load_le(data + 3, 2)) & kCodecCaseSmallNumel;
  if (data[5] == kCodecCaseLargeMark) c.choice.numel += kCodecCaseLargeBase;
  c.choice.seed = load_le(data + 6, 8);
  c.payload = std::span(reinterpret_cast<const std::byte*>(data) + kCodecCasePrefix,
                        size - kCodecCasePrefix);
  return c;
}

}  // namespace gossip::fuzz

#pragma once
// The input format of codec_decode_fuzzer: a small prefix picks the codec, the element
// count the payload must describe and the seed, so that one target reaches every
// codec's decoder; the rest of the input is the payload.
//
//   byte  0      codec family (bits 0-2: none fp16 bf16 int8 qsgd sign topk randk) and
//                options (bit 3: topk approx, bit 4: fp16 values of topk and randk;
//                bit 5: a chain of topk or randk (compression/composed_codec.cc), its
//                value bits 32, 8, 4 or 2 by bits 6-7, rand-k's 32 read as 8)
//   bytes 1-2    parameter p, little-endian: int8 and sign block = 1 + p, qsgd levels =
//                1 + p % 32767, topk and randk ratio = (1 + p % 1024) / 1024; a top-k
//                chain's index encoding (auto, delta, chunk12, eliasfano) by bits 12-13
//   bytes 3-5    element count: the low 12 bits of bytes 3-4 (little-endian), plus 65536
//                when byte 5 is 'L' (so that top-k's approximate path, which starts at
//                65536, is reachable, while most inputs stay small and fast)
//   bytes 6-13   CodecContext::seed, little-endian
//   bytes 14-    the payload
//
// make_corpus.cc writes seeds in this format from real encoder output.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace gossip::fuzz {

inline constexpr size_t kCodecCasePrefix = 14;
inline constexpr uint32_t kCodecCaseSmallNumel = 4095;
inline constexpr uint32_t kCodecCaseLargeBase = 65536;
inline constexpr uint8_t kCodecCaseLargeMark = 'L';

enum class CodecFamily : uint8_t { kNone, kFp16, kBf16, kInt8, kQsgd, kSign, kTopk, kRandk };
inline constexpr uint8_t kCodecFamilies = 8;

struct CodecChoice {
  CodecFamily family = CodecFamily::kNone;
  bool approx = false;  // topk only
  bool fp16 = false;    // topk and randk only
  uint16_t param = 0;
  uint32_t numel = 0;  // <= kCodecCaseSmallNumel, or kCodecCaseLargeBase + that
  uint64_t seed = 0;
  bool chain = false;      // topk and randk only
  uint8_t chain_bits = 0;  // 0..3: 32, 8, 4, 2 bits a value

  // The codec spec string (compression/codec_spec.h) this choice stands for.
  std::string spec() const;
  std::string quant() const;  // a chain's quant stage
  // The prefix that parse_codec_case reads back as this choice.
  std::string prefix() const;
};

struct CodecCase {
  CodecChoice choice;
  std::span<const std::byte> payload;
};

// nullopt when the input is shorter than the prefix.
std::optional<CodecCase> parse_codec_case(const uint8_t* data, size_t size);

}  // namespace gossip::fuzz

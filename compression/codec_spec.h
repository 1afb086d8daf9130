#pragma once
// Codec spec strings, as users write them in configs and on command lines:
//   none | fp16 | bf16 | int8[:BLOCK] | qsgd:LEVELS | sign[:BLOCK]
//   | topk:RATIO[:approx][:fp16] | randk:RATIO[:fp16]
//   | topk:RATIO[:approx][+quant:BITS][+idx:MODE] | randk:RATIO+quant:BITS   (a chain)
// each optionally followed by "+ef" (error feedback). RATIO is in (0, 1]; a chain's
// error feedback covers all of its stages.

#include <memory>
#include <string>
#include <string_view>

#include "compression/codec.h"

namespace gossip::compression {

struct CodecSpec {
  std::unique_ptr<Codec> codec;
  bool error_feedback = false;
  // The canonical form: codec->spec() plus "+ef" when error feedback is on.
  std::string canonical() const;
};

inline constexpr uint32_t kDefaultInt8Block = 256;
inline constexpr uint32_t kDefaultSignBlock = 256;
inline constexpr uint32_t kDefaultQsgdBucket = 512;

// Fails with a message that names the bad part and lists the valid forms.
Result<CodecSpec> make_codec(std::string_view spec);

// The valid forms, for error messages and --help.
const char* codec_forms();

}  // namespace gossip::compression

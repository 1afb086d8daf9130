#pragma once
// A codec turns a span of fp32 values into a compact payload and back. Codecs are
// pure logic: no I/O, no state between calls (error feedback keeps its residual
// outside, see error_feedback.h), so one instance serves every thread.
//
// Every payload is self-describing enough to be validated on its own: a decoder
// checks counts, lengths, index ranges and block counts against the size it is
// asked to produce before it touches memory, and fails with a message otherwise.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/message.h"

namespace gossip::compression {

class ThreadPool;

struct CodecContext {
  // Randomness of stochastic codecs. qsgd draws its rounding from it (sender only);
  // randk derives its indices from it, so the receiver must pass the sender's seed.
  uint64_t seed = 0;
  // Large inputs are split across the pool's threads; nullptr runs on the caller.
  ThreadPool* pool = nullptr;
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual proto::CodecId id() const = 0;
  // The canonical spec string that make_codec() parses back to an equal codec.
  virtual std::string spec() const = 0;
  // Biased codecs (top-k, sign) need error feedback to converge.
  virtual bool biased() const = 0;
  // Whether the codec keeps the largest entries of what it is given (top-k), so a
  // partial sum re-encoded at every hop keeps what matters: what a sparse
  // reduce-scatter needs (sgd/collectives/ring_all_reduce.h). Rand-k's implicit indices, sign
  // and the dense codecs do not.
  virtual bool keeps_largest() const { return false; }
  // An upper bound of encode()'s output for n elements.
  virtual uint64_t max_encoded_bytes(uint64_t n) const = 0;
  // Replaces `out` with the payload for x (out.size() is the exact wire size).
  virtual Status encode(std::span<const float> x, const CodecContext& ctx,
                        std::vector<std::byte>& out) const = 0;
  // Writes the decoded values into y, whose size is the element count the payload
  // must describe (a payload for another count is an error, never a partial write).
  virtual Status decode(std::span<const std::byte> in, const CodecContext& ctx,
                        std::span<float> y) const = 0;
};

// Value types of sparse payloads.
enum class ValueType : uint8_t { kF32 = 0, kF16 = 1 };

// The codecs, by family. Parameters are validated by make_codec (codec_spec.h).
std::unique_ptr<Codec> make_none();
std::unique_ptr<Codec> make_fp16();
std::unique_ptr<Codec> make_bf16();
std::unique_ptr<Codec> make_int8(uint32_t block);                    // blockwise absmax scale
std::unique_ptr<Codec> make_qsgd(uint32_t levels, uint32_t bucket);  // Alistarh et al. 2017
std::unique_ptr<Codec> make_sign(uint32_t block);  // EF-signSGD, mean |x| per block
std::unique_ptr<Codec> make_topk(double ratio, bool approximate, ValueType values);
std::unique_ptr<Codec> make_randk(double ratio, ValueType values);

// A composed sparse codec (composed_codec.cc): a selection, the kept values
// quantized to `value_bits` (2, 4 or 8; 32 keeps fp32) with a scale per block, and
// the indices in the encoding `indices` names (auto: the smallest for the payload
// at hand; rand-k's are implicit).
struct ChainOptions {
  enum class Indices : uint8_t { kAuto, kDelta, kChunk12, kEliasFano };
  bool randk = false;  // else top-k
  double ratio = 0.01;
  bool approximate = false;  // top-k's sampled threshold
  uint32_t value_bits = 32;
  Indices indices = Indices::kAuto;
};
std::unique_ptr<Codec> make_chain(const ChainOptions& options);
const char* index_mode_name(ChainOptions::Indices m);

// k = ceil(ratio * n), at least 1 when n > 0 and at most n: the count top-k and
// rand-k keep.
uint64_t sparse_count(double ratio, uint64_t n);

}  // namespace gossip::compression

#pragma once
// The codecs on device buffers. Payloads are the CPU codecs' payloads byte for
// byte, so a GPU node and a CPU peer interoperate: fp16, bf16, int8, sign and
// top-k are deterministic and bit-exact; qsgd draws its rounding from the same
// counter-based stream (rng.h, keyed by (seed, element)), so it is bit-exact too
// for the same seed; rand-k derives the same indices from the same seed. Decoders
// accept exactly what the CPU decoders accept and write the same floats (the one
// difference: a NaN carried by a rand-k payload decodes to the device's canonical
// NaN, as the CPU multiplies it by n/k with its own NaN rules).
//
// Every function is blocking with respect to `stream`: it enqueues its work there
// and returns once the result (payload, or the verdict of the checks) is known,
// since the returned Status depends on the device's answer. Pointers named d_* are
// device memory; scratch memory is stream-ordered (cudaMallocAsync on `stream`).
// A failing CUDA call returns Status::io_error naming the call.
//
// Top-k selects exactly on the device (radix select, ties to the lower index, as
// the CPU's exact path); for topk:approx it sends that exact selection, which any
// approximate receiver accepts (it carries k entries). Rand-k's indices are
// derived on the host (compression/randk_indices.h, the CPU codec's own) and
// uploaded: Floyd's algorithm is a chain of k dependent draws (each pick depends on
// the set so far, each draw consumes a data-dependent number of xoshiro outputs), so
// a GPU could run it in one thread only, far slower than the CPU; 8k bytes travel.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"

namespace gossip::compression::cuda {

// A codec as plain parameters (what the kernels need).
struct DeviceCodecParams {
  proto::CodecId id = proto::CodecId::kNone;
  uint32_t block = kDefaultInt8Block;    // int8, sign: elements per scale
  uint32_t levels = 16;                  // qsgd: S
  uint32_t bucket = kDefaultQsgdBucket;  // qsgd: elements per norm
  double ratio = 0.01;                   // topk, randk: k = sparse_count(ratio, n)
  bool approximate = false;              // topk: what receivers accept (see above)
  ValueType values = ValueType::kF32;    // topk, randk
};

// The parameters of a CPU codec, parsed from its canonical spec(). qsgd's bucket is
// not part of the spec: it is kDefaultQsgdBucket, what make_codec builds.
Result<DeviceCodecParams> device_params(const Codec& codec);
// The CPU codec with these parameters: what a peer without a GPU runs.
std::unique_ptr<Codec> make_host_codec(const DeviceCodecParams& p);
// The CPU codec's spec() for these parameters (error messages use it).
std::string spec_of(const DeviceCodecParams& p);
// Fails with Status::invalid for parameters no codec takes (block, levels or
// bucket 0, ratio outside (0, 1], an unknown id).
Status check_params(const DeviceCodecParams& p);

// Dense codecs: none, fp16, bf16, int8, sign, qsgd (fixed size for n elements).
bool is_dense(proto::CodecId id);
uint64_t dense_payload_bytes(const DeviceCodecParams& p, uint64_t n);

// Dense encode, device to device: writes dense_payload_bytes(p, n) bytes at d_out.
// Fails like the CPU encoder (non-finite input for int8, sign, qsgd, a qsgd norm
// beyond fp32), with the same message; d_out's contents are then unspecified.
Status encode_dense(const DeviceCodecParams& p, const float* d_x, uint64_t n, uint64_t seed,
                    std::byte* d_out, cudaStream_t stream);

// Dense decode of `bytes` bytes at d_in into d_y[0..n). The payload is validated on
// the device (a check kernel reports the first bad scale, padding or value) before
// d_y is written, so a bad payload leaves d_y untouched, with the CPU's message.
Status decode_dense(const DeviceCodecParams& p, const std::byte* d_in, uint64_t bytes, float* d_y,
                    uint64_t n, cudaStream_t stream);

// Any codec, with the payload in host memory (as it goes on the wire). `out` is
// replaced by the payload (cleared on failure).
Status encode(const DeviceCodecParams& p, const float* d_x, uint64_t n, uint64_t seed,
              std::vector<std::byte>& out, cudaStream_t stream);
// Validates `in` completely before writing d_y[0..n) (untouched on failure). The
// seed matters to rand-k only (the sender's seed).
Status decode(const DeviceCodecParams& p, std::span<const std::byte> in, uint64_t seed, float* d_y,
              uint64_t n, cudaStream_t stream);

}  // namespace gossip::compression::cuda

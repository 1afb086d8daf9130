#pragma once
// Error feedback on the device (error_feedback.h's ErrorFeedback, same contract
// and the same floats): e <- e + u; c = Q(e); e <- e - decode(c); send c. The
// residual lives in device memory; payloads go to the host, as encode() in
// device_codecs.h.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "compression/cuda/device_buffer.h"
#include "compression/cuda/device_codecs.h"

namespace gossip::compression::cuda {

class DeviceErrorFeedback {
 public:
  // A zero residual of n floats for codec p.
  static Result<DeviceErrorFeedback> create(const DeviceCodecParams& p, size_t n);

  // Compresses d_u[0..count) for the slice [offset, offset + count) of the buffer.
  // On success `out` holds the payload and d_sent (count floats, device) the values
  // the receivers will decode from it; the residual keeps what was not sent. On
  // failure the residual is unchanged. Blocking, like encode().
  Status encode(const float* d_u, size_t offset, size_t count, uint64_t seed,
                std::vector<std::byte>& out, float* d_sent, cudaStream_t stream);

  const float* residual() const { return residual_.as<float>(); }  // device, size() floats
  size_t size() const { return n_; }
  Status reset(cudaStream_t stream);

 private:
  DeviceErrorFeedback(const DeviceCodecParams& p, size_t n, DeviceBuffer residual)
      : params_(p), n_(n), residual_(std::move(residual)) {}

  DeviceCodecParams params_;
  size_t n_;
  DeviceBuffer residual_;
};

}  // namespace gossip::compression::cuda

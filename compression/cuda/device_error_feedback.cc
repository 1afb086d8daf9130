#include "compression/cuda/device_error_feedback.h"

#include <fmt/format.h>

#include "compression/cuda/kernels.h"

namespace gossip::compression::cuda {

Result<DeviceErrorFeedback> DeviceErrorFeedback::create(const DeviceCodecParams& p, size_t n) {
  GOSSIP_RETURN_IF_ERROR(check_params(p));
  auto residual = DeviceBuffer::persistent(n * sizeof(float));
  if (!residual) return residual.status();
  if (n > 0) {
    GOSSIP_RETURN_IF_ERROR(
        cuda_status(cudaMemset(residual->as<void>(), 0, n * sizeof(float)), "cudaMemset"));
    // cudaMemset runs on the legacy stream, which a non-blocking stream does not
    // wait for: finish it before any encode() can read the residual.
    GOSSIP_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize"));
  }
  return DeviceErrorFeedback(p, n, std::move(*residual));
}

Status DeviceErrorFeedback::encode(const float* d_u, size_t offset, size_t count, uint64_t seed,
                                   std::vector<std::byte>& out, float* d_sent,
                                   cudaStream_t stream) {
  if (offset > n_ || count > n_ - offset)
    return Status::invalid(fmt::format("error feedback: slice [{}, {}) outside a buffer of {}",
                                       offset, offset + count, n_));
  float* e = residual_.as<float>() + offset;
  auto corrected = DeviceBuffer::scratch(count * sizeof(float), stream);
  if (!corrected) return corrected.status();
  float* c = corrected->as<float>();
  GOSSIP_RETURN_IF_ERROR(
      cuda_status(kernels::ef_add(e, d_u, count, c, stream), "launching ef_add"));
  if (is_dense(params_.id)) {
    // Decode straight from the device payload rather than uploading it again.
    const uint64_t bytes = dense_payload_bytes(params_, count);
    auto payload = DeviceBuffer::scratch(bytes, stream);
    if (!payload) return payload.status();
    GOSSIP_RETURN_IF_ERROR(encode_dense(params_, c, count, seed, payload->as<std::byte>(), stream));
    GOSSIP_RETURN_IF_ERROR(
        decode_dense(params_, payload->as<std::byte>(), bytes, d_sent, count, stream));
    out.resize(bytes);
    if (bytes > 0)
      GOSSIP_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(out.data(), payload->as<void>(), bytes, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync"));
  } else {
    GOSSIP_RETURN_IF_ERROR(cuda::encode(params_, c, count, seed, out, stream));
    GOSSIP_RETURN_IF_ERROR(cuda::decode(params_, out, seed, d_sent, count, stream));
  }
  GOSSIP_RETURN_IF_ERROR(
      cuda_status(kernels::ef_subtract(c, d_sent, count, e, stream), "launching ef_subtract"));
  return cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

Status DeviceErrorFeedback::reset(cudaStream_t stream) {
  if (n_ == 0) return Status::ok();
  GOSSIP_RETURN_IF_ERROR(cuda_status(
      cudaMemsetAsync(residual_.as<void>(), 0, n_ * sizeof(float), stream), "cudaMemsetAsync"));
  return cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace gossip::compression::cuda

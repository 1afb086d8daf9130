#include "compression/cuda/device_buffer.h"

#include <fmt/format.h>

#include <utility>

namespace gossip::compression::cuda {

Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::ok();
  return Status::io_error(fmt::format("cuda: {}: {}", what, cudaGetErrorString(err)));
}

Result<DeviceBuffer> DeviceBuffer::scratch(size_t bytes, cudaStream_t stream) {
  DeviceBuffer b;
  b.stream_ = stream;
  b.stream_ordered_ = true;
  if (bytes == 0) return b;
  GOSSIP_RETURN_IF_ERROR(cuda_status(cudaMallocAsync(&b.p_, bytes, stream),
                                     fmt::format("cudaMallocAsync({} bytes)", bytes)));
  b.bytes_ = bytes;
  return b;
}

Result<DeviceBuffer> DeviceBuffer::persistent(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  GOSSIP_RETURN_IF_ERROR(
      cuda_status(cudaMalloc(&b.p_, bytes), fmt::format("cudaMalloc({} bytes)", bytes)));
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : p_(std::exchange(other.p_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      stream_(other.stream_),
      stream_ordered_(other.stream_ordered_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    p_ = std::exchange(other.p_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    stream_ = other.stream_;
    stream_ordered_ = other.stream_ordered_;
  }
  return *this;
}

void DeviceBuffer::release() {
  if (p_ == nullptr) return;
  // Nothing to report to from here; a failing free leaks at worst.
  if (stream_ordered_) {
    (void)cudaFreeAsync(p_, stream_);
  } else {
    (void)cudaFree(p_);
  }
  p_ = nullptr;
  bytes_ = 0;
}

}  // namespace gossip::compression::cuda

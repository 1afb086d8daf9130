#pragma once
// Device memory owned by a value (RAII), and CUDA errors as Status.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string_view>

#include "base/status.h"

namespace gossip::compression::cuda {

// Status::io_error("cuda: <what>: <CUDA's message>") unless err is cudaSuccess.
Status cuda_status(cudaError_t err, std::string_view what);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Stream-ordered (cudaMallocAsync): usable on `stream` at once, and freed on it
  // when dropped, after the work queued there before. For scratch memory.
  static Result<DeviceBuffer> scratch(size_t bytes, cudaStream_t stream);
  // cudaMalloc'd, tied to no stream: for buffers that outlive the calls using them.
  static Result<DeviceBuffer> persistent(size_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  // nullptr for an empty buffer (0 bytes: nothing is allocated).
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release();

  void* p_ = nullptr;
  size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  bool stream_ordered_ = false;
};

}  // namespace gossip::compression::cuda

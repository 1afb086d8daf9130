#pragma once
// The all-reduce over NCCL, one GPU per daemon. The daemon's models live in host
// shared memory, so all_reduce_mean stages them through the GPU in chunks:
// host -> pinned buffer -> device, ncclAllReduce(ncclAvg) in place, and back.
// CUDA trainers hand device memory to all_reduce_mean_device instead.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): init and every
// operation are polled against the caller's deadline and cancel flag. When one is
// hit, or NCCL or CUDA fails, the communicator is aborted (ncclCommAbort) and every
// later call fails with Status::closed: the owner makes a new one (new unique id).
//
// NCCL messages carry no header: the round, the element count and the layout
// fingerprint cannot be checked against the peers here (the unique id's exchange
// over the control channel is the place for that). Ranks that disagree hang until
// the deadline. One caller at a time.

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "sgd/collectives/all_reduce.h"

struct ncclComm;  // nccl.h's ncclComm_t is ncclComm*; nccl.h stays out of this header

namespace gossip::sgd {

struct NcclOptions {
  uint32_t rank = 0;
  uint32_t size = 1;
  std::array<char, 128> unique_id{};         // nccl_unique_id() of rank 0, the same on every rank
  int device = 0;                            // CUDA device ordinal; one rank per GPU (NCCL's rule)
  size_t staging_bytes = size_t{256} << 20;  // device (and pinned host) staging, two slots
  std::chrono::steady_clock::time_point deadline;  // for the communicator's init
};

// OK when a CUDA device and an NCCL (>= 2.14: non-blocking communicators, ncclAvg)
// can be used; otherwise why not (no driver, no device, old NCCL).
Status nccl_available();

// A fresh unique id (ncclGetUniqueId) for rank 0 to hand to the others. Fails with
// nccl_available()'s reason where this node could not take part itself.
Result<std::array<char, 128>> nccl_unique_id();

// OK when NCCL can run an operation with these options: fp32 without a codec.
Status nccl_accepts(const CollectiveOptions& options);

class NcclAllReduce final : public AllReduce {
 public:
  // Joins the communicator: every rank calls it with the same size and unique id
  // (concurrently: init is collective), by options.deadline.
  static Result<std::unique_ptr<NcclAllReduce>> create(const NcclOptions& options);
  ~NcclAllReduce() override;
  NcclAllReduce(const NcclAllReduce&) = delete;
  NcclAllReduce& operator=(const NcclAllReduce&) = delete;

  // Host data through the staging buffers. `round` is not used: NCCL orders
  // operations by call order. On failure data is unchanged.
  Status all_reduce_mean(std::span<float> data, uint64_t round,
                         const CollectiveOptions& options) override;
  // In place on device memory of this communicator's GPU, after the work already
  // queued on `stream`; returns once the result is there. On failure d_data's
  // contents are unspecified (NCCL reduces in place): keep a copy where that matters.
  Status all_reduce_mean_device(float* d_data, size_t n, cudaStream_t stream,
                                const CollectiveOptions& options);
  // Nothing arrives between operations; notices an asynchronous NCCL error early.
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  void set_layout_fingerprint(uint64_t fingerprint) override { layout_ = fingerprint; }
  uint64_t layout_fingerprint() const { return layout_; }

  // True once the communicator was aborted; why in the Status of the failed call.
  bool broken() const { return comm_ == nullptr; }
  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }

 private:
  explicit NcclAllReduce(const NcclOptions& options);
  Status init(const NcclOptions& options);
  Status usable() const;
  std::string where() const;  // "nccl rank r of n", the prefix of every error
  // Queues one chunk of `count` floats in staging slot `slot` and records done_[slot].
  Status enqueue(size_t slot, size_t count, const CollectiveOptions& options);
  // ncclAllReduce(ncclAvg) in place on `stream`, waiting out a non-blocking launch.
  Status launch(float* d_data, size_t n, cudaStream_t stream, const CollectiveOptions& options);
  Status wait_event(cudaEvent_t event, const char* what, const CollectiveOptions& options);
  // Aborts the communicator (when err is not OK) and returns err.
  Status fail(Status err);

  uint32_t rank_;
  uint32_t size_;
  int device_;
  size_t slot_elems_;  // floats per staging slot
  ncclComm* comm_ = nullptr;
  std::string broken_;  // why comm_ was aborted
  cudaStream_t stream_ = nullptr;
  std::array<cudaEvent_t, 2> done_{};  // a slot's chunk is back in pinned_
  float* staging_ = nullptr;           // device: 2 slots
  float* pinned_ = nullptr;            // page-locked host: 2 slots
  std::vector<float> backup_;          // chunks written back before the last one is done
  uint64_t layout_ = 0;
};

}  // namespace gossip::sgd

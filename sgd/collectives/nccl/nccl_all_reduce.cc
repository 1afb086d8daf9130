#include "sgd/collectives/nccl/nccl_all_reduce.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "compression/codec.h"

namespace gossip::sgd {
namespace {

using Clock = std::chrono::steady_clock;

// How long the destructor lets ncclCommFinalize flush before it aborts instead.
constexpr auto kFinalizeGrace = std::chrono::seconds(10);

Status cuda_error(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::ok();
  return Status::io_error(fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

Status nccl_error(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess) return Status::ok();
  // NCCL's own account (which call, which peer's socket) when it has one; it is the
  // calling thread's last NCCL error, so it may be older than this one.
  const char* last = ncclGetLastError(nullptr);
  if (last == nullptr || *last == '\0')
    return Status::io_error(fmt::format("{}: {}", what, ncclGetErrorString(r)));
  return Status::io_error(
      fmt::format("{}: {} (NCCL's last error: {})", what, ncclGetErrorString(r), last));
}

// The communicator's state: nullopt while an operation is still being issued
// (ncclInProgress), OK when idle, otherwise its asynchronous error.
std::optional<Status> comm_state(ncclComm_t comm, std::string_view what) {
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess)
    return nccl_error(r, "ncclCommGetAsyncError");
  if (state == ncclInProgress) return std::nullopt;
  return nccl_error(state, what);
}

// Polls `step` (nullopt: not yet) until it answers, the cancel flag is set or the
// deadline passes. Yields first (small operations finish in microseconds), then
// sleeps so that a long wait does not burn a core.
template <typename Step>
Status poll(Step step, std::string_view what, Clock::time_point deadline,
            const std::atomic<bool>* cancel) {
  for (int spins = 0;; ++spins) {
    if (std::optional<Status> s = step()) return *std::move(s);
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed))
      return Status::closed(fmt::format("{}: cancelled", what));
    if (Clock::now() >= deadline)
      return Status::timeout(fmt::format("{}: not done by the deadline", what));
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// Makes `device` current on the calling thread and gives the caller its own back
// after: the device entry point runs on trainer threads with a device of their own.
class DeviceScope {
 public:
  DeviceScope() = default;
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  Status enter(int device) {
    int current = -1;
    GOSSIP_RETURN_IF_ERROR(cuda_error(cudaGetDevice(&current), "cudaGetDevice"));
    if (current == device) return Status::ok();
    GOSSIP_RETURN_IF_ERROR(
        cuda_error(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device)));
    previous_ = current;
    return Status::ok();
  }

 private:
  int previous_ = -1;
};

}  // namespace

Status nccl_available() {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess)
    return Status::io_error(fmt::format("nccl: no usable CUDA device: cudaGetDeviceCount: {}",
                                        cudaGetErrorString(err)));
  if (count == 0) return Status::io_error("nccl: no CUDA device");
  int version = 0;
  GOSSIP_RETURN_IF_ERROR(
      nccl_error(ncclGetVersion(&version), "ncclGetVersion").with_context("nccl"));
  if (version < NCCL_VERSION(2, 14, 0))
    return Status::io_error(
        fmt::format("nccl: NCCL {} is older than 2.14 (non-blocking communicators)", version));
  return Status::ok();
}

Result<std::array<char, 128>> nccl_unique_id() {
  // ncclGetUniqueId itself needs no GPU; refusing here keeps a node that could not
  // join from handing out ids.
  GOSSIP_RETURN_IF_ERROR(nccl_available());
  ncclUniqueId id;
  GOSSIP_RETURN_IF_ERROR(nccl_error(ncclGetUniqueId(&id), "ncclGetUniqueId").with_context("nccl"));
  std::array<char, 128> out;
  static_assert(sizeof(id.internal) == out.size());
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

Status nccl_accepts(const CollectiveOptions& options) {
  const compression::Codec* codec = options.compression.codec;
  if (codec != nullptr && codec->id() != proto::CodecId::kNone)
    return Status::invalid("nccl reduces fp32 only; compression needs the tcp or rdma ring");
  return Status::ok();
}

Result<std::unique_ptr<NcclAllReduce>> NcclAllReduce::create(const NcclOptions& o) {
  if (o.size == 0 || o.size > INT_MAX)
    return Status::invalid(fmt::format("nccl: communicator of {} ranks", o.size));
  if (o.rank >= o.size)
    return Status::invalid(
        fmt::format("nccl: rank {} out of a communicator of {}", o.rank, o.size));
  if (o.device < 0) return Status::invalid(fmt::format("nccl: CUDA device {}", o.device));
  if (o.staging_bytes < 2 * sizeof(float))
    return Status::invalid(
        fmt::format("nccl: {} staging bytes hold no float per slot (two slots)", o.staging_bytes));
  GOSSIP_RETURN_IF_ERROR(nccl_available());
  int count = 0;
  GOSSIP_RETURN_IF_ERROR(cuda_error(cudaGetDeviceCount(&count), "nccl: cudaGetDeviceCount"));
  if (o.device >= count)
    return Status::invalid(
        fmt::format("nccl: no CUDA device {} (this node has {})", o.device, count));
  std::unique_ptr<NcclAllReduce> self(new NcclAllReduce(o));
  GOSSIP_RETURN_IF_ERROR(self->init(o).with_context(self->where()));
  return self;
}

NcclAllReduce::NcclAllReduce(const NcclOptions& o)
    : rank_(o.rank),
      size_(o.size),
      device_(o.device),
      slot_elems_(o.staging_bytes / (2 * sizeof(float))) {}

Status NcclAllReduce::init(const NcclOptions& o) {
  DeviceScope scope;
  GOSSIP_RETURN_IF_ERROR(scope.enter(device_));
  // Staging first: a node short of memory fails here, before its peers wait on it in init.
  GOSSIP_RETURN_IF_ERROR(cuda_error(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                    "cudaStreamCreateWithFlags"));
  for (cudaEvent_t& e : done_)
    GOSSIP_RETURN_IF_ERROR(cuda_error(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                                      "cudaEventCreateWithFlags"));
  const size_t bytes = 2 * slot_elems_ * sizeof(float);
  GOSSIP_RETURN_IF_ERROR(
      cuda_error(cudaMalloc(&staging_, bytes), fmt::format("cudaMalloc({} bytes)", bytes)));
  GOSSIP_RETURN_IF_ERROR(
      cuda_error(cudaMallocHost(&pinned_, bytes), fmt::format("cudaMallocHost({} bytes)", bytes)));

  ncclUniqueId id;
  std::memcpy(id.internal, o.unique_id.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and operations return at once; we poll them against deadlines
  ncclComm_t comm = nullptr;
  const ncclResult_t r =
      ncclCommInitRankConfig(&comm, static_cast<int>(size_), id, static_cast<int>(rank_), &config);
  comm_ = comm;
  if (r != ncclSuccess && r != ncclInProgress) return fail(nccl_error(r, "ncclCommInitRankConfig"));
  const std::string what =
      fmt::format("ncclCommInitRankConfig on device {} (all {} ranks must join with one unique id)",
                  device_, size_);
  return fail(poll([&] { return comm_state(comm_, what); }, what, o.deadline, nullptr));
}

NcclAllReduce::~NcclAllReduce() {
  DeviceScope scope;
  (void)scope.enter(device_);
  // The copies of an aborted operation may still be queued (NCCL's kernels quit on
  // abort); the buffers are freed only after them.
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  if (comm_ != nullptr) {
    // Finalize flushes NCCL's own work; a peer that is gone can keep it from
    // finishing, so it gets a grace period and the communicator is aborted after.
    const ncclResult_t r = ncclCommFinalize(comm_);
    const Status st = r == ncclSuccess || r == ncclInProgress
                          ? poll([&] { return comm_state(comm_, "ncclCommFinalize"); },
                                 "ncclCommFinalize", Clock::now() + kFinalizeGrace, nullptr)
                          : nccl_error(r, "ncclCommFinalize");
    (void)(st.is_ok() ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
  }
  for (cudaEvent_t e : done_)
    if (e != nullptr) (void)cudaEventDestroy(e);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  if (staging_ != nullptr) (void)cudaFree(staging_);
  if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
}

std::string NcclAllReduce::where() const { return fmt::format("nccl rank {} of {}", rank_, size_); }

Status NcclAllReduce::usable() const {
  if (comm_ != nullptr) return Status::ok();
  return Status::closed(fmt::format("{}: the communicator was aborted after: {}; create a new one",
                                    where(), broken_));
}

Status NcclAllReduce::fail(Status err) {
  if (err.is_ok() || comm_ == nullptr) return err;
  // Where the ranks stand is unknown now (some may have reduced, some not): nothing
  // can be issued on this communicator again, and aborting frees peers stuck in it.
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
  broken_ = err.message();
  return err;
}

Status NcclAllReduce::launch(float* d_data, size_t n, cudaStream_t stream,
                             const CollectiveOptions& o) {
  const ncclResult_t r = ncclAllReduce(d_data, d_data, n, ncclFloat32, ncclAvg, comm_, stream);
  if (r == ncclSuccess) return Status::ok();
  if (r != ncclInProgress) return nccl_error(r, "ncclAllReduce");
  // Non-blocking: the operation is on the stream only once the communicator leaves
  // ncclInProgress; nothing may be queued behind it before.
  return poll([&] { return comm_state(comm_, "ncclAllReduce"); }, "ncclAllReduce (launch)",
              o.deadline, o.cancel);
}

Status NcclAllReduce::wait_event(cudaEvent_t event, const char* what, const CollectiveOptions& o) {
  return poll(
      [&]() -> std::optional<Status> {
        const cudaError_t e = cudaEventQuery(event);
        if (e == cudaSuccess) return Status::ok();
        if (e != cudaErrorNotReady) return cuda_error(e, "cudaEventQuery");
        // A lost peer shows here (a network error) while the kernel keeps waiting for it.
        if (std::optional<Status> s = comm_state(comm_, what); s && !s->is_ok()) return s;
        return std::nullopt;
      },
      what, o.deadline, o.cancel);
}

Status NcclAllReduce::enqueue(size_t slot, size_t count, const CollectiveOptions& o) {
  float* dev = staging_ + slot * slot_elems_;
  float* host = pinned_ + slot * slot_elems_;
  const size_t bytes = count * sizeof(float);
  GOSSIP_RETURN_IF_ERROR(
      cuda_error(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync (host to device)"));
  GOSSIP_RETURN_IF_ERROR(launch(dev, count, stream_, o));
  GOSSIP_RETURN_IF_ERROR(
      cuda_error(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_),
                 "cudaMemcpyAsync (device to host)"));
  return cuda_error(cudaEventRecord(done_[slot], stream_), "cudaEventRecord");
}

Status NcclAllReduce::all_reduce_mean(std::span<float> data, uint64_t,
                                      const CollectiveOptions& options) {
  GOSSIP_RETURN_IF_ERROR(nccl_accepts(options));
  GOSSIP_RETURN_IF_ERROR(usable());
  if (data.empty()) return Status::ok();
  DeviceScope scope;
  GOSSIP_RETURN_IF_ERROR(scope.enter(device_).with_context(where()));

  // Two staging slots: while the GPU (and the network) work on one chunk, the host
  // copies the previous result out of the other slot and the next chunk in.
  const size_t chunks = (data.size() + slot_elems_ - 1) / slot_elems_;
  auto chunk = [&](size_t k) {
    return data.subspan(k * slot_elems_, std::min(slot_elems_, data.size() - k * slot_elems_));
  };
  // Results land in data chunk by chunk, so all but the last chunk's inputs are kept
  // until the last one is done: on failure data is put back as it was.
  const size_t keep = (chunks - 1) * slot_elems_;
  if (backup_.size() < keep) backup_.resize(keep);
  size_t written = 0;
  Status st;
  for (size_t k = 0; k < chunks + 2 && st.is_ok(); ++k) {
    const size_t slot = k % 2;
    if (k >= 2) {  // chunk k - 2 used this slot: retire it
      st = wait_event(done_[slot], "ncclAllReduce", options);
      if (!st.is_ok()) break;
      const std::span<float> out = chunk(k - 2);
      if (k - 2 + 1 < chunks) std::memcpy(backup_.data() + written, out.data(), out.size_bytes());
      std::memcpy(out.data(), pinned_ + slot * slot_elems_, out.size_bytes());
      written += out.size();
    }
    if (k < chunks) {
      const std::span<float> in = chunk(k);
      std::memcpy(pinned_ + slot * slot_elems_, in.data(), in.size_bytes());
      st = enqueue(slot, in.size(), options);
    }
  }
  if (st.is_ok()) return st;
  std::memcpy(data.data(), backup_.data(), written * sizeof(float));
  return fail(st.with_context(fmt::format("all-reduce of {} floats", data.size())))
      .with_context(where());
}

Status NcclAllReduce::all_reduce_mean_device(float* d_data, size_t n, cudaStream_t stream,
                                             const CollectiveOptions& options) {
  GOSSIP_RETURN_IF_ERROR(nccl_accepts(options));
  GOSSIP_RETURN_IF_ERROR(usable());
  if (n == 0) return Status::ok();
  DeviceScope scope;
  GOSSIP_RETURN_IF_ERROR(scope.enter(device_).with_context(where()));
  // NCCL would fault on the GPU (and take the peers down) where this would fail here.
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, d_data);
  if (err != cudaSuccess) (void)cudaGetLastError();  // not sticky; clear it
  if (err != cudaSuccess ||
      (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) ||
      attr.device != device_)
    return Status::invalid(fmt::format("{}: device all-reduce: {} is not memory of CUDA device {}",
                                       where(), static_cast<const void*>(d_data), device_));
  Status st = launch(d_data, n, stream, options);
  if (st.is_ok()) st = cuda_error(cudaEventRecord(done_[0], stream), "cudaEventRecord");
  if (st.is_ok()) st = wait_event(done_[0], "ncclAllReduce", options);
  if (st.is_ok()) return st;
  return fail(st.with_context(fmt::format("device all-reduce of {} floats", n)))
      .with_context(where());
}

void NcclAllReduce::progress(uint64_t, size_t, std::chrono::milliseconds) {
  if (comm_ == nullptr) return;
  if (std::optional<Status> s = comm_state(comm_, "asynchronous error"); s && !s->is_ok())
    (void)fail(*s);
}

}  // namespace gossip::sgd

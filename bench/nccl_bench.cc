// The daemon's NCCL all-reduce (sgd/collectives/nccl/nccl_all_reduce.h) against NCCL alone,
// nccl-tests style, in the same run (shared/GPU-CHECKLIST.md, item 4). Measures,
// never asserts.
//
//   nccl_bench --sizes 1000000,25000000,100000000 --reps 20
//   nccl_bench --two-ranks-one-gpu     # what NCCL answers two ranks on one GPU
//
// On one GPU the communicator has one rank (NCCL refuses two ranks on one device
// since 2.5), so this times what the wrapper adds around ncclAllReduce: the
// non-blocking launch, the polling against the deadline, and for host data the
// staging through page-locked slots. The rows:
//   nccl alone      ncclAllReduce(ncclAvg) in place on device memory, then
//                   cudaStreamSynchronize (a blocking communicator, as nccl-tests);
//   ours, device    NcclAllReduce::all_reduce_mean_device on the same buffer;
//   copy anchor     cudaMemcpy host (page-locked) to device and back of the buffer:
//                   the floor for any staging of host data;
//   ours, host      NcclAllReduce::all_reduce_mean on pageable host data (the
//                   daemon's arena path).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/timing.h"
#include "sgd/collectives/nccl/nccl_all_reduce.h"

namespace {

using gossip::sgd::CollectiveOptions;
using gossip::sgd::NcclAllReduce;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using gossip::bench::median_seconds;
using gossip::bench::split_csv;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "nccl_bench: %s\n", what.c_str());
  std::exit(1);
}

void check(const gossip::Status& st, const char* what) {
  if (!st.is_ok()) die(std::string(what) + ": " + st.message());
}
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(err));
}
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(std::string(what) + ": " + ncclGetErrorString(r));
}

CollectiveOptions within(std::chrono::seconds s) {
  CollectiveOptions o;
  o.deadline = Clock::now() + s;
  return o;
}

std::unique_ptr<NcclAllReduce> make(uint32_t rank, uint32_t size, const std::array<char, 128>& id,
                                    gossip::Status* why) {
  auto ar = NcclAllReduce::create(
      {.rank = rank, .size = size, .unique_id = id, .device = 0, .deadline = Clock::now() + 30s});
  if (!ar) {
    *why = ar.status();
    return nullptr;
  }
  return std::move(*ar);
}

// Two ranks on device 0, as two threads: NCCL's answer, and the time to get it.
int two_ranks_one_gpu() {
  auto id = gossip::sgd::nccl_unique_id();
  check(id.status(), "nccl_unique_id");
  std::array<gossip::Status, 2> why;
  std::array<std::unique_ptr<NcclAllReduce>, 2> ranks;
  const auto start = Clock::now();
  std::array<std::thread, 2> threads;
  for (uint32_t r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] { ranks[r] = make(r, 2, *id, &why[r]); });
  for (auto& t : threads) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  for (uint32_t r = 0; r < 2; ++r)
    std::printf("rank %u of 2 on GPU 0: %s (after %.2f s)\n", r,
                ranks[r] ? "created" : why[r].message().c_str(), s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"NCCL all-reduce: the daemon's wrapper against NCCL alone, one GPU"};
  std::string sizes_arg = "1000000,25000000,100000000";
  int reps = 20;
  int warmup = 3;
  bool probe = false;
  app.add_option("--sizes", sizes_arg, "comma-separated element counts (fp32)");
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed repetitions first")->check(CLI::NonNegativeNumber);
  app.add_flag("--two-ranks-one-gpu", probe, "only try a 2-rank communicator on GPU 0");
  CLI11_PARSE(app, argc, argv);
  check(gossip::sgd::nccl_available(), "nccl_available");
  if (probe) return two_ranks_one_gpu();

  int version = 0;
  check(ncclGetVersion(&version), "ncclGetVersion");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  check(cudaSetDevice(0), "cudaSetDevice");
  std::printf("device: %s, NCCL %d, 1 rank, median of %d after %d warm-up\n\n", prop.name, version,
              reps, warmup);

  ncclUniqueId raw{};
  check(ncclGetUniqueId(&raw), "ncclGetUniqueId");
  ncclComm_t alone = nullptr;
  check(ncclCommInitRank(&alone, 1, raw, 0), "ncclCommInitRank");
  auto id = gossip::sgd::nccl_unique_id();
  check(id.status(), "nccl_unique_id");
  gossip::Status why;
  std::unique_ptr<NcclAllReduce> ours = make(0, 1, *id, &why);
  if (!ours) die("NcclAllReduce::create: " + why.message());
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  std::printf(
      "| elements | nccl alone GB/s | ours, device GB/s | ours/alone | copy anchor GB/s "
      "| ours, host GB/s | host/anchor |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& size : split_csv(sizes_arg)) {
    const uint64_t n = std::stoull(size);
    const size_t bytes = 4 * n;
    float* d = nullptr;
    float* pinned = nullptr;
    check(cudaMalloc(&d, bytes), "cudaMalloc");
    check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
    std::vector<float> host(n, 1.5f);
    check(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice), "upload");

    const double t_alone = median_seconds(warmup, reps, [&] {
      check(ncclAllReduce(d, d, n, ncclFloat32, ncclAvg, alone, stream), "ncclAllReduce");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
    const double t_device = median_seconds(warmup, reps, [&] {
      check(ours->all_reduce_mean_device(d, n, stream, within(60s)), "all_reduce_mean_device");
    });
    const double t_anchor = median_seconds(warmup, reps, [&] {
      check(cudaMemcpyAsync(d, pinned, bytes, cudaMemcpyHostToDevice, stream), "H2D");
      check(cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDeviceToHost, stream), "D2H");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
    const double t_host = median_seconds(warmup, reps, [&] {
      check(ours->all_reduce_mean(host, 0, within(60s)), "all_reduce_mean");
    });
    const auto gbs = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
    std::printf("| %llu | %.1f | %.1f | %.3f | %.1f | %.1f | %.2f |\n",
                static_cast<unsigned long long>(n), gbs(t_alone), gbs(t_device), t_alone / t_device,
                gbs(t_anchor), gbs(t_host), t_anchor / t_host);
    std::fflush(stdout);
    if (host[n / 2] != 1.5f) die("the mean of one rank changed the data");
    cudaFree(d);
    cudaFreeHost(pinned);
  }
  ncclCommDestroy(alone);
  cudaStreamDestroy(stream);
  return 0;
}

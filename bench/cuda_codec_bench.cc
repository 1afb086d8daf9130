// The device codecs' throughput (compression/cuda/device_codecs.h) against the
// device's own cudaMemcpy device-to-device of the same buffer, in the same run.
// Measures, never asserts (shared/GPU-CHECKLIST.md, item 3).
//
//   cuda_codec_bench --sizes 25000000,250000000 --reps 9
//
// GB/s is of fp32 input (n * 4 bytes / median time) for encode, decode and the copy
// alike, so the columns compare directly; "% copy" is the copy's time over the
// codec's. Dense codecs are timed device to device (encode_dense, decode_dense: the
// decode includes the payload check it runs before writing). Top-k and rand-k are
// timed as the daemon calls them, with the payload in host memory: encode includes
// the selection and the copy of k entries back, decode their upload and checks.
// Every call returns once its result is there (the API blocks), so wall-clock time
// of one call is what a caller pays, allocation of scratch included.

#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "compression/codec_spec.h"
#include "compression/cuda/device_buffer.h"
#include "compression/cuda/device_codecs.h"

namespace {

namespace cuda = gossip::compression::cuda;

using gossip::bench::median_seconds;
using gossip::bench::split_csv;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cuda_codec_bench: %s\n", what.c_str());
  std::exit(1);
}

void check(const gossip::Status& st, const std::string& what) {
  if (!st.is_ok()) die(what + ": " + st.message());
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Device codec encode/decode throughput against cudaMemcpy device to device"};
  std::string sizes_arg = "25000000,250000000";
  std::string codecs_arg =
      "none,fp16,bf16,int8,sign,qsgd:16,topk:0.01,topk:0.01:approx,topk:0.01:fp16,"
      "topk:0.001:approx:fp16,randk:0.01,randk:0.01:fp16";
  int reps = 9;
  int warmup = 2;
  app.add_option("--sizes", sizes_arg, "comma-separated element counts");
  app.add_option("--codecs", codecs_arg, "comma-separated codec specs");
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed repetitions first")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("device: %s (%d SMs), median of %d after %d warm-up\n", prop.name,
              prop.multiProcessorCount, reps, warmup);

  for (const std::string& size : split_csv(sizes_arg)) {
    const uint64_t n = std::stoull(size);
    std::vector<float> host(n);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : host) v = normal(rng);

    auto x = cuda::DeviceBuffer::persistent(4 * n);
    auto y = cuda::DeviceBuffer::persistent(4 * n);
    auto payload = cuda::DeviceBuffer::persistent(4 * n + 4096);
    if (!x || !y || !payload) die("cudaMalloc of " + std::to_string(4 * n) + " bytes failed");
    check(cudaMemcpy(x->as<float>(), host.data(), 4 * n, cudaMemcpyHostToDevice), "upload");

    const double copy = median_seconds(warmup, reps, [&] {
      check(
          cudaMemcpyAsync(y->as<float>(), x->as<float>(), 4 * n, cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
    const auto gbs = [&](double s) { return 4.0 * static_cast<double>(n) / s / 1e9; };
    std::printf("\n%llu elements (%.0f MB fp32): cudaMemcpy device to device %.1f GB/s\n\n",
                static_cast<unsigned long long>(n), 4e-6 * static_cast<double>(n), gbs(copy));
    std::printf("| codec | encode GB/s | %% copy | decode GB/s | %% copy | payload bytes |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");

    for (const std::string& spec : split_csv(codecs_arg)) {
      auto made = gossip::compression::make_codec(spec);
      if (!made) die(spec + ": " + made.status().message());
      auto p = cuda::device_params(*made->codec);
      if (!p) die(spec + ": " + p.status().message());
      double enc = 0, dec = 0;
      uint64_t bytes = 0;
      if (cuda::is_dense(p->id)) {
        bytes = cuda::dense_payload_bytes(*p, n);
        enc = median_seconds(warmup, reps, [&] {
          check(cuda::encode_dense(*p, x->as<float>(), n, 1, payload->as<std::byte>(), stream),
                spec + " encode");
        });
        dec = median_seconds(warmup, reps, [&] {
          check(cuda::decode_dense(*p, payload->as<std::byte>(), bytes, y->as<float>(), n, stream),
                spec + " decode");
        });
      } else {
        std::vector<std::byte> wire;
        enc = median_seconds(warmup, reps, [&] {
          check(cuda::encode(*p, x->as<float>(), n, 1, wire, stream), spec + " encode");
        });
        bytes = wire.size();
        dec = median_seconds(warmup, reps, [&] {
          check(cuda::decode(*p, wire, 1, y->as<float>(), n, stream), spec + " decode");
        });
      }
      std::printf("| %s | %.1f | %.0f%% | %.1f | %.0f%% | %llu |\n", spec.c_str(), gbs(enc),
                  100.0 * copy / enc, gbs(dec), 100.0 * copy / dec,
                  static_cast<unsigned long long>(bytes));
      std::fflush(stdout);
    }
  }
  cudaStreamDestroy(stream);
  return 0;
}

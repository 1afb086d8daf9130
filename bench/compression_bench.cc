// Codec throughput: encode and decode of every codec against memcpy of the same
// buffer, measured in the same run. Measures, never asserts.
//
//   compression_bench --sizes 1000000,25000000 --threads 1,2 --reps 9 --json out.jsonl
//   compression_bench --isa portable     # the codecs' portable loops instead of AVX2/AVX-512
//
// Throughput is GB/s of fp32 input (n * 4 bytes / median time) for encode and for
// decode alike, so the two columns and the memcpy column are directly comparable.
// memcpy copies the same n floats between two pre-touched buffers, cut into the same
// number of ranges as the codecs get (one per thread) and run on the same pool.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/isa.h"
#include "bench/timing.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "compression/thread_pool.h"

namespace {

using gossip::compression::CodecContext;
using gossip::compression::ThreadPool;

using gossip::bench::median_seconds;
using gossip::bench::split_csv;

// Keeps the compiler from dropping work whose result is otherwise unused.
volatile float g_sink = 0.0f;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Codec encode/decode throughput against memcpy"};
  std::string sizes_arg = "1000000,25000000";
  std::string threads_arg = "1,2";
  std::string codecs_arg = "none,fp16,bf16,int8,qsgd:16,sign,topk:0.01,topk:0.01:approx,randk:0.01";
  int reps = 9;
  int warmup = 2;
  std::string json_path;
  uint64_t seed = 42;
  app.add_option("--sizes", sizes_arg, "comma-separated element counts");
  app.add_option("--threads", threads_arg,
                 "comma-separated thread counts (pool size, caller included)");
  app.add_option("--codecs", codecs_arg, "comma-separated codec specs");
  app.add_option("--reps", reps, "timed repetitions (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed repetitions first")->check(CLI::NonNegativeNumber);
  app.add_option("--json", json_path, "also write one JSON line per measurement to this file");
  app.add_option("--seed", seed, "data and codec seed");
  std::string isa_arg;
  app.add_option(
         "--isa", isa_arg,
         "portable, avx2 or avx512: the codec loops to time (default: the best this CPU has)")
      ->check(CLI::IsMember({"portable", "avx2", "avx512"}));
  CLI11_PARSE(app, argc, argv);

  using gossip::Isa;
  if (!isa_arg.empty()) {
    const Isa want = isa_arg == "portable" ? Isa::kPortable
                     : isa_arg == "avx2"   ? Isa::kAvx2
                                           : Isa::kAvx512;
    gossip::set_active_isa(want);
    if (gossip::active_isa() != want) {
      std::cerr << "--isa " << isa_arg << ": this CPU has only "
                << gossip::isa_name(gossip::detected_isa()) << "\n";
      return 1;
    }
  }
  const char* isa = gossip::isa_name(gossip::active_isa());

  std::ofstream json;
  if (!json_path.empty()) {
    json.open(json_path);
    if (!json) {
      std::cerr << "cannot open " << json_path << "\n";
      return 1;
    }
  }

  std::vector<uint64_t> sizes;
  for (const auto& s : split_csv(sizes_arg)) sizes.push_back(std::stoull(s));
  std::vector<size_t> threads;
  for (const auto& s : split_csv(threads_arg)) threads.push_back(std::stoul(s));
  const auto codec_specs = split_csv(codecs_arg);

  // Parse every spec up front so a typo fails before minutes of measuring.
  std::vector<gossip::compression::CodecSpec> codecs;
  for (const auto& s : codec_specs) {
    auto r = gossip::compression::make_codec(s);
    if (!r) {
      std::cerr << "bad codec '" << s << "': " << r.status().message() << "\n";
      return 1;
    }
    codecs.push_back(std::move(r.value()));
  }

  for (uint64_t n : sizes) {
    // Normally distributed data, like gradients.
    std::vector<float> x(n), y(n), z(n);
    {
      std::mt19937_64 rng(seed);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (auto& v : x) v = dist(rng);
    }
    std::fill(y.begin(), y.end(), 0.0f);  // pre-touch the outputs
    std::fill(z.begin(), z.end(), 0.0f);
    const double bytes = static_cast<double>(n) * sizeof(float);

    std::printf("\n### n = %llu fp32 (%.1f MB), median of %d after %d warm-up, %s loops\n\n",
                static_cast<unsigned long long>(n), bytes / 1e6, reps, warmup, isa);
    std::printf(
        "| codec | threads | encode GB/s | decode GB/s | memcpy GB/s | encode/memcpy | "
        "decode/memcpy | payload bytes | ratio |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    std::fflush(stdout);

    for (size_t t : threads) {
      ThreadPool pool(t);
      CodecContext ctx;
      ctx.seed = seed;
      ctx.pool = &pool;

      // memcpy anchor, split the same way the codecs split (one range per thread).
      const double memcpy_s = median_seconds(warmup, reps, [&] {
        pool.parallel_for(n, 1 << 16, [&](size_t b, size_t e) {
          std::memcpy(z.data() + b, x.data() + b, (e - b) * sizeof(float));
        });
        g_sink = z[n / 2];
      });
      const double memcpy_gbs = bytes / memcpy_s / 1e9;

      for (size_t ci = 0; ci < codecs.size(); ++ci) {
        const auto& codec = *codecs[ci].codec;
        std::vector<std::byte> out;
        out.reserve(codec.max_encoded_bytes(n));
        // Encode once outside timing to validate and to touch out's pages.
        if (auto st = codec.encode(x, ctx, out); !st) {
          std::cerr << codec_specs[ci] << ": encode failed: " << st.message() << "\n";
          return 1;
        }
        std::memset(out.data(), 0, out.size());
        if (auto st = codec.encode(x, ctx, out); !st) return 1;

        const double enc_s = median_seconds(warmup, reps, [&] {
          auto st = codec.encode(x, ctx, out);
          if (!st) std::abort();
          g_sink = static_cast<float>(out.size());
        });
        const double dec_s = median_seconds(warmup, reps, [&] {
          auto st = codec.decode(out, ctx, y);
          if (!st) {
            std::cerr << codec_specs[ci] << ": decode failed: " << st.message() << "\n";
            std::abort();
          }
          g_sink = y[n / 2];
        });

        // Relative L2 error of the round trip: a sanity check that the work was done.
        double err = 0.0, ref = 0.0;
        for (uint64_t i = 0; i < n; ++i) {
          const double d = static_cast<double>(x[i]) - y[i];
          err += d * d;
          ref += static_cast<double>(x[i]) * x[i];
        }
        const double rel_err = ref > 0 ? std::sqrt(err / ref) : 0.0;

        const double enc_gbs = bytes / enc_s / 1e9;
        const double dec_gbs = bytes / dec_s / 1e9;
        std::printf("| %s | %zu | %.2f | %.2f | %.2f | %.0f%% | %.0f%% | %zu | %.1fx |\n",
                    codec_specs[ci].c_str(), t, enc_gbs, dec_gbs, memcpy_gbs,
                    100.0 * enc_gbs / memcpy_gbs, 100.0 * dec_gbs / memcpy_gbs, out.size(),
                    bytes / static_cast<double>(out.size()));
        std::fflush(stdout);
        if (json) {
          json << "{\"source\":\"cpp\",\"codec\":\"" << codec_specs[ci] << "\",\"n\":" << n
               << ",\"threads\":" << t << ",\"encode_s\":" << enc_s << ",\"decode_s\":" << dec_s
               << ",\"encode_gbs\":" << enc_gbs << ",\"decode_gbs\":" << dec_gbs
               << ",\"memcpy_s\":" << memcpy_s << ",\"memcpy_gbs\":" << memcpy_gbs
               << ",\"payload_bytes\":" << out.size() << ",\"rel_l2_err\":" << rel_err
               << ",\"reps\":" << reps << ",\"warmup\":" << warmup << ",\"isa\":\"" << isa
               << "\"}\n";
          json.flush();
        }
      }
    }
  }
  return 0;
}

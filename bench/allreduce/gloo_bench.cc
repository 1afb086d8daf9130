// One rank of the Gloo all-reduce benchmark: the loop of bench_loop.h around
// gloo::allreduce with the ring algorithm over Gloo's TCP transport on 127.0.0.1,
// ranks meeting through a FileStore. Measures, never asserts.
//
//   gloo_bench --rank 0 --size 4 --dir /tmp/gloo-rdv --sizes 4K,1M --reps 50,20 --warmup 2
//
// Built by bench/allreduce.sh with g++ against Debian's libgloo-dev.

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "bench/allreduce/bench_loop.h"

int main(int argc, char** argv) {
  gossip::bench::LoopOptions o;
  std::string dir, sizes = "4K,1M,16M", reps = "20", warmup = "2";
  int timeout_s = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rank")
      o.rank = std::stoi(value);
    else if (flag == "--size")
      o.size = std::stoi(value);
    else if (flag == "--dir")
      dir = value;
    else if (flag == "--sizes")
      sizes = value;
    else if (flag == "--reps")
      reps = value;
    else if (flag == "--warmup")
      warmup = value;
    else if (flag == "--timeout")
      timeout_s = std::stoi(value);
    else {
      std::fprintf(stderr, "gloo_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (dir.empty() || o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    std::fprintf(stderr, "gloo_bench: --rank R --size N --dir DIR are required (0 <= R < N)\n");
    return 2;
  }
  o.sizes = gossip::bench::parse_sizes(sizes);
  o.reps = gossip::bench::parse_ints(reps);
  o.warmup = gossip::bench::parse_ints(warmup);
  const std::chrono::milliseconds timeout(timeout_s * 1000);

  // Gloo reports failures by exception (gloo::IoException, gloo::EnforceNotMet, ...).
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);

    uint32_t tag = 0;
    const auto allreduce = [&](std::vector<float>& data) {
      try {
        gloo::AllreduceOptions opts(context);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(data.data(), data.size());
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTag(tag++);
        opts.setTimeout(timeout);
        gloo::allreduce(opts);
        return true;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_bench rank %d: allreduce: %s\n", o.rank, e.what());
        return false;
      }
    };
    const auto barrier = [&] {
      try {
        gloo::BarrierOptions opts(context);
        opts.setTag(tag++);
        opts.setTimeout(timeout);
        gloo::barrier(opts);
        return true;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_bench rank %d: barrier: %s\n", o.rank, e.what());
        return false;
      }
    };
    return gossip::bench::run_loop("gloo", o, "", allreduce, barrier);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_bench rank %d: %s\n", o.rank, e.what());
    return 1;
  }
}

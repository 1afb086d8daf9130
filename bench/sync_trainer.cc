// sync_trainer: one trainer of the sync benchmark (bench/sync_bench.sh starts one per
// node). It attaches a model of --numel floats split into --tensors tensors, fills it
// with a node-dependent pattern, calls Client::sync() --warmup + --rounds times and
// times the measured calls; as an anchor it times a plain memcpy of the same size in
// the same process. It prints one JSON line on stdout and exits 1 when the averaged
// model is wrong (a sample of elements is checked after the first and the last sync).
//
//   sync_trainer --endpoint ipc:///tmp/run/gossipd-0.sock --numel 100000000 --rounds 10
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gossip/client.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string endpoint;
  uint64_t numel = 100'000'000;
  uint64_t tensors = 1;
  uint64_t rounds = 10;
  uint64_t warmup = 2;
  bool verbose = false;
};

// Node `node` holds (node + 1) + pattern(i) at global element i: the mean over n nodes
// is (n + 1) / 2 + pattern(i), exact in fp32, and the pattern catches misplaced slices.
float pattern(uint64_t i) { return 0.25f * static_cast<float>(i % 1021); }
float fill_value(uint32_t node, uint64_t i) { return static_cast<float>(node + 1) + pattern(i); }
float expected_mean(uint32_t nodes, uint64_t i) {
  return static_cast<float>(nodes + 1) / 2.0f + pattern(i);
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// Times `rounds` memcpys of numel floats between two buffers touched beforehand.
std::vector<double> time_memcpy(uint64_t numel, uint64_t rounds) {
  std::vector<float> src(numel, 1.0f), dst(numel, 0.0f);
  std::vector<double> t;
  for (uint64_t r = 0; r < rounds; ++r) {
    src[r % numel] = static_cast<float>(r);  // keep the copies observable
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), numel * sizeof(float));
    t.push_back(seconds(Clock::now() - t0));
  }
  if (dst[(rounds - 1) % numel] != static_cast<float>(rounds - 1)) std::abort();  // a bug
  return t;
}

// Checks the first and last element of each tensor and ~4096 evenly spread ones.
// Returns an empty string when all hold the mean, else a description of the first miss.
std::string check_mean(const gossip::Model& model, const std::vector<uint64_t>& starts,
                       uint64_t numel) {
  const uint64_t stride = std::max<uint64_t>(1, numel / 4096);
  auto at = [&](uint64_t g) -> std::string {
    size_t t =
        static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), g) - starts.begin() - 1);
    float got = model.tensors[t][g - starts[t]];
    float want = expected_mean(model.nodes, g);
    if (got == want) return {};
    char buf[256];
    std::snprintf(buf, sizeof buf, "element %llu (tensor %zu) is %.9g, expected the mean %.9g",
                  static_cast<unsigned long long>(g), t, static_cast<double>(got),
                  static_cast<double>(want));
    return buf;
  };
  for (size_t t = 0; t < starts.size(); ++t) {
    uint64_t end = t + 1 < starts.size() ? starts[t + 1] : numel;
    for (uint64_t g : {starts[t], end - 1})
      if (auto e = at(g); !e.empty()) return e;
  }
  for (uint64_t g = stride / 2; g < numel; g += stride)
    if (auto e = at(g); !e.empty()) return e;
  return {};
}

int fail(const char* what, const std::string& message) {
  std::fprintf(stderr, "sync_trainer: %s: %s\n", what, message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"One trainer of the sync benchmark: times Client::sync() against a memcpy.",
               "sync_trainer"};
  app.add_option("--endpoint", o.endpoint, "the node's gossipd, ipc://RUNDIR/gossipd-N.sock")
      ->required();
  app.add_option("--numel", o.numel, "parameters (fp32) in the model")->check(CLI::PositiveNumber);
  app.add_option("--tensors", o.tensors, "tensors the parameters are split into")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "measured sync() calls")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "sync() calls before the measured ones");
  app.add_flag("--verbose", o.verbose, "print the time of each phase and sync() call on stderr");
  CLI11_PARSE(app, argc, argv);
  if (o.tensors > o.numel) return fail("arguments", "--tensors exceeds --numel");

  auto phase_start = Clock::now();
  auto phase = [&](const char* name) {
    auto now = Clock::now();
    if (o.verbose)
      std::fprintf(stderr, "sync_trainer: %s took %.3f s\n", name, seconds(now - phase_start));
    phase_start = now;
  };

  // The anchor first, while the daemons are idle; its buffers are freed before attach.
  std::vector<double> copy_times = time_memcpy(o.numel, o.rounds);
  phase("memcpy anchor (allocation included)");

  gossip::ClientOptions co;
  co.endpoint = o.endpoint;
  co.trainer = "sync_trainer";
  co.timeout = std::chrono::seconds(300);
  auto client = gossip::Client::connect(co);
  if (!client) return fail("connect", client.status().message());

  std::vector<gossip::TensorDesc> layout;
  std::vector<uint64_t> starts;  // global index of each tensor's first element
  const uint64_t base = o.numel / o.tensors;
  for (uint64_t t = 0, start = 0; t < o.tensors; ++t) {
    uint64_t n = t + 1 < o.tensors ? base : o.numel - start;
    layout.push_back({"t" + std::to_string(t), n});
    starts.push_back(start);
    start += n;
  }
  auto model = (*client)->attach(layout);
  if (!model) return fail("attach", model.status().message());
  if (model->nodes < 2) return fail("attach", "the node has no peers; nothing to benchmark");
  phase("connect and attach");
  for (size_t t = 0; t < model->tensors.size(); ++t) {
    auto x = model->tensors[t];
    for (uint64_t i = 0; i < x.size(); ++i) x[i] = fill_value(model->node, starts[t] + i);
  }
  phase("fill");

  std::vector<double> sync_times;
  gossip::StepResult last;
  for (uint64_t k = 0; k < o.warmup + o.rounds; ++k) {
    auto t0 = Clock::now();
    auto r = (*client)->sync();
    double dt = seconds(Clock::now() - t0);
    if (!r) return fail("sync", r.status().message());
    last = *r;
    if (o.verbose)
      std::fprintf(stderr, "sync_trainer: node %u sync %llu%s: %.6f s\n", model->node,
                   static_cast<unsigned long long>(k + 1), k < o.warmup ? " (warmup)" : "", dt);
    if (k >= o.warmup) sync_times.push_back(dt);
    if (k == 0 || k + 1 == o.warmup + o.rounds) {
      if (auto e = check_mean(*model, starts, o.numel); !e.empty())
        return fail("wrong result", "after sync " + std::to_string(k + 1) + ": " + e);
    }
  }
  if (auto st = (*client)->detach(); !st) return fail("detach", st.message());

  const double sync_median = median(sync_times);
  const double copy_median = median(copy_times);
  const double sync_mean = std::accumulate(sync_times.begin(), sync_times.end(), 0.0) /
                           static_cast<double>(sync_times.size());
  std::printf(
      "{\"node\":%u,\"nodes\":%u,\"numel\":%llu,\"tensors\":%llu,\"bytes\":%llu,\"rounds\":%llu,"
      "\"warmup\":%llu,\"sync_median_s\":%.9f,\"sync_min_s\":%.9f,\"sync_mean_s\":%.9f,"
      "\"memcpy_median_s\":%.9f,\"ratio_sync_over_memcpy\":%.2f,\"payload_sent\":%llu,"
      "\"wire_sent\":%llu}\n",
      model->node, model->nodes, static_cast<unsigned long long>(o.numel),
      static_cast<unsigned long long>(o.tensors),
      static_cast<unsigned long long>(o.numel * sizeof(float)),
      static_cast<unsigned long long>(o.rounds), static_cast<unsigned long long>(o.warmup),
      sync_median, *std::min_element(sync_times.begin(), sync_times.end()), sync_mean, copy_median,
      sync_median / copy_median, static_cast<unsigned long long>(last.traffic.payload_sent),
      static_cast<unsigned long long>(last.traffic.wire_sent));
  return 0;
}

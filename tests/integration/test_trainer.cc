// A minimal trainer process for integration tests: attaches one tensor, fills it
// with a value, and steps forever (or --steps times), sleeping between steps.
// Usage: test_trainer ENDPOINT NUMEL VALUE STEPS SLEEP_MS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "gossip/client.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: test_trainer ENDPOINT NUMEL VALUE STEPS SLEEP_MS\n");
    return 2;
  }
  gossip::ClientOptions o;
  o.endpoint = argv[1];
  o.trainer = "test_trainer";
  o.timeout = std::chrono::seconds(30);
  uint64_t numel = std::strtoull(argv[2], nullptr, 10);
  float value = std::strtof(argv[3], nullptr);
  long steps = std::strtol(argv[4], nullptr, 10);
  int sleep_ms = std::atoi(argv[5]);
  auto client = gossip::Client::connect(o);
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.status().message().c_str());
    return 1;
  }
  auto model = (*client)->attach({{"w", numel}});
  if (!model) {
    std::fprintf(stderr, "attach: %s\n", model.status().message().c_str());
    return 1;
  }
  for (auto& x : model->tensors[0]) x = value;
  std::printf("attached\n");
  std::fflush(stdout);
  for (long s = 0; steps < 0 || s < steps; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    auto r = (*client)->step();
    if (!r) {
      std::fprintf(stderr, "step: %s\n", r.status().message().c_str());
      return 1;
    }
  }
  return 0;
}

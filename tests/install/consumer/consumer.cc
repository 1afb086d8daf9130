// Attaches a small model to the daemon at argv[1], steps once, and says what it got.
#include <gossip/client.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto client = gossip::Client::connect(
      {.endpoint = argv[1], .trainer = "consumer", .startup_timeout = std::chrono::seconds(10)});
  if (!client) return std::fprintf(stderr, "%s\n", client.status().message().c_str()), 1;
  auto model = (*client)->attach({{"w", 16}});
  if (!model) return std::fprintf(stderr, "%s\n", model.status().message().c_str()), 1;
  for (float& x : model->tensors[0]) x = 0.5f;
  auto step = (*client)->step();
  if (!step) return std::fprintf(stderr, "%s\n", step.status().message().c_str()), 1;
  std::printf("c++ consumer: node %u of %u (%s), step %llu, w[0] = %g\n", model->node, model->nodes,
              model->strategy.c_str(), static_cast<unsigned long long>(step->step),
              model->tensors[0][0]);
  return 0;
}

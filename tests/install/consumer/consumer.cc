// The C++ API through find_package: attaches 16 floats, sets them to VALUE, steps once
// and checks that every one came back as EXPECT (the mean over the cluster's nodes).
#include <gossip/client.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 4) return std::fprintf(stderr, "usage: cxx_consumer ENDPOINT VALUE EXPECT\n"), 2;
  const float value = std::strtof(argv[2], nullptr), expect = std::strtof(argv[3], nullptr);
  auto client = gossip::Client::connect(
      {.endpoint = argv[1], .trainer = "consumer", .startup_timeout = std::chrono::seconds(10)});
  if (!client) return std::fprintf(stderr, "%s\n", client.status().message().c_str()), 1;
  auto model = (*client)->attach({{"w", 16}});
  if (!model) return std::fprintf(stderr, "%s\n", model.status().message().c_str()), 1;
  for (float& x : model->tensors[0]) x = value;
  auto step = (*client)->step();
  if (!step) return std::fprintf(stderr, "%s\n", step.status().message().c_str()), 1;
  int wrong = 0;
  for (float x : model->tensors[0]) wrong += std::fabs(x - expect) > 1e-6f;
  std::printf("c++ consumer: node %u of %u (%s), step %llu, w[0] = %g (wrote %g, expected %g)\n",
              model->node, model->nodes, model->strategy.c_str(),
              static_cast<unsigned long long>(step->step), model->tensors[0][0], value, expect);
  return wrong == 0 && step->step == 1 ? 0 : 1;
}

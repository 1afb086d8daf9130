#pragma once
// Test trainers that attach one flat tensor "x" to a node and run gossip rounds
// from threads, all nodes at once (synchronous strategies need every node to step).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "test_client.h"

namespace gossip::testing {

struct Node {
  std::unique_ptr<Client> client;
  Model model;
  std::vector<float> values() const { return {model.tensors[0].begin(), model.tensors[0].end()}; }
};

inline std::unique_ptr<Node> attach(const Cluster& c, int node, size_t numel) {
  auto n = std::make_unique<Node>();
  n->client = connect_to(c, node);
  if (!n->client) return nullptr;
  auto m = n->client->attach({{"x", numel}});
  if (!m) {
    ADD_FAILURE() << "node " << node << ": " << m.status().message();
    return nullptr;
  }
  n->model = *m;
  return n;
}

// Every node in `nodes` steps (and syncs) `rounds` times, concurrently, calling
// before(node index, round) first; returns the longest round in seconds. A failed
// sync is a test failure.
inline double sync_rounds(std::vector<Node*> nodes, int rounds,
                          const std::function<void(size_t, int)>& before = nullptr) {
  std::vector<double> longest(nodes.size(), 0.0);
  std::vector<std::string> errors(nodes.size());
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < nodes.size(); ++i) {
      threads.emplace_back([&, i] {
        for (int r = 0; r < rounds; ++r) {
          if (before) before(i, r);
          const auto t0 = std::chrono::steady_clock::now();
          auto s = nodes[i]->client->step();  // gossip syncs at every step
          if (!s) {
            errors[i] = s.status().message();
            return;
          }
          longest[i] = std::max(
              longest[i],
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
      });
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) EXPECT_EQ(errors[i], "") << "trainer " << i;
  return *std::max_element(longest.begin(), longest.end());
}

}  // namespace gossip::testing

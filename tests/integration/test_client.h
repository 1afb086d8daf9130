#pragma once
// A gossip::Client attached to one node of a test Cluster; a failure to connect is
// a test failure (and nullptr).

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "gossip/client.h"
#include "harness.h"

namespace gossip::testing {

inline std::unique_ptr<Client> connect_to(
    const Cluster& c, int node, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  ClientOptions o;
  o.endpoint = c.ipc_endpoint(node);
  o.trainer = "test-" + std::to_string(node);
  o.timeout = timeout;
  auto client = Client::connect(o);
  if (!client) ADD_FAILURE() << client.status().message();
  return client ? std::move(client).value() : nullptr;
}

}  // namespace gossip::testing

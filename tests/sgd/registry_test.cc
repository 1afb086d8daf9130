// The strategy registry: one descriptor per strategy, found by name, and the
// properties the daemon, its config and gossipctl ask of it instead of names.

#include "sgd/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace gossip::sgd {
namespace {

TEST(StrategyRegistry, EveryStrategyHasOneDescriptorThatCanMakeIt) {
  std::set<std::string_view> names;
  for (const StrategyDescriptor& d : strategies()) {
    EXPECT_TRUE(names.insert(d.name).second) << "two strategies named " << d.name;
    EXPECT_FALSE(d.summary.empty()) << d.name;
    EXPECT_TRUE(d.make) << d.name;
    EXPECT_EQ(find_strategy(d.name), &d);
    EXPECT_NE(strategy_names().find(d.name), std::string::npos) << d.name;
    for (std::string_view option : d.options)
      EXPECT_TRUE(option == "gamma" || option == "delay" || option == "staleness" ||
                  option == "trim" || option == "clip" || option == "outer" ||
                  option == "servers" || option == "ps_mode" || option == "ps_fetch" ||
                  option == "ps_optimizer" || option == "sma" || option == "fragments" ||
                  option == "tune")
          << d.name
          << " takes an option neither StrategyParams nor the daemon's schedule has: " << option;
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"local-sgd", "gossip", "choco", "push-sum",
                                               "async-gossip", "allreduce", "ps", "sma"}));
  EXPECT_EQ(find_strategy("gosip"), nullptr);
  EXPECT_EQ(find_strategy(""), nullptr);
}

TEST(StrategyRegistry, WhatTheDaemonAsksInsteadOfComparingNames) {
  const StrategyDescriptor& local = *find_strategy("local-sgd");
  EXPECT_EQ(local.fabric, Fabric::kAllReduce);
  EXPECT_TRUE(local.takes_nodes_back) << "the daemon holds the model a restarted node takes";
  EXPECT_FALSE(local.gradients);
  const StrategyDescriptor& sync = *find_strategy("allreduce");
  EXPECT_EQ(sync.fabric, Fabric::kAllReduce);
  EXPECT_TRUE(sync.gradients);
  EXPECT_FALSE(sync.takes_nodes_back) << "its trainers keep their parameters";
  EXPECT_TRUE(find_strategy("async-gossip")->asynchronous);
  EXPECT_TRUE(find_strategy("choco")->static_topology);
  EXPECT_EQ(find_strategy("push-sum")->default_topology, "one-peer-exponential");
  EXPECT_EQ(find_strategy("gossip")->default_topology, "ring");
  EXPECT_TRUE(find_strategy("gossip")->takes("trim"));
  EXPECT_FALSE(find_strategy("choco")->takes("trim"));
  EXPECT_EQ(find_strategy("ps")->fabric, Fabric::kServers);
  EXPECT_TRUE(find_strategy("ps")->takes("servers"));
  EXPECT_TRUE(find_strategy("sma")->central_model);
  EXPECT_EQ(find_strategy("sma")->fabric, Fabric::kAllReduce);
  EXPECT_FALSE(find_strategy("local-sgd")->central_model);
  for (const StrategyDescriptor& d : strategies()) {
    if (d.fabric == Fabric::kOverlay) {
      EXPECT_FALSE(d.gradients) << d.name;
    }
  }
}

}  // namespace
}  // namespace gossip::sgd

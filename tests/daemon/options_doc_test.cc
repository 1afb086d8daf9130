// The option reference: docs/options.md holds `gossipd --print-options` verbatim, and
// the JSON form that programs read says the same, strategy by strategy.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "daemon/config.h"
#include "tests/bin_dir.h"

namespace gossip::daemon {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(OptionsDoc, TheDocsHoldTheTableGossipdPrints) {
  const std::string table = describe_options(false);
  ASSERT_FALSE(test_source_dir().empty()) << kSourceDirMissing;
  const std::string doc = read_file(test_source_dir() + "/docs/options.md");
  ASSERT_FALSE(doc.empty()) << "docs/options.md is missing";
  EXPECT_NE(doc.find(table), std::string::npos)
      << "docs/options.md is out of date; regenerate its table with\n"
         "  build/bin/gossipd --print-options\nwhich prints:\n"
      << table;
}

TEST(OptionsDoc, TheJsonNamesEverySettingWithItsDefaultAndItsStrategies) {
  const auto all = nlohmann::json::parse(describe_options(true));
  ASSERT_TRUE(all.is_array());
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& o : all) by_key[o.at("key").get<std::string>()] = o;
  ASSERT_TRUE(by_key.count("strategy.name"));
  EXPECT_EQ(by_key.size(), all.size()) << "one entry per key";
  EXPECT_EQ(by_key["strategy.name"]["flag"], "--strategy");
  EXPECT_EQ(by_key["strategy.name"]["default"], "local-sgd");
  EXPECT_EQ(by_key["strategy.period"]["default"], "1");
  EXPECT_EQ(by_key["strategy.gamma"]["strategies"], nlohmann::json::array({"choco"}));
  EXPECT_EQ(by_key["strategy.trim"]["strategies"], nlohmann::json::array({"local-sgd", "gossip"}));
  EXPECT_EQ(by_key["strategy.outer.optimizer"]["strategies"], nlohmann::json::array({"local-sgd"}));
  EXPECT_EQ(by_key["strategy.codec"]["strategies"].size(), 8u) << "read by every strategy";
  EXPECT_EQ(by_key["strategy.ps_mode"]["strategies"], nlohmann::json::array({"ps"}));
  EXPECT_EQ(by_key["strategy.learners_per_device"]["strategies"], nlohmann::json::array({"sma"}));
  // The table and the JSON come from one list.
  const std::string table = describe_options(false);
  for (const auto& [key, o] : by_key)
    EXPECT_NE(table.find("| `" + key + "` |"), std::string::npos) << key;
}

}  // namespace
}  // namespace gossip::daemon

#pragma once
// What config_test.cc and config_validate_test.cc share: the error matcher, a temporary
// directory and gossipd's flags parsed as its main() parses them.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.h"

namespace gossip::daemon {

// Passes when `status` is an error whose message contains every one of `parts`.
inline testing::AssertionResult fails_with(const Status& status,
                                           std::initializer_list<std::string_view> parts) {
  if (status.is_ok()) return testing::AssertionFailure() << "succeeded, expected an error";
  const std::string& message = status.message();
  for (std::string_view part : parts)
    if (message.find(part) == std::string::npos)
      return testing::AssertionFailure() << "message '" << message << "' lacks '" << part << "'";
  return testing::AssertionSuccess() << message;
}
inline testing::AssertionResult fails_with(const Result<DaemonConfig>& result,
                                           std::initializer_list<std::string_view> parts) {
  if (result.is_ok()) return testing::AssertionFailure() << "succeeded, expected an error";
  return fails_with(result.status(), parts);
}

// A unique temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "gossipd_config_test.XXXXXX").string();
    const char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to <dir>/<name> and returns its path.
  std::string write(const std::string& name, std::string_view text) const {
    const std::string file = (path_ / name).string();
    std::ofstream out(file, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << file;
    return file;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline Result<DaemonConfig> from_args(std::vector<std::string> args) {
  args.insert(args.begin(), "gossipd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  return config_from_args(static_cast<int>(args.size()), argv.data());
}

}  // namespace gossip::daemon

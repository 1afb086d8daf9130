#pragma once
// Where the binaries under test are: beside the test's own executable (CMake puts every
// executable into build/bin). Found at run time, so that no build path is compiled into
// a test and its object is the same in every checkout (ccache shares it across clones).

#include <filesystem>
#include <fstream>
#include <string>

namespace gossip {

inline const std::string& test_bin_dir() {
  static const std::string dir =
      std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  return dir;
}

// The source tree, for the few tests that read one of its files (docs/options.md, the
// example config): tests/CMakeLists.txt writes its path into the build directory, read
// here at run time for the same reason. Empty where the file is missing (the build
// directory was not configured by this tree's CMake): kSourceDirMissing says so.
inline constexpr const char* kSourceDirMissing =
    "the build directory has no gossip-source-dir (tests/CMakeLists.txt writes it): run "
    "cmake again";

inline const std::string& test_source_dir() {
  static const std::string dir = [] {
    std::ifstream in(std::filesystem::path(test_bin_dir()).parent_path() / "gossip-source-dir");
    std::string line;
    std::getline(in, line);
    return line;
  }();
  return dir;
}

}  // namespace gossip

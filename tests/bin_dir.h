#pragma once
// Where the binaries under test are: beside the test's own executable (CMake puts every
// executable into build/bin). Found at run time, so that no build path is compiled into
// a test and its object is the same in every checkout (ccache shares it across clones).

#include <filesystem>
#include <string>

namespace gossip {

inline const std::string& test_bin_dir() {
  static const std::string dir =
      std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  return dir;
}

}  // namespace gossip

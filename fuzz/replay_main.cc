// A stand-in for libFuzzer's main: runs LLVMFuzzerTestOneInput once over every file
// named on the command line and every regular file in every directory named there
// (not recursive, hidden files skipped, in name order). Built with any compiler, so
// that the seed corpora and the crash regressions run in ctest without clang.
//
// Arguments that start with '-' are libFuzzer flags and ignored, so a libFuzzer
// command line replays as is. A path that does not exist is reported and skipped
// (a target may have no regressions yet); replaying no input at all is an error.
// An input that breaks a target's invariant traps: the file name printed last is
// the culprit.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::vector<char>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("-")) continue;
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(arg, ec))
        if (entry.is_regular_file() && !entry.path().filename().string().starts_with("."))
          files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.emplace_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s does not exist, skipped\n", arg.c_str());
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs (usage: %s FILE|DIR...)\n", argv[0]);
    return 2;
  }
  std::vector<char> bytes;
  for (const fs::path& path : inputs) {
    if (!read_file(path, bytes)) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 2;
    }
    std::printf("replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    std::fflush(stdout);
    // An exact-size copy, so that AddressSanitizer (when built with it) sees a read
    // past the end of the input.
    auto exact = std::make_unique<uint8_t[]>(bytes.size());
    std::copy(bytes.begin(), bytes.end(), exact.get());
    LLVMFuzzerTestOneInput(exact.get(), bytes.size());
  }
  std::printf("replay: %zu inputs, no invariant violated\n", inputs.size());
  return 0;
}

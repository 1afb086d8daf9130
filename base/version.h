#pragma once
// The build's version (CMakeLists.txt's project()) and type: every program's --version,
// gossipd_build_info. Defined in base/version.cc, the one file compiled with them, so
// that every other object is the same in each build of a commit whatever its type and
// folder: ccache serves the packages' build (Release, build-pkg/) from build/'s objects.

namespace gossip {

extern const char* const kVersion;
extern const char* const kBuildType;

}  // namespace gossip

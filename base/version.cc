#include "base/version.h"

namespace gossip {

const char* const kVersion = GOSSIP_VERSION;
const char* const kBuildType = GOSSIP_BUILD_TYPE;

}  // namespace gossip

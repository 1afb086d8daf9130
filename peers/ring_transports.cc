// The registry of ring transports: CMake decides which are built.
#include <fmt/format.h>

#include "peers/ring_channel.h"
#include "peers/tcp/tcp_ring_transport.h"
#ifdef GOSSIP_WITH_RDMA
#include "peers/rdma/rdma_ring_transport.h"
#endif

namespace gossip::peers {

Result<std::vector<std::unique_ptr<RingChannel>>> RingTransport::connect_mesh(
    uint32_t, const std::vector<MeshEnd>&, const WaitOptions&) {
  return Status::invalid(
      fmt::format("the {} ring transport links rings only: the tree, butterfly and master "
                  "all-reduces need --transport tcp (or --allreduce-algorithm ring)",
                  name()));
}

Result<std::unique_ptr<RingTransport>> make_ring_transport(const std::string& name,
                                                           const RingTransportOptions& options) {
  if (name == "tcp") return make_tcp_ring_transport(options);
#ifdef GOSSIP_WITH_RDMA
  if (name == "rdma") return make_rdma_ring_transport(options);
  constexpr const char* kBuilt = "tcp, rdma";
#else
  constexpr const char* kBuilt = "tcp";
#endif
  return Status::invalid(
      fmt::format("unknown ring transport '{}' (this build has: {})", name, kBuilt));
}

}  // namespace gossip::peers

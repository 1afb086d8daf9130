#include "sgd/peer_ring.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

namespace gossip::sgd {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

PeerRing::PeerRing(peers::ZmqTransport& control, peers::RingTransport& transport,
                   const PeerRingOptions& options)
    : control_(control), transport_(transport), options_(options) {
  std::random_device entropy;
  token_ = (uint64_t{entropy()} << 32) | entropy();
  std::vector<uint32_t> ids;
  for (const auto& p : control.peers()) ids.push_back(p.id);
  order_ = ring_order(control.self(), ids);
  if (order_.ids.size() > 1) {
    for (const auto& p : control.peers())
      if (p.id == order_.right_id()) right_host_ = peers::endpoint_host(p.endpoint);
    announce();
  }
}

PeerRing::~PeerRing() { channel_.reset(); }

void PeerRing::announce() {
  if (order_.ids.size() < 2) return;
  proto::Header h;
  h.kind = proto::Kind::kRingAddress;
  h.from = control_.self();
  h.offset = transport_.port();
  h.seq = token_;
  h.layout = layout_;
  (void)control_.send(order_.left_id(), h);  // queued until the neighbor is up
}

void PeerRing::set_layout_fingerprint(uint64_t fingerprint) {
  if (fingerprint == layout_) return;
  layout_ = fingerprint;
  channel_.reset();
  announce();
}

void PeerRing::absorb(const peers::Incoming& in) {
  const proto::Header& h = in.header;
  switch (h.kind) {
    case proto::Kind::kRingAddress:
      if (in.peer != order_.right_id()) {
        control_.note_dropped(in.peer, "ring-address from a node that is not our right neighbor");
        return;
      }
      if (right_port_ != h.offset) {
        spdlog::info("peer {} is up, its ring listens on port {}", in.peer, h.offset);
        channel_.reset();
      }
      right_port_ = static_cast<uint16_t>(h.offset);
      right_layout_ = h.layout;
      right_token_ = h.seq;
      return;
    case proto::Kind::kHello:
      spdlog::info("peer {} is up", in.peer);
      // The left neighbor (re)started: it needs our port again.
      if (in.peer == order_.left_id()) announce();
      return;
    case proto::Kind::kBye:
      if (in.peer == order_.right_id()) right_port_.reset();
      if (in.peer == order_.right_id() || in.peer == order_.left_id()) channel_.reset();
      return;
    case proto::Kind::kHeartbeat:
      return;
    case proto::Kind::kModelChunk:
    case proto::Kind::kNcclId:
    case proto::Kind::kJoin:
    case proto::Kind::kStateOffer:
    case proto::Kind::kStateRequest:
    case proto::Kind::kStateChunk:
      control_.note_dropped(in.peer, fmt::format("a {} message, but this node averages over the ring",
                                                 proto::kind_name(h.kind)));
      return;
  }
}

void PeerRing::progress(uint64_t, size_t, std::chrono::milliseconds wait) {
  for (auto in = control_.recv(wait); in; in = control_.recv(std::chrono::milliseconds(0))) absorb(*in);
}

Status PeerRing::connect(const CollectiveOptions& options) {
  progress(0, 0, std::chrono::milliseconds(0));  // the freshest address
  while (!right_port_) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed))
      return Status::closed("ring: cancelled");
    const auto now = Clock::now();
    if (now >= options.deadline)
      return Status::timeout(fmt::format(
          "ring: peer {} (right) has not told its ring address (is it up, with the same strategy and transport?)",
          order_.right_id()));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(options.deadline - now);
    if (auto in = control_.recv(std::min(left, std::chrono::milliseconds(50)))) absorb(*in);
  }
  if (right_layout_ != 0 && layout_ != 0 && right_layout_ != layout_)
    return Status::mismatch(fmt::format("ring: peer {} has another model layout (fingerprint {:#x}, ours {:#x})",
                                        order_.right_id(), right_layout_, layout_));
  const peers::RingEnds ends{.self = control_.self(),
                             .left = order_.left_id(),
                             .right = order_.right_id(),
                             .right_host = right_host_,
                             .right_port = *right_port_,
                             .session = layout_ ^ token_,
                             .right_session = right_token_ != 0 ? layout_ ^ right_token_ : 0};
  auto channel = transport_.connect(ends, {options.deadline, options.cancel});
  if (!channel.is_ok()) {
    // A neighbor with another model says so in its ring-address, which may have
    // arrived while we waited: that is the better explanation.
    progress(0, 0, std::chrono::milliseconds(0));
    if (right_layout_ != 0 && layout_ != 0 && right_layout_ != layout_)
      return Status::mismatch(fmt::format("ring: peer {} has another model layout (fingerprint {:#x}, ours {:#x})",
                                          order_.right_id(), right_layout_, layout_));
    return channel.status();
  }
  channel_ = std::move(channel).value();
  return Status::ok();
}

Status PeerRing::all_reduce_mean(std::span<float> data, uint64_t round,
                                 const CollectiveOptions& options) {
  if (order_.ids.size() == 1 || data.empty()) return Status::ok();
  if (!channel_) GOSSIP_RETURN_IF_ERROR(connect(options));
  RingOptions ro;
  ro.size = static_cast<uint32_t>(order_.ids.size());
  ro.rank = order_.rank;
  ro.round = round;
  ro.chunk_elems = std::max<uint64_t>(1, options_.chunk_bytes / sizeof(float));
  ro.depth = options_.depth;
  ro.wait = {options.deadline, options.cancel};
  ro.compression = options.compression;
  Status st = ring_.mean(*channel_, data, ro);
  if (!st.is_ok()) {
    spdlog::warn("round {}: {}; the ring reconnects for the next round", round, st.message());
    channel_.reset();
  }
  return st;
}

}  // namespace gossip::sgd

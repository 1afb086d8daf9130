#include "sgd/collectives/nccl/nccl_peer_group.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

namespace gossip::sgd {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

NcclPeerGroup::NcclPeerGroup(peers::Router& control, int device, size_t staging_bytes)
    : router_(control),
      control_(control.transport()),
      device_(device),
      staging_bytes_(staging_bytes),
      subscription_(
          control.subscribe({proto::Kind::kHello, proto::Kind::kBye, proto::Kind::kNcclId},
                            [this](peers::Incoming& in) { absorb(in); })) {
  std::vector<uint32_t> ids;
  for (const auto& p : control_.peers()) ids.push_back(p.id);
  order_ = ring_order(control_.self(), ids);
}

void NcclPeerGroup::set_layout_fingerprint(uint64_t fingerprint) {
  if (fingerprint == layout_) return;
  layout_ = fingerprint;
  comm_.reset();
}

void NcclPeerGroup::absorb(const peers::Incoming& in) {
  if (in.kind() == proto::Kind::kHello || in.kind() == proto::Kind::kBye) return;
  if (in.kind() != proto::Kind::kNcclId || in.peer != order_.ids[0] ||
      in.payload.size() != proto::kNcclIdBytes) {
    control_.note_dropped(
        in.peer, fmt::format("an nccl-id message from peer {}, which is not rank 0 here", in.peer));
    return;
  }
  const auto& h = in.as<proto::NcclId>();
  if (offer_ && offer_->generation >= h.generation) return;  // an older id, overtaken
  Offer o;
  o.generation = h.generation;
  o.layout = h.layout;
  std::memcpy(o.id.data(), in.payload.data(), o.id.size());
  offer_ = o;
}

void NcclPeerGroup::progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) {
  router_.poll(wait);
  if (comm_) comm_->progress(next_round, numel, std::chrono::milliseconds(0));
}

Status NcclPeerGroup::join(const CollectiveOptions& options) {
  NcclOptions o;
  o.rank = order_.rank;
  o.size = static_cast<uint32_t>(order_.ids.size());
  o.device = device_;
  o.staging_bytes = staging_bytes_;
  o.deadline = options.deadline;
  if (order_.rank == 0) {
    ++generation_;
    auto id = nccl_unique_id();
    if (!id.is_ok()) return id.status();
    o.unique_id = *id;
    const proto::NcclId h{generation_, layout_};
    auto payload = std::make_shared<std::vector<std::byte>>(proto::kNcclIdBytes);
    std::memcpy(payload->data(), id->data(), id->size());
    for (size_t i = 1; i < order_.ids.size(); ++i)
      GOSSIP_RETURN_IF_ERROR(control_.send_shared(order_.ids[i], 0, h, payload));
  } else {
    // The newest id we have not used yet.
    while (!offer_ || offer_->generation <= generation_) {
      if (options.cancel && options.cancel->load(std::memory_order_relaxed))
        return Status::closed("nccl: cancelled");
      const auto now = Clock::now();
      if (now >= options.deadline)
        return Status::timeout(
            fmt::format("nccl: no communicator id from peer {} (rank 0) in time", order_.ids[0]));
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(options.deadline - now);
      progress(0, 0, std::min(left, std::chrono::milliseconds(50)));
    }
    if (offer_->layout != 0 && layout_ != 0 && offer_->layout != layout_)
      return Status::mismatch(
          fmt::format("nccl: peer {} has another model layout (fingerprint {:#x}, ours {:#x})",
                      order_.ids[0], offer_->layout, layout_));
    generation_ = offer_->generation;
    o.unique_id = offer_->id;
  }
  auto comm = NcclAllReduce::create(o);
  if (!comm.is_ok()) return comm.status();
  comm_ = std::move(comm).value();
  comm_->set_layout_fingerprint(layout_);
  spdlog::info("nccl: communicator {} joined as rank {} of {} on device {}", generation_,
               order_.rank, order_.ids.size(), device_);
  return Status::ok();
}

Status NcclPeerGroup::all_reduce_mean(std::span<float> data, uint64_t round,
                                      const CollectiveOptions& options) {
  if (order_.ids.size() == 1 || data.empty()) return Status::ok();
  GOSSIP_RETURN_IF_ERROR(nccl_accepts(options));
  if (!comm_ || comm_->broken()) {
    comm_.reset();
    GOSSIP_RETURN_IF_ERROR(join(options));
  }
  Status st = comm_->all_reduce_mean(data, round, options);
  if (!st.is_ok()) comm_.reset();  // every node starts a new generation
  return st;
}

}  // namespace gossip::sgd

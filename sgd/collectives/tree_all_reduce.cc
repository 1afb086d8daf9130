#include "sgd/collectives/tree_all_reduce.h"

#include <fmt/format.h>

#include <algorithm>

#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "sgd/collectives/vector_ops.h"

namespace gossip::sgd {
namespace {
constexpr uint32_t kUp = 0, kDown = 1, kGatherUp = 2, kGatherDown = 3;  // steps of the tags
}  // namespace

std::vector<uint32_t> RootedTree::children(uint32_t r) const {
  std::vector<uint32_t> out;
  if (shape_ == TreeShape::kStar) {
    if (r == 0)
      for (uint32_t q = 1; q < n_; ++q) out.push_back(q);
    return out;
  }
  for (uint32_t q : {2 * r + 1, 2 * r + 2})
    if (q < n_) out.push_back(q);
  return out;
}

std::vector<uint32_t> RootedTree::subtree(uint32_t r) const {
  std::vector<uint32_t> out{r};
  for (size_t i = 0; i < out.size(); ++i)
    for (uint32_t q : children(out[i])) out.push_back(q);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint32_t> RootedTree::outside(uint32_t r) const {
  const auto in = subtree(r);
  std::vector<uint32_t> out;
  for (uint32_t q = 0; q < n_; ++q)
    if (!std::binary_search(in.begin(), in.end(), q)) out.push_back(q);
  return out;
}

Status TreeAllReduce::run(std::span<peers::RingChannel* const> by_rank, std::span<float> data,
                          const RingOptions& o) {
  const mesh::Coder coder = mesh::coder_of(o.compression);
  const compression::Codec* codec = coder.codec;
  mesh::Links links(by_rank, o.wait);
  const RootedTree tree(shape_, o.size);
  if (codec && !ring_reduces_compressed(codec->id())) return gather(links, tree, data, o, coder);
  return hops(links, tree, data, o, coder);
}

Status TreeAllReduce::hops(mesh::Links& links, const RootedTree& tree, std::span<float> data,
                           const RingOptions& o, const mesh::Coder& coder) {
  const Algorithm a = algorithm();
  const uint64_t chunks = (data.size() + o.chunk_elems - 1) / o.chunk_elems;
  if (chunks >= mesh::kMaxIndex)
    return Status::invalid(fmt::format(
        "all-reduce: {} elements in chunks of {} is too many chunks; raise the chunk size",
        data.size(), o.chunk_elems));
  const auto chunk_of = [&](uint64_t c) {
    const uint64_t off = c * o.chunk_elems;
    return data.subspan(off, std::min<uint64_t>(o.chunk_elems, data.size() - off));
  };
  const bool root = tree.is_root(o.rank);
  const std::vector<uint32_t> children = tree.children(o.rank);
  const uint32_t parent = root ? 0 : tree.parent(o.rank);
  const uint64_t max_bytes = coder.max_bytes(std::min<uint64_t>(o.chunk_elems, data.size()));

  // This node's contribution through error feedback: data <- what its parent decodes.
  if (coder.codec && o.compression.error_feedback) {
    std::vector<std::byte> payload;
    for (uint64_t c = 0; c < chunks; ++c) {
      auto x = chunk_of(c);
      GOSSIP_RETURN_IF_ERROR(o.compression.error_feedback->encode(
          x, c * o.chunk_elems, {chunk_seed(o.round, o.rank, c), coder.pool}, payload, x));
    }
  }
  rx_.resize(children.size());
  for (auto& b : rx_) b.resize((max_bytes + sizeof(float) - 1) / sizeof(float));
  if (coder.codec) {
    tx_.resize(chunks);
    down_.resize(chunks);
  }

  const auto reduce = [&](uint64_t c) -> Status {
    const std::span<float> dst = chunk_of(c);
    for (size_t k = 0; k < children.size(); ++k) {
      auto ch = links.to(children[k]);
      if (!ch.is_ok()) return ch.status();
      const auto buffer = std::as_writable_bytes(std::span(rx_[k])).first(max_bytes);
      GOSSIP_RETURN_IF_ERROR((*ch)->post_recv(mesh::tag(o.round, a, kUp, c), buffer));
      auto got = links.wait_recv(children[k]);
      if (!got.is_ok()) return got.status();
      std::span<const float> in(rx_[k].data(), dst.size());
      if (coder.codec) {
        scratch_.resize(dst.size());
        if (Status st =
                coder.decode(buffer.first(*got), chunk_seed(o.round, children[k], c), scratch_);
            !st)
          return Status::protocol(fmt::format("all-reduce ({}): rank {}, round {}, chunk {}: {}",
                                              algorithm_name(a), children[k], o.round, c,
                                              st.message()));
        in = scratch_;
      } else if (*got != dst.size_bytes()) {
        return Status::protocol(
            fmt::format("all-reduce ({}): rank {} sent {} bytes for a chunk of {} fp32",
                        algorithm_name(a), children[k], *got, dst.size()));
      }
      add_into(dst.data(), in.data(), dst.size());
    }
    if (!root) {
      auto up = links.to(parent);
      if (!up.is_ok()) return up.status();
      if (!coder.codec) return (*up)->post_send(mesh::tag(o.round, a, kUp, c), std::as_bytes(dst));
      GOSSIP_RETURN_IF_ERROR(coder.encode(dst, chunk_seed(o.round, o.rank, c), tx_[c]));
      return (*up)->post_send(mesh::tag(o.round, a, kUp, c), tx_[c]);
    }
    divide(dst.data(), dst.size(), static_cast<float>(o.size));
    if (coder.codec) {  // keep exactly what the others will decode
      GOSSIP_RETURN_IF_ERROR(coder.encode(dst, chunk_seed(o.round, o.rank, c), down_[c]));
      GOSSIP_RETURN_IF_ERROR(coder.decode(down_[c], chunk_seed(o.round, o.rank, c), dst));
    }
    return Status::ok();
  };

  const auto broadcast = [&](uint64_t c) -> Status {
    const std::span<float> dst = chunk_of(c);
    if (!root) {
      auto up = links.to(parent);
      if (!up.is_ok()) return up.status();
      // Uncompressed, the mean lands in place: it exists only after the parent
      // received this node's sum of the chunk, so that send is done.
      const auto buffer = coder.codec ? (down_[c].resize(max_bytes), std::span(down_[c]))
                                      : std::as_writable_bytes(dst);
      GOSSIP_RETURN_IF_ERROR((*up)->post_recv(mesh::tag(o.round, a, kDown, c), buffer));
      auto got = links.wait_recv(parent);
      if (!got.is_ok()) return got.status();
      if (coder.codec) {
        down_[c].resize(*got);
        if (Status st = coder.decode(down_[c], chunk_seed(o.round, 0, c), dst); !st)
          return Status::protocol(
              fmt::format("all-reduce ({}): the mean from rank {}, round {}, "
                          "chunk {}: {}",
                          algorithm_name(a), parent, o.round, c, st.message()));
      } else if (*got != dst.size_bytes()) {
        return Status::protocol(
            fmt::format("all-reduce ({}): rank {} sent {} bytes for a chunk of {} fp32",
                        algorithm_name(a), parent, *got, dst.size()));
      }
    }
    for (uint32_t child : children) {
      auto ch = links.to(child);
      if (!ch.is_ok()) return ch.status();
      const auto bytes = coder.codec ? std::span<const std::byte>(down_[c]) : std::as_bytes(dst);
      GOSSIP_RETURN_IF_ERROR((*ch)->post_send(mesh::tag(o.round, a, kDown, c), bytes));
    }
    return Status::ok();
  };

  // Chunk c goes up while chunk c - lag comes down. Deadlock-free for any lag: the
  // mean of chunk c - lag needs only sums that every node sent before it waits.
  const uint64_t lag = std::max<uint32_t>(1, o.depth);
  for (uint64_t i = 0; i < chunks + lag; ++i) {
    if (i < chunks) GOSSIP_RETURN_IF_ERROR(reduce(i));
    if (i >= lag) GOSSIP_RETURN_IF_ERROR(broadcast(i - lag));
  }
  return links.wait_sends();
}

Status TreeAllReduce::gather(mesh::Links& links, const RootedTree& tree, std::span<float> data,
                             const RingOptions& o, const mesh::Coder& coder) {
  const Algorithm a = algorithm();
  GOSSIP_RETURN_IF_ERROR(contributions_.encode_own(data, o, coder));
  const auto children = tree.children(o.rank);
  for (uint32_t child : children)
    GOSSIP_RETURN_IF_ERROR(
        contributions_.receive(links, child, tree.subtree(child), a, kGatherUp, o.round));
  if (!tree.is_root(o.rank)) {
    const uint32_t parent = tree.parent(o.rank);
    GOSSIP_RETURN_IF_ERROR(
        contributions_.send(links, parent, tree.subtree(o.rank), a, kGatherUp, o.round));
    GOSSIP_RETURN_IF_ERROR(
        contributions_.receive(links, parent, tree.outside(o.rank), a, kGatherDown, o.round));
  }
  for (uint32_t child : children)
    GOSSIP_RETURN_IF_ERROR(
        contributions_.send(links, child, tree.outside(child), a, kGatherDown, o.round));
  GOSSIP_RETURN_IF_ERROR(links.wait_sends());
  return contributions_.sum_into(data, o.round);
}

}  // namespace gossip::sgd

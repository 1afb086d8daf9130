#include "compression/error_feedback.h"

#include <fmt/format.h>

namespace gossip::compression {

Status ErrorFeedback::encode(std::span<const float> u, size_t offset, const CodecContext& ctx,
                             std::vector<std::byte>& out, std::span<float> sent) {
  if (offset > residual_.size() || u.size() > residual_.size() - offset)
    return Status::invalid(fmt::format("error feedback: slice [{}, {}) outside a buffer of {}",
                                       offset, offset + u.size(), residual_.size()));
  if (sent.size() != u.size())
    return Status::invalid("error feedback: output span size differs from the input's");
  auto e = std::span(residual_).subspan(offset, u.size());
  corrected_.resize(u.size());
  for (size_t i = 0; i < u.size(); ++i) corrected_[i] = e[i] + u[i];
  GOSSIP_RETURN_IF_ERROR(codec_.encode(corrected_, ctx, out));
  GOSSIP_RETURN_IF_ERROR(codec_.decode(out, ctx, sent));
  for (size_t i = 0; i < u.size(); ++i) e[i] = corrected_[i] - sent[i];
  return Status::ok();
}

}  // namespace gossip::compression

#pragma once
// Error feedback for any codec (Seide et al. 2014; Karimireddy et al. 2019, EF-SGD):
//   e <- e + u;  c = Q(e);  e <- e - decode(c);  send c.
// What a biased codec drops is not lost but carried into the next message, which
// is what makes top-k and sign converge. The sender keeps one residual per buffer.

#include <span>
#include <vector>

#include "compression/codec.h"

namespace gossip::compression {

class ErrorFeedback {
 public:
  // n: the size of the buffer whose updates this residual follows.
  ErrorFeedback(const Codec& codec, size_t n) : codec_(codec), residual_(n, 0.0f) {}

  // Compresses u[.] for the slice [offset, offset + u.size()) of the buffer.
  // On success `out` holds the payload and `sent` (size u.size()) the values the
  // receivers will decode from it; the residual keeps what was not sent. On failure
  // the residual is unchanged.
  Status encode(std::span<const float> u, size_t offset, const CodecContext& ctx,
                std::vector<std::byte>& out, std::span<float> sent);

  std::span<const float> residual() const { return residual_; }
  void reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }
  // From a checkpoint; false (and unchanged) when `r` is not of this buffer's size.
  bool restore(std::span<const float> r) {
    if (r.size() != residual_.size()) return false;
    std::copy(r.begin(), r.end(), residual_.begin());
    return true;
  }

 private:
  const Codec& codec_;
  std::vector<float> residual_;
  std::vector<float> corrected_;  // e + u for the slice being encoded
};

}  // namespace gossip::compression

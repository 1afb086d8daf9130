#pragma once
// Keeps NaN and Inf out of what a node sends, so that one broken trainer does not
// poison every replica it is averaged with. Before each round the node's
// contribution is scanned; if it holds non-finite values it is repaired from the
// model of the node's last successful round (`last_good`; zeros before the first
// one, and always for gradients):
//  - refuse: the whole update since that round is dropped (x <- last_good);
//  - clip:   only the non-finite elements take their last_good values.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "proto/layout.h"

namespace gossip::daemon {

enum class NonFinitePolicy { kRefuse, kClip };

// "refuse" or "clip"; nullopt otherwise.
bool parse_nonfinite_policy(std::string_view text, NonFinitePolicy* out);

struct NonFiniteReport {
  uint64_t count = 0;  // non-finite elements found (0: x was left alone)
  uint64_t first = 0;  // flat index of the first one
};

// last_good: empty, or as long as x.
NonFiniteReport sanitize_update(std::span<float> x, std::span<const float> last_good,
                                NonFinitePolicy policy);

// "tensor 'fc1.weight' element 17" for a flat index into a replica of `layout`
// (padding included: "padding after tensor 'fc1.bias'").
std::string describe_position(const proto::Layout& layout, uint64_t flat_index);

}  // namespace gossip::daemon

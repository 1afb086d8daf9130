#include "daemon/nonfinite.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/finite.h"

namespace gossip::daemon {

bool parse_nonfinite_policy(std::string_view text, NonFinitePolicy* out) {
  if (text == "refuse")
    *out = NonFinitePolicy::kRefuse;
  else if (text == "clip")
    *out = NonFinitePolicy::kClip;
  else
    return false;
  return true;
}

NonFiniteReport sanitize_update(std::span<float> x, std::span<const float> last_good,
                                NonFinitePolicy policy) {
  NonFiniteReport r;
  if (!any_nonfinite(x)) return r;
  const bool have_good = last_good.size() == x.size();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) continue;
    if (r.count++ == 0) r.first = i;
    if (policy == NonFinitePolicy::kClip) x[i] = have_good ? last_good[i] : 0.0f;
  }
  if (policy == NonFinitePolicy::kRefuse) {
    if (have_good)
      std::copy(last_good.begin(), last_good.end(), x.begin());
    else
      std::fill(x.begin(), x.end(), 0.0f);
  }
  return r;
}

std::string describe_position(const proto::Layout& layout, uint64_t flat_index) {
  const auto offsets = proto::tensor_offsets(layout);
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const uint64_t begin = offsets[t], end = begin + layout.tensors[t].numel;
    if (flat_index >= begin && flat_index < end)
      return fmt::format("tensor '{}' element {}", layout.tensors[t].name, flat_index - begin);
    const uint64_t next = t + 1 < offsets.size() ? offsets[t + 1] : proto::padded_numel(layout);
    if (flat_index >= end && flat_index < next)
      return fmt::format("padding after tensor '{}'", layout.tensors[t].name);
  }
  return fmt::format("element {} (outside the layout)", flat_index);
}

}  // namespace gossip::daemon

// CPU reference for ALiBi slopes and bias, straight from docs/alibi_rope.md, ALiBi.
#include <cmath>
#include <limits>
#include <string>

#include "reference/distance_bias_reference.hpp"
#include "relpos/alibi.hpp"

namespace relpos {

float alibi_bias_value(float slope, std::int64_t rp, bool causal) {
  if (causal && rp > 0) return -std::numeric_limits<float>::infinity();
  const std::int64_t n = rp < 0 ? -rp : rp;
  return -(slope * static_cast<float>(n));
}

std::vector<float> alibi_bias_reference(const AlibiParams& p) {
  p.validate();
  const std::vector<float> m = alibi_slopes(p);
  return detail::distance_bias_reference(detail::distance_window(p),
                                         [&](std::uint32_t h, std::int64_t rp) { return alibi_bias_value(m[h], rp, false); });
}

void alibi_bias_add_reference(const AlibiParams& p, std::span<float> logits) {
  detail::distance_bias_add_reference(detail::distance_window(p), alibi_bias_reference(p), logits);
}

}  // namespace relpos

// CPU reference for KERPLE (docs/kerple.md), on the per-distance bias kit.
#include <cmath>
#include <string>

#include "params/checks.hpp"
#include "reference/distance_bias_reference.hpp"
#include "relpos/kerple.hpp"

namespace relpos {
namespace {
// Callers that hold no KerpleParams pass the variant alone: any other value would be taken as log.
void require_variant(KerpleVariant variant) {
  detail::require_one_of(variant, {KerpleVariant::Log, KerpleVariant::Power}, "variant", "must be log or power");
}
}  // namespace

float kerple_bias_value(float r1, float r2, KerpleVariant variant, std::int64_t rp) {
  require_variant(variant);
  const double n = static_cast<double>(rp < 0 ? -rp : rp);
  const double f = variant == KerpleVariant::Power ? std::pow(n, static_cast<double>(r2)) : std::log1p(static_cast<double>(r2) * n);
  return static_cast<float>(-(static_cast<double>(r1) * f));
}

double kerple_error_bound(float r1, float r2, KerpleVariant variant, std::int64_t rp) {
  require_variant(variant);
  const double n = static_cast<double>(rp < 0 ? -rp : rp);
  if (n == 0.0) return 0.0;
  constexpr double ulp = 0x1p-23;  // float32 epsilon
  const double value = std::fabs(kerple_bias_value(r1, r2, variant, rp));
  if (variant == KerpleVariant::Power) {
    // pow(n, r2) = exp2(r2 * log2(n)): log2 within 3 ulp (Vulkan's bound outside [0.5, 2]; 2^-21
    // absolute inside), the product and exp2 each within a few ulp, so the exponent e = r2 * log2 n
    // is off by at most |e| * 5 ulp + 2^-21 and the power by ln 2 times that, relative; then r1's
    // multiply and the output's rounding.
    const double e = std::fabs(static_cast<double>(r2) * std::log2(n));
    return value * (std::log(2.0) * (e * 5 * ulp + 0x1p-21) + 4 * ulp);
  }
  // log(u) of u = 1 + x (corrected for the rounding of u): Vulkan's log is within 3 ulp of the
  // result outside [0.5, 2] and 2^-21 absolute inside; x = r2 * n and the correction add a few ulp.
  const double f = std::log1p(static_cast<double>(r2) * n);
  return static_cast<double>(r1) * (f * 6 * ulp + 0x1p-21) + value * 2 * ulp;
}

std::vector<float> kerple_bias_reference(const KerpleParams& p) {
  p.validate();
  return detail::distance_bias_reference(detail::distance_window(p), [&](std::uint32_t h, std::int64_t rp) {
    return kerple_bias_value(p.r1[h], p.r2[h], p.variant, rp);
  });
}

void kerple_bias_add_reference(const KerpleParams& p, std::span<float> logits) {
  detail::distance_bias_add_reference(detail::distance_window(p), kerple_bias_reference(p), logits);
}

}  // namespace relpos

// KerpleParams: the checks of the kernel's parameters and of the window.
#include <cmath>
#include <string>

#include "params/distance_window.hpp"
#include "relpos/kerple.hpp"

namespace relpos {

namespace {

void require_per_head(const std::vector<float>& v, const char* name, std::uint32_t heads, float max) {
  using detail::require;
  require(v.size() == heads, name, std::to_string(v.size()) + " values", "must hold one per head (" + std::to_string(heads) + ")");
  for (std::uint32_t h = 0; h < v.size(); ++h)
    require(std::isfinite(v[h]) && v[h] > 0.0f && v[h] <= max, std::string(name) + "[" + std::to_string(h) + "]", detail::number_text(v[h]),
            max == INFINITY ? std::string("must be finite and > 0") : "must be in (0, " + detail::number_text(max) + "] for the power variant");
}
}  // namespace

void KerpleParams::validate_kernel() const {
  using detail::require;
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(variant == KerpleVariant::Log || variant == KerpleVariant::Power, "variant",
          std::to_string(static_cast<std::uint32_t>(variant)), "must be log or power");
  require_per_head(r1, "r1", heads, INFINITY);
  require_per_head(r2, "r2", heads, variant == KerpleVariant::Power ? 2.0f : INFINITY);
}

void KerpleParams::validate() const {
  validate_kernel();
  detail::distance_window(*this).validate();
}

}  // namespace relpos

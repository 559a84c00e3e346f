// SandwichParams: the checks of the kernel's parameters and of the window.
#include <cmath>
#include <string>

#include "params/distance_window.hpp"
#include "relpos/sandwich.hpp"

namespace relpos {

void SandwichParams::validate_kernel() const {
  using detail::require;
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(dim >= 2 && dim % 2 == 0 && dim <= kMaxDim, "dim", std::to_string(dim), "must be even, in [2, " + std::to_string(kMaxDim) + "]");
  require(first_frequency <= 1, "first_frequency", std::to_string(first_frequency), "must be 0 (k = 0 ... d'/2 - 1) or 1 (k = 1 ... d'/2)");
  require(scale.size() == heads, "scale", std::to_string(scale.size()) + " values", "must hold one per head (" + std::to_string(heads) + ")");
  for (std::uint32_t h = 0; h < scale.size(); ++h)
    require(std::isfinite(scale[h]), "scale[" + std::to_string(h) + "]", detail::number_text(scale[h]), "must be finite");
}

void SandwichParams::validate() const {
  validate_kernel();
  detail::distance_window(*this).validate();
}

}  // namespace relpos

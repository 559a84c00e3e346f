// AlibiParams: the checks, and the slopes of a head count (ALiBi's geometric rule, or meliad's
// interleaved one for head counts that are not powers of two).
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "params/distance_window.hpp"
#include "relpos/alibi.hpp"

namespace relpos {

void AlibiParams::validate_slopes() const {
  using detail::require;
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  // A slope each, made on the host: 2^32 heads would be 16 GiB of them.
  require(heads <= (1u << 24), "heads", std::to_string(heads), "must be <= 2^24");
  require(std::isfinite(max_bias) && max_bias > 0.0, "max_bias", detail::number_text(max_bias), "must be finite and > 0");
  detail::require_one_of(rule, {AlibiSlopeRule::Interleaved, AlibiSlopeRule::Geometric}, "rule", "must be Interleaved or Geometric");
  if (slopes.empty()) return;
  require(slopes.size() == heads, "slopes", std::to_string(slopes.size()) + " values", "must hold one per head (" + std::to_string(heads) + ")");
  for (std::uint32_t h = 0; h < slopes.size(); ++h)
    require(std::isfinite(slopes[h]), "slopes[" + std::to_string(h) + "]", detail::number_text(slopes[h]), "must be finite");
}

void AlibiParams::validate() const {
  validate_slopes();
  detail::distance_window(*this).validate();
}

std::vector<float> alibi_slopes(const AlibiParams& p) {
  p.validate_slopes();
  if (!p.slopes.empty()) return p.slopes;
  // Slope h (1-based) of n heads' geometric rule: 2^(-max_bias * h / n), in double, rounded once.
  auto slope = [&](std::uint64_t h, std::uint64_t n) {  // (64-bit: 2c and h = n reach 2^32)
    return static_cast<float>(std::exp2(-p.max_bias * h / n)); };
  const std::uint64_t n = p.heads;
  std::vector<float> out(n);  // computed in place: 4 bytes a head at most (a head count is a flag)
  if (p.rule == AlibiSlopeRule::Geometric || std::has_single_bit(p.heads)) {
    for (std::uint64_t h = 1; h <= n; ++h) out[h - 1] = slope(h, n);
    return out;
  }
  // Interleaved: the c = 2^floor(log2 n) slopes of c heads, then every other slope of 2c heads
  // (h = 1, 3, 5, ...; 2c is a power of two, so its rule is the geometric one).
  const std::uint64_t c = std::bit_floor(p.heads);
  for (std::uint64_t h = 1; h <= c; ++h) out[h - 1] = slope(h, c);
  for (std::uint64_t k = 0; k < n - c; ++k) out[c + k] = slope(2 * k + 1, 2 * c);
  return out;
}

}  // namespace relpos

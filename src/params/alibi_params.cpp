// AlibiParams: the checks, and the slopes of a head count (ALiBi's geometric rule, or meliad's
// interleaved one for head counts that are not powers of two).
#include <cmath>
#include <string>
#include <vector>

#include "params/distance_window.hpp"
#include "relpos/alibi.hpp"

namespace relpos {

void AlibiParams::validate_slopes() const {
  using detail::require;
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(std::isfinite(max_bias) && max_bias > 0.0, "max_bias", std::to_string(max_bias), "must be finite and > 0");
  if (slopes.empty()) return;
  require(slopes.size() == heads, "slopes", std::to_string(slopes.size()) + " values", "must hold one per head (" + std::to_string(heads) + ")");
  for (float m : slopes) require(std::isfinite(m), "slopes", std::to_string(m), "must be finite");
}

void AlibiParams::validate() const {
  validate_slopes();
  detail::distance_window(*this).validate();
}

namespace {
// 2^(-max_bias * h / n), h = 1..n, in double.
std::vector<double> geometric(std::uint32_t n, double max_bias) {
  std::vector<double> s(n);
  for (std::uint32_t h = 1; h <= n; ++h) s[h - 1] = std::exp2(-max_bias * h / n);
  return s;
}

std::vector<double> interleaved(std::uint32_t n, double max_bias) {
  if ((n & (n - 1)) == 0) return geometric(n, max_bias);
  const std::uint32_t c = std::uint32_t{1} << static_cast<std::uint32_t>(std::floor(std::log2(n)));
  std::vector<double> s = geometric(c, max_bias);
  const std::vector<double> twice = interleaved(2 * c, max_bias);
  for (std::uint32_t k = 0; k < n - c; ++k) s.push_back(twice[2 * k]);
  return s;
}
}  // namespace

std::vector<float> alibi_slopes(const AlibiParams& p) {
  p.validate_slopes();
  if (!p.slopes.empty()) return p.slopes;
  const std::vector<double> s = p.rule == AlibiSlopeRule::Interleaved ? interleaved(p.heads, p.max_bias) : geometric(p.heads, p.max_bias);
  return std::vector<float>(s.begin(), s.end());
}

}  // namespace relpos

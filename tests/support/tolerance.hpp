#pragma once
// Error bounds for float sums, for comparing GPU results with the CPU reference (which sums in
// double): a float sum of n terms is off by at most n·u·Σ|terms| (u = 2^-24; Higham, first
// order), so bounds come from the sums of absolute values, never from a guessed epsilon. A wrong
// index or a dropped term moves a value by a whole term, far above them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace relpos::test {

inline constexpr double kUnitRoundoff = 0x1p-24;
// A result rounded to half: one half ulp relative, doubled for implementations that round the
// other way (GLSL leaves packHalf2x16's rounding open).
inline constexpr double kHalfRounding = 0x1p-10;

inline double max_abs(std::span<const float> x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

// Bound on the error of an n-term float sum whose absolute terms add up to at most abs_sum.
inline double sum_error(std::uint64_t n, double abs_sum) { return static_cast<double>(n) * kUnitRoundoff * abs_sum; }

// An absolute error bound in the units of relpos::normalised_error (divided by max(1, max|want|)).
inline double normalised(double abs_error, std::span<const float> want) { return abs_error / std::max(1.0, max_abs(want)); }

// Attention output: a logit error δ moves the weights by Σ|δw| <= 2δ (softmax's Jacobian), the
// exp and division add a few ulp per weight (GLSL's exp allows 3 + 2|x| ulp: 64 covers it), and
// the output sum over `terms` keys and buckets of convex weights times values <= max_value.
inline double attention_error(double logit_error, std::uint64_t terms, double max_value) {
  return max_value * (2.0 * logit_error + (static_cast<double>(terms) + 64.0) * kUnitRoundoff);
}

}  // namespace relpos::test

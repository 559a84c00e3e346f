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

// RoPE's rotations (rope, kv_append) against the reference, normalised. f32: the shader's sin and
// cos are within ~1e-7 of the reference's at any position (reduction 1e-11, Taylor terms 1e-11,
// float32 evaluation ~1e-7: a model of its arithmetic over 250,000 angles up to 2^31 and beyond
// peaks at 1.0e-7), and the rotation's float32 multiplies and add round three times (~1.8e-7
// relative). A pair's error is at most (|x| + |y|) times the sum, <= 2 * max|want| * 2.8e-7 =
// 5.6e-7 normalised; measured: 1.3e-7. f16: the result may round to the neighbouring half.
inline constexpr double kRopeTolF32 = 1e-6;
inline constexpr double kRopeTolF16 = kHalfRounding + kRopeTolF32;

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

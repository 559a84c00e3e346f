// CPU reference for the Sandwich bias (docs/sandwich.md), on the per-distance bias kit: each
// cosine's angle reduced exactly (its phase in turns, in long double) and the sum in float64,
// rounded once to float32.
#include <cmath>
#include <vector>

#include "reference/distance_bias_reference.hpp"
#include "relpos/fourier.hpp"
#include "relpos/sandwich.hpp"

namespace relpos {

namespace {

constexpr long double kTwoPi = 6.283185307179586476925286766559005768L;

// ω_k / 2π, turns per position, of each of the dim/2 frequencies from k = first.
std::vector<long double> turns_per_position(std::uint32_t dim, std::uint32_t first) {
  std::vector<long double> t(dim / 2);
  for (std::uint32_t k = 0; k < dim / 2; ++k) t[k] = std::pow(10000.0L, -2.0L * (first + k) / dim) / kTwoPi;
  return t;
}

// rp·turns less its whole turns is the phase: exact to long double precision at any rp.
double sum_of(const std::vector<long double>& turns, std::int64_t rp) {
  double sum = 0.0;
  for (long double t : turns) {
    const long double phase = static_cast<long double>(rp) * t;
    sum += std::cos(static_cast<double>(kTwoPi * (phase - std::floor(phase))));
  }
  return sum;
}

}  // namespace

double sandwich_sum(std::uint32_t dim, std::int64_t rp, std::uint32_t first_frequency) {
  thread_local std::uint32_t cached_dim = 0, cached_first = 0;  // callers go along a window of one dimension
  thread_local std::vector<long double> turns;
  if (dim != cached_dim || first_frequency != cached_first) {
    turns = turns_per_position(dim, first_frequency);
    cached_dim = dim;
    cached_first = first_frequency;
  }
  return sum_of(turns, rp);
}

float sandwich_bias_value(float scale, std::uint32_t dim, std::int64_t rp, std::uint32_t first_frequency) {
  return static_cast<float>(static_cast<double>(scale) * sandwich_sum(dim, rp, first_frequency));
}

std::vector<float> sandwich_bias_reference(const SandwichParams& p) {
  p.validate();
  // The sum of each relative position once, shared by the heads.
  const detail::DistanceWindow w = detail::distance_window(p);
  const std::vector<long double> turns = turns_per_position(p.dim, p.first_frequency);
  std::vector<double> sums(w.row_len());
  for (std::uint64_t x = 0; x < sums.size(); ++x) sums[x] = sum_of(turns, w.rp_first() + static_cast<std::int64_t>(x));
  return detail::distance_bias_reference(w, [&](std::uint32_t h, std::int64_t rp) {
    return static_cast<float>(static_cast<double>(p.scale[h]) * sums[static_cast<std::uint64_t>(rp - w.rp_first())]);
  });
}

void sandwich_bias_add_reference(const SandwichParams& p, std::span<float> logits) {
  detail::distance_bias_add_reference(detail::distance_window(p), sandwich_bias_reference(p), logits);
}

// Each of the n = dim/2 cosines carries the sinusoidal encoding's bound (a phase within 2^-32
// turns, a reduced angle of 3 float32 roundings, the GPU's cos on |θ| <= π/4); the float32 sum of
// n terms of magnitude <= 1 adds at most n·n·2^-24; the product with the scale and the output
// round twice more.
double sandwich_error_bound(float scale, std::uint32_t dim) {
  const double n = dim / 2;
  return std::fabs(static_cast<double>(scale)) * n * (sinusoidal_error_bound() + (n + 2) * 0x1p-24);
}

}  // namespace relpos

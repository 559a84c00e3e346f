#include "relpos/compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace relpos {

double normalised_error(std::span<const float> got, std::span<const float> want) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.size() != want.size()) return kInf;
  double scale = 1.0, err = 0.0;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;  // includes equal infinities
    const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (!std::isfinite(d)) return kInf;
    err = std::max(err, d);
  }
  return err / scale;
}

std::uint64_t count_mismatches(std::span<const std::int32_t> got, std::span<const std::int32_t> want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) n += got[i] != want[i];
  return n;
}

}  // namespace relpos

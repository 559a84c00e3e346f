#pragma once
// Helpers for error bounds built from sums of absolute values.
#include <relpos/relpos.hpp>

#include <cmath>
#include <vector>

namespace relpos::test {

inline std::vector<float> abs_of(std::vector<float> x) {
  for (float& v : x) v = std::abs(v);
  return x;
}

}  // namespace relpos::test

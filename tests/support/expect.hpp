#pragma once
// Assertions the operation tests share.
#include <gtest/gtest.h>

#include <relpos/error.hpp>
#include <relpos/half.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace relpos::test {

// f() must throw InvalidArgument whose message mentions `word` (the parameter it names).
template <class F>
void expect_invalid(F&& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "expected InvalidArgument mentioning " << word;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

// f16 results against a float32 reference: the reference rounded to half, give or take one half
// ulp (GLSL leaves the rounding of packHalf2x16 to the implementation).
inline void expect_half_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t e = 0; e < got.size(); ++e) {
    const std::uint16_t g = float_to_half(got[e]), w = float_to_half(want[e]);
    const int dist = std::abs(static_cast<int>(g & 0x7fff) - static_cast<int>(w & 0x7fff));
    ASSERT_TRUE(g == w || (((g ^ w) & 0x8000) == 0 && dist <= 1)) << what << " at " << e << ": " << got[e] << " vs " << want[e];
  }
}

// Results where a NaN among the inputs may reach, in rows of `width` values (width 1: an lse):
// NaN exactly where the reference is, the other values within `tol` of it (normalised_error's
// measure, over them). Returns whether each row holds a NaN, so that a test can also say which
// rows it expects to.
inline std::vector<bool> expect_nan_rows_match(const std::vector<float>& got, const std::vector<float>& want, std::size_t width, double tol,
                                               const std::string& what) {
  std::vector<bool> nan_rows;
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size() || width == 0) return nan_rows;
  double scale = 1.0, err = 0.0;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  nan_rows.assign(want.size() / width, false);
  for (std::size_t e = 0; e < want.size(); ++e) {
    if (std::isnan(want[e])) {
      nan_rows[e / width] = true;
      EXPECT_TRUE(std::isnan(got[e])) << what << " row " << e / width << " [" << e % width << "] = " << got[e] << ", want NaN";
    } else if (got[e] != want[e]) {  // (equal infinities are equal)
      EXPECT_FALSE(std::isnan(got[e])) << what << " row " << e / width << " [" << e % width << "] is NaN, want " << want[e];
      err = std::max(err, std::fabs(static_cast<double>(got[e]) - want[e]));
    }
  }
  EXPECT_LE(err / scale, tol) << what;
  return nan_rows;
}

}  // namespace relpos::test

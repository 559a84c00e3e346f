#pragma once
// Assertions the operation tests share.
#include <gtest/gtest.h>

#include <relpos/error.hpp>
#include <relpos/half.hpp>

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

}  // namespace relpos::test

#include <gtest/gtest.h>

#include <relpos/half.hpp>

#include <bit>
#include <cmath>

using namespace relpos;

TEST(Half, KnownValues) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // ties to even past the largest half: infinity
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulps -> 2
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
}

TEST(Half, EveryHalfRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    EXPECT_EQ(float_to_half(half_to_float(static_cast<std::uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Half, RoundsToNearest) {
  // Between two neighbouring halves, values below the midpoint go down and above go up.
  for (std::uint16_t h : {0x0001, 0x03ff, 0x0400, 0x3c00, 0x5555, 0x7bfe}) {
    float a = half_to_float(h), b = half_to_float(static_cast<std::uint16_t>(h + 1));
    float mid = 0.5f * (a + b);
    EXPECT_EQ(float_to_half(std::nextafter(mid, a)), h);
    EXPECT_EQ(float_to_half(std::nextafter(mid, b)), h + 1);
  }
}

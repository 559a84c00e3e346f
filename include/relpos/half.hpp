#pragma once
// IEEE 754 binary16 <-> binary32 on the host, round-to-nearest-even, with subnormals, inf, NaN.
#include <cstdint>
#include <span>
#include <vector>

namespace relpos {

std::uint16_t float_to_half(float f);
float half_to_float(std::uint16_t h);

std::vector<std::uint16_t> to_half(std::span<const float> values);
std::vector<float> from_half(std::span<const std::uint16_t> values);

}  // namespace relpos

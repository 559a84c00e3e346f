#pragma once
// Numbers on the command line: one checked parser behind every numeric flag. A value that is not
// a number of the flag's type, or lies outside its range, throws relpos::InvalidArgument naming the
// flag, the value and the range (`--queries = 12x: must be a whole number in [1, 4294967295]`);
// CLI11's own conversion would accept "-4294967295" as 1, "010" as 8 and a 23-digit count as
// 2^64 - 1.
#include <relpos/error.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace relpos::tool {

// Whole numbers: optional sign, decimal digits. Floating-point values: decimal or scientific,
// finite, within [min, max].
std::int64_t parse_signed(const std::string& flag, const std::string& text, std::int64_t min, std::int64_t max);
std::uint64_t parse_unsigned(const std::string& flag, const std::string& text, std::uint64_t min, std::uint64_t max);
double parse_real(const std::string& flag, const std::string& text, double min, double max);

template <class T>
T parse_number(const std::string& flag, const std::string& text, T min, T max) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(parse_real(flag, text, min, max));
  else if constexpr (std::is_signed_v<T>)
    return static_cast<T>(parse_signed(flag, text, min, max));
  else
    return static_cast<T>(parse_unsigned(flag, text, min, max));
}

}  // namespace relpos::tool

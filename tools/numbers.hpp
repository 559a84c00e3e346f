#pragma once
// Numbers on the command line: one checked parser behind every numeric flag. A value that is not
// a number of the flag's type, or lies outside its range, throws relpos::InvalidArgument naming the
// flag, the value and the range (`--queries = 12x: must be a whole number in [1, 4294967295]`);
// CLI11's own conversion would accept "-4294967295" as 1, "010" as 8 and a 23-digit count as
// 2^64 - 1.
#include <CLI/CLI.hpp>
#include <relpos/error.hpp>

#include <cstdint>
#include <limits>
#include <optional>
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

// add_option for a number: the value goes through parse_number when the flag is parsed. The range
// defaults to the type's (finite for floating point). `flag` may list aliases ("--vector-size,--dim"):
// messages name the first.
template <class T>
CLI::Option* add_number(CLI::App& cmd, const std::string& flag, T& target, const std::string& help,
                        std::type_identity_t<T> min = std::numeric_limits<T>::lowest(),
                        std::type_identity_t<T> max = std::numeric_limits<T>::max()) {
  return cmd.add_option_function<std::string>(
                flag, [&target, name = flag.substr(0, flag.find(',')), min, max](const std::string& text) {
                  target = parse_number<T>(name, text, min, max);
                }, help)
      ->type_name(std::is_floating_point_v<T> ? "NUMBER" : "INT");
}

template <class T>
CLI::Option* add_number(CLI::App& cmd, const std::string& flag, std::optional<T>& target, const std::string& help,
                        std::type_identity_t<T> min = std::numeric_limits<T>::lowest(),
                        std::type_identity_t<T> max = std::numeric_limits<T>::max()) {
  return cmd.add_option_function<std::string>(
                flag, [&target, name = flag.substr(0, flag.find(',')), min, max](const std::string& text) {
                  target = parse_number<T>(name, text, min, max);
                }, help)
      ->type_name(std::is_floating_point_v<T> ? "NUMBER" : "INT");
}

}  // namespace relpos::tool

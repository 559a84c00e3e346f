#pragma once
// Numeric flags: CLI11 options whose values go through numbers.hpp's checked parser.
#include <CLI/CLI.hpp>

#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "numbers.hpp"

namespace relpos::tool {

// add_number's body: `target` is a T or a std::optional<T>: either takes the parsed T.
template <class T, class Target>
CLI::Option* add_number_to(CLI::App& cmd, const std::string& flag, Target& target, const std::string& help, T min, T max) {
  return cmd.add_option_function<std::string>(
                flag, [&target, name = flag.substr(0, flag.find(',')), min, max](const std::string& text) {
                  target = parse_number<T>(name, text, min, max);
                }, help)
      ->type_name(std::is_floating_point_v<T> ? "NUMBER" : "INT");
}

// add_option for a number: the value goes through parse_number when the flag is parsed. The range
// defaults to the type's (finite for floating point). `flag` may list aliases ("--vector-size,--dim"):
// messages name the first.
template <class T>
CLI::Option* add_number(CLI::App& cmd, const std::string& flag, T& target, const std::string& help,
                        std::type_identity_t<T> min = std::numeric_limits<T>::lowest(),
                        std::type_identity_t<T> max = std::numeric_limits<T>::max()) {
  return add_number_to<T>(cmd, flag, target, help, min, max);
}

// The same for an optional number: unset unless the flag is given.
template <class T>
CLI::Option* add_number(CLI::App& cmd, const std::string& flag, std::optional<T>& target, const std::string& help,
                        std::type_identity_t<T> min = std::numeric_limits<T>::lowest(),
                        std::type_identity_t<T> max = std::numeric_limits<T>::max()) {
  return add_number_to<T>(cmd, flag, target, help, min, max);
}

}  // namespace relpos::tool

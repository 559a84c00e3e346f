#include "numbers.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

namespace relpos::tool {
namespace {

[[noreturn]] void refuse(const std::string& flag, const std::string& text, const std::string& limit) {
  throw InvalidArgument(flag + " = " + text + ": " + limit);
}

std::string range(const std::string& what, const std::string& min, const std::string& max) {
  return "must be " + what + " in [" + min + ", " + max + "]";
}

std::string shortest(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// from_chars over the whole text: true when every character was used and the value fits T.
// A leading '+' is accepted (from_chars itself takes '-' only).
template <class T, class... Format>
std::errc convert(const std::string& text, T& value, Format... format) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') ++first;
  if (first == last || *first == '+' || *first == ' ') return std::errc::invalid_argument;
  const auto [ptr, ec] = std::from_chars(first, last, value, format...);
  if (ec == std::errc() && ptr != last) return std::errc::invalid_argument;
  return ec;
}

}  // namespace

std::int64_t parse_signed(const std::string& flag, const std::string& text, std::int64_t min, std::int64_t max) {
  const std::string limit = range("a whole number", std::to_string(min), std::to_string(max));
  std::int64_t v = 0;
  if (convert(text, v) != std::errc() || v < min || v > max) refuse(flag, text, limit);
  return v;
}

std::uint64_t parse_unsigned(const std::string& flag, const std::string& text, std::uint64_t min, std::uint64_t max) {
  const std::string limit = range("a whole number", std::to_string(min), std::to_string(max));
  std::uint64_t v = 0;
  if (convert(text, v) != std::errc() || v < min || v > max) refuse(flag, text, limit);
  return v;
}

double parse_real(const std::string& flag, const std::string& text, double min, double max) {
  const std::string limit = range("a finite number", shortest(min), shortest(max));
  double v = 0.0;
  // inf and nan are spelled out by from_chars too; every numeric flag needs a finite value.
  if (convert(text, v, std::chars_format::general) != std::errc() || !std::isfinite(v) || v < min || v > max) refuse(flag, text, limit);
  return v;
}

}  // namespace relpos::tool

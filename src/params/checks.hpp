#pragma once
// Argument checks shared by every operation: a failed check names the parameter, its value and
// the limit it broke.
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string>

#include "relpos/dtype.hpp"
#include "relpos/error.hpp"

namespace relpos::detail {

inline void require(bool ok, const std::string& parameter, const std::string& value, const std::string& limit) {
  if (!ok) throw InvalidArgument(parameter + " = " + value + ": " + limit);
}

// A real value as a message shows it: 9 significant digits, so that 1e-45 or 1.0000001 read as
// what was given (std::to_string prints 6 decimals: 0.000000, 1.000000).
inline std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// A float storage that every op takes: f32 or f16 (bf16 is fused attention's only).
inline void require_f32_or_f16(DType t, const std::string& parameter) {
  require(t == DType::F32 || t == DType::F16, parameter, std::string(dtype_name(t)), "must be f32 or f16");
}

// The product of the dimensions, saturated at 2^64 - 1 where it would wrap: checked against a
// limit below 2^64, a product however far past 2^64 is refused, not taken for its remainder.
inline std::uint64_t saturated_product(std::initializer_list<std::uint64_t> dims) {
  std::uint64_t n = 1;
  bool saturated = false;
  for (std::uint64_t d : dims) {
    if (d == 0) return 0;
    saturated = saturated || __builtin_mul_overflow(n, d, &n);
  }
  return saturated ? std::numeric_limits<std::uint64_t>::max() : n;
}
// A product as an error message shows it.
inline std::string product_text(std::uint64_t n) {
  return n == std::numeric_limits<std::uint64_t>::max() ? std::string("2^64 or more") : std::to_string(n);
}

// The product of the dimensions, or InvalidArgument naming `what` when it does not fit in 64 bits
// of bytes (8 bytes per element at most).
inline std::uint64_t checked_elements(std::initializer_list<std::uint64_t> dims, const std::string& what) {
  std::uint64_t n = 1;
  for (std::uint64_t d : dims) {
    if (d != 0 && n > (std::uint64_t{1} << 60) / d)
      throw InvalidArgument(what + ": the element count overflows (more than 2^60 elements)");
    n *= d;
  }
  return n;
}

}  // namespace relpos::detail

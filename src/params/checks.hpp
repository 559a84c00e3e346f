#pragma once
// Argument checks shared by every operation: a failed check names the parameter, its value and
// the limit it broke.
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

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

// An enum field or argument holding a value past its type's list (an integer cast to it), refused
// naming its number before a switch or an if chain on it takes some branch by accident.
template <class E>
void require_one_of(E value, std::initializer_list<E> known, const std::string& parameter, const std::string& limit) {
  for (E k : known)
    if (value == k) return;
  throw InvalidArgument(parameter + " = " + std::to_string(static_cast<std::int64_t>(static_cast<std::underlying_type_t<E>>(value))) + ": " +
                        limit);
}

// A DType as a message shows it: its name, or the number of a value that is no DType.
inline std::string dtype_text(DType t) {
  const std::string_view name = dtype_name(t);
  return name == "?" ? std::to_string(static_cast<unsigned>(t)) + " (no DType)" : std::string(name);
}

// A float storage that every op takes: f32 or f16 (bf16 is fused attention's only).
inline void require_f32_or_f16(DType t, const std::string& parameter) {
  require(t == DType::F32 || t == DType::F16, parameter, dtype_text(t), "must be f32 or f16");
}

// A storage fused attention takes: f32, f16 or bf16.
inline void require_float_dtype(DType t, const std::string& parameter) {
  require(t == DType::F32 || t == DType::F16 || t == DType::BF16, parameter, dtype_text(t), "must be f32, f16 or bf16");
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
// A saturated product in 4-element (or 4-byte) words, as an error message shows it.
inline std::string words_text(std::uint64_t n) {
  return n == std::numeric_limits<std::uint64_t>::max() ? std::string("2^62 or more") : std::to_string(n / 4);
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

// The state a move-only class of the API keeps behind a pointer (`type`: its name), or
// InvalidArgument when the object was moved from, which left the pointer null: the public entry
// points call it first, so that use after a move is an error naming the object, not a null
// dereference.
template <class Pointer>
auto& live_state(const Pointer& state, const char* type) {
  if (!state) throw InvalidArgument(std::string(type) + ": used after it was moved from");
  return *state;
}

}  // namespace relpos::detail

#pragma once
#include <cstdint>
#include <string_view>

namespace relpos {

enum class DType : std::uint8_t { F32, F16, I32 };

constexpr std::uint32_t dtype_size(DType t) { return t == DType::F16 ? 2 : 4; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
  }
  return "?";
}

}  // namespace relpos

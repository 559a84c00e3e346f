#pragma once
#include <cstdint>
#include <string_view>

namespace relpos {

// BF16 (bfloat16: the top 16 bits of a float32) is a storage of fused attention's q and out only
// (AttentionParams); every other op takes F32 or F16 and refuses it.
enum class DType : std::uint8_t { F32, F16, I32, BF16 };

constexpr std::uint32_t dtype_size(DType t) { return t == DType::F16 || t == DType::BF16 ? 2 : 4; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::BF16: return "bf16";
  }
  return "?";
}

}  // namespace relpos

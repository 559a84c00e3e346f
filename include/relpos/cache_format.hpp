#pragma once
// The formats a KV cache's rows are stored in (docs/paged_attention.md, "Cache formats"), defined
// once for the host (encode/decode here), the shaders (shaders/include/relpos/cache_format.glsl)
// and the tool. A cache row is one (block, slot, kv head): head_dim values stored as
// - F32:      head_dim float32 (4 bytes each);
// - F16:      head_dim IEEE binary16 (2 bytes each), round-to-nearest-even from float32;
// - BF16:     head_dim bfloat16 (the top 16 bits of a float32), round-to-nearest-even;
// - Q8_0:     ggml's block_q8_0 along head_dim: head_dim / 32 blocks of 34 bytes, each a binary16
//             scale d followed by 32 int8 q; value = d * q. Encoding is ggml's quantize_row_q8_0:
//             d = max|x| / 127, id = d ? 1 / d : 0, q = roundf(x * id) (half away from zero), with
//             d stored rounded to binary16 (the int8 use the float32 d);
// - FP8_E4M3: one byte per value, OCP E4M3FN (torch.float8_e4m3fn: bias 7, no infinities, NaN
//             0x7f/0xff, largest 448), times a float32 scale per kv head (one for k, one for v):
//             value = e4m3(byte) * scale, byte = e4m3 of x * (1 / scale) (1 / scale rounded to float32
//             on the host), saturating to +-448, round-to-nearest-even, NaN kept.
// Byte order is little-endian; a row's bytes follow one another without padding (a q8_0 row of
// head_dim 32 is 34 bytes, so rows need not start on a 4-byte boundary).
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace relpos {

enum class CacheFormat : std::uint8_t { F32 = 0, F16 = 1, BF16 = 2, Q8_0 = 3, FP8_E4M3 = 4 };

inline constexpr std::uint32_t kQ8BlockValues = 32;  // values per q8_0 block
inline constexpr std::uint32_t kQ8BlockBytes = 34;   // 2-byte binary16 scale + 32 int8
inline constexpr float kFp8E4M3Max = 448.0f;

std::string_view cache_format_name(CacheFormat f);  // "f32", "f16", "bf16", "q8_0", "fp8_e4m3"
std::optional<CacheFormat> parse_cache_format(std::string_view name);
// Whether the format takes a float32 scale per kv head (fp8_e4m3).
constexpr bool cache_format_scaled(CacheFormat f) { return f == CacheFormat::FP8_E4M3; }
// Bytes of one row of head_dim values (head_dim a multiple of 32 for q8_0).
std::uint64_t cache_row_bytes(CacheFormat f, std::uint32_t head_dim);
// Throws InvalidArgument naming `param` when head_dim cannot be stored in the format (zero, odd,
// not a multiple of 32 for q8_0).
void check_cache_head_dim(CacheFormat f, std::uint32_t head_dim, std::string_view param = "head_dim");
// Throws InvalidArgument naming `param` unless `scales` holds `kv_heads` finite values > 0 (fp8), or
// is empty (other formats).
void check_cache_scales(CacheFormat f, std::span<const float> scales, std::uint32_t kv_heads, std::string_view param);

// Scalar conversions (round-to-nearest-even where rounding).
std::uint16_t float_to_bf16(float x);
float bf16_to_float(std::uint16_t b);
std::vector<std::uint16_t> to_bf16(std::span<const float> values);  // as to_half / from_half (half.hpp)
std::vector<float> from_bf16(std::span<const std::uint16_t> values);
std::uint8_t float_to_fp8_e4m3(float x);  // saturating to +-448; NaN -> 0x7f (with x's sign)
float fp8_e4m3_to_float(std::uint8_t b);

// One row: encodes row.size() values into cache_row_bytes(f, row.size()) bytes, and back. `scale`
// is the row's kv head's scale (fp8_e4m3 only; 1 otherwise).
void encode_cache_row(CacheFormat f, std::span<const float> row, std::span<std::uint8_t> out, float scale = 1.0f);
void decode_cache_row(CacheFormat f, std::span<const std::uint8_t> in, std::span<float> row, float scale = 1.0f);

}  // namespace relpos

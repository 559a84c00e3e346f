// The cache formats on the host (relpos/cache_format.hpp): bit-exact twins of
// shaders/include/relpos/cache_format.glsl.
#include "relpos/cache_format.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstring>
#include <string>

#include "params/checks.hpp"
#include "relpos/half.hpp"

namespace relpos {

using detail::require;

std::string_view cache_format_name(CacheFormat f) {
  switch (f) {
    case CacheFormat::F32: return "f32";
    case CacheFormat::F16: return "f16";
    case CacheFormat::BF16: return "bf16";
    case CacheFormat::Q8_0: return "q8_0";
    case CacheFormat::FP8_E4M3: return "fp8_e4m3";
  }
  return "?";
}

std::optional<CacheFormat> parse_cache_format(std::string_view name) {
  for (CacheFormat f : {CacheFormat::F32, CacheFormat::F16, CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
    if (cache_format_name(f) == name) return f;
  return std::nullopt;
}

std::uint64_t cache_row_bytes(CacheFormat f, std::uint32_t head_dim) {
  switch (f) {
    case CacheFormat::F32: return std::uint64_t{head_dim} * 4;
    case CacheFormat::F16:
    case CacheFormat::BF16: return std::uint64_t{head_dim} * 2;
    case CacheFormat::Q8_0: return std::uint64_t{head_dim} / kQ8BlockValues * kQ8BlockBytes;
    case CacheFormat::FP8_E4M3: return head_dim;
  }
  // Not 0 bytes, which would size every buffer of a value that is no format as empty.
  throw InvalidArgument("cache_format = " + std::to_string(static_cast<std::uint32_t>(f)) + ": is no cache format (f32, f16, bf16, q8_0, fp8_e4m3)");
}

void check_cache_head_dim(CacheFormat f, std::uint32_t head_dim, std::string_view param) {
  // Every check of a format starts here: an enum value past the list is named before anything
  // sizes a buffer by it.
  require(cache_format_name(f) != "?", "cache_format", std::to_string(static_cast<std::uint32_t>(f)),
          "is no cache format (f32, f16, bf16, q8_0, fp8_e4m3)");
  const std::string name(param), fmt(cache_format_name(f));
  require(head_dim > 0 && head_dim % 2 == 0, name, std::to_string(head_dim), "must be even and > 0");
  if (f == CacheFormat::Q8_0)
    require(head_dim % kQ8BlockValues == 0, name, std::to_string(head_dim),
            "must be a multiple of 32 for a q8_0 cache (ggml's blocks of 32 values along head_dim)");
}

void check_cache_scales(CacheFormat f, std::span<const float> scales, std::uint32_t kv_heads, std::string_view param) {
  const std::string name(param);
  if (!cache_format_scaled(f)) {
    require(scales.empty(), name, std::to_string(scales.size()) + " values",
            "must be empty: a " + std::string(cache_format_name(f)) + " cache has no scales (only fp8_e4m3 has)");
    return;
  }
  require(scales.size() == kv_heads, name, std::to_string(scales.size()) + " values",
          "must hold one float32 scale per kv head (kv_heads = " + std::to_string(kv_heads) + ") for an fp8_e4m3 cache");
  for (std::size_t h = 0; h < scales.size(); ++h)
    require(std::isfinite(scales[h]) && scales[h] > 0.0f && std::isfinite(1.0f / scales[h]), name + "[" + std::to_string(h) + "]",
            detail::number_text(scales[h]), "must be finite and > 0 (with a finite 1 / scale)");
}

std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t{b} << 16); }

std::vector<std::uint16_t> to_bf16(std::span<const float> values) {
  std::vector<std::uint16_t> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), float_to_bf16);
  return out;
}

std::vector<float> from_bf16(std::span<const std::uint16_t> values) {
  std::vector<float> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), bf16_to_float);
  return out;
}

std::uint8_t float_to_fp8_e4m3(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;                              // NaN
  if (a >= std::bit_cast<std::uint32_t>(kFp8E4M3Max)) return sign | 0x7eu;  // saturate (inf too)
  if (a < 0x3c800000u) {  // below 2^-6: subnormal steps of 2^-9 (512 * a exact); 8 is the smallest normal
    const float q = std::nearbyint(std::bit_cast<float>(a) * 512.0f);  // the default rounding: to nearest even
    return sign | static_cast<std::uint8_t>(q);
  }
  // Normal: keep 3 mantissa bits, rounding the 20 dropped ones to nearest even; rebias 127 -> 7.
  const std::uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  return sign | static_cast<std::uint8_t>(r - ((127u - 7u) << 3));
}

float fp8_e4m3_to_float(std::uint8_t b) {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const std::uint32_t e = (b >> 3) & 15u, m = b & 7u;
  if (e == 15 && m == 7) return std::copysign(std::nanf(""), sign);
  if (e == 0) return sign * static_cast<float>(m) * (1.0f / 512.0f);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, static_cast<int>(e) - 7);
}

namespace {

// roundf: half away from zero.
float round_half_away(float x) { return std::round(x); }

void check_row(CacheFormat f, std::size_t values, std::size_t bytes) {
  check_cache_head_dim(f, static_cast<std::uint32_t>(values), "row values");
  require(bytes == cache_row_bytes(f, static_cast<std::uint32_t>(values)), "row bytes", std::to_string(bytes),
          "must be cache_row_bytes(" + std::string(cache_format_name(f)) + ", " + std::to_string(values) + ")");
}

}  // namespace

void encode_cache_row(CacheFormat f, std::span<const float> row, std::span<std::uint8_t> out, float scale) {
  check_row(f, row.size(), out.size());
  const std::size_t n = row.size();
  switch (f) {
    case CacheFormat::F32: std::memcpy(out.data(), row.data(), n * 4); return;
    case CacheFormat::F16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = float_to_half(row[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      return;
    case CacheFormat::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = float_to_bf16(row[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      return;
    case CacheFormat::Q8_0:
      for (std::size_t blk = 0; blk < n / kQ8BlockValues; ++blk) {
        const float* x = row.data() + blk * kQ8BlockValues;
        std::uint8_t* y = out.data() + blk * kQ8BlockBytes;
        // ggml's bytes for finite blocks. Its own leave a NaN or an infinity to the order of its
        // max and to an undefined float-to-int8 conversion; here such a block keeps the NaN (or
        // +inf) in d and stores q = 0, so that every value of it decodes to NaN (d * 0). A d below
        // float32's smallest normal (largest |x| under about 1.5e-36) takes id = 0, so q = 0: its
        // 1 / d may overflow (ggml's conversion of the infinite x * id is undefined), a device that
        // flushes subnormals sees d = 0, and its binary16 d is 0 whatever q holds.
        float amax = 0.0f;
        bool nan = false;
        for (std::uint32_t j = 0; j < kQ8BlockValues; ++j) {
          if (std::isnan(x[j])) nan = true;
          else amax = std::max(amax, std::fabs(x[j]));
        }
        const float d = nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
        const float id = std::isnormal(d) ? 1.0f / d : 0.0f;
        const std::uint16_t dh = float_to_half(d);
        std::memcpy(y, &dh, 2);
        for (std::uint32_t j = 0; j < kQ8BlockValues; ++j) {
          const float q = round_half_away(x[j] * id);  // within +-127 where finite
          y[2 + j] = std::isnan(q) ? 0 : static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
        }
      }
      return;
    case CacheFormat::FP8_E4M3: {
      const float inv = 1.0f / scale;
      for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp8_e4m3(row[i] * inv);
      return;
    }
  }
}

void decode_cache_row(CacheFormat f, std::span<const std::uint8_t> in, std::span<float> row, float scale) {
  check_row(f, row.size(), in.size());
  const std::size_t n = row.size();
  switch (f) {
    case CacheFormat::F32: std::memcpy(row.data(), in.data(), n * 4); return;
    case CacheFormat::F16:
    case CacheFormat::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, in.data() + 2 * i, 2);
        row[i] = f == CacheFormat::F16 ? half_to_float(h) : bf16_to_float(h);
      }
      return;
    case CacheFormat::Q8_0:
      for (std::size_t blk = 0; blk < n / kQ8BlockValues; ++blk) {
        const std::uint8_t* y = in.data() + blk * kQ8BlockBytes;
        std::uint16_t dh;
        std::memcpy(&dh, y, 2);
        const float d = half_to_float(dh);
        for (std::uint32_t j = 0; j < kQ8BlockValues; ++j)
          row[blk * kQ8BlockValues + j] = d * static_cast<float>(static_cast<std::int8_t>(y[2 + j]));
      }
      return;
    case CacheFormat::FP8_E4M3:
      for (std::size_t i = 0; i < n; ++i) row[i] = fp8_e4m3_to_float(in[i]) * scale;
      return;
  }
}

}  // namespace relpos

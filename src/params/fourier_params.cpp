// SinusoidalParams and FourierParams: the checks, and the wavelengths of a vector size.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "params/checks.hpp"
#include "relpos/fourier.hpp"

namespace relpos {
namespace {

constexpr std::int64_t kMaxPos = std::numeric_limits<std::int32_t>::max();

void require_vector_size(std::uint32_t d, const char* name) {
  detail::require(d >= 2 && d % 2 == 0, name, std::to_string(d), "must be even and >= 2 (cos half, sin half)");
}

void require_wavelength(double w, const std::string& name, const std::string& value) {
  detail::require(std::isfinite(w) && static_cast<float>(w) > 1.0f && std::isfinite(static_cast<float>(w)), name, value,
                  "the max wavelength W must be a finite float32 > 1");
}

}  // namespace

void SinusoidalParams::validate() const {
  using detail::require;
  require(positions >= 1, "positions", std::to_string(positions), "must be >= 1");
  require_vector_size(vector_size, "vector_size");
  require_wavelength(wavelength(), "max_wavelength", std::to_string(max_wavelength));
  require(offset > -kMaxPos && offset < kMaxPos, "offset", std::to_string(offset), "puts positions outside +-(2^31 - 2)");
  require(offset + positions - 1 < kMaxPos, "positions", std::to_string(positions) + " (offset = " + std::to_string(offset) + ")",
          "puts the last position beyond 2^31 - 2");
  const std::uint64_t n = std::uint64_t{positions} * vector_size;
  require(n <= 0xffffffffull, "positions * vector_size", std::to_string(n), "must be < 2^32");
}

void FourierParams::validate() const {
  using detail::require;
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(queries >= 1, "queries", std::to_string(queries), "must be >= 1");
  require(keys >= 1, "keys", std::to_string(keys), "must be >= 1");
  require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
  require_vector_size(vector_size, "vector_size");
  require_wavelength(wavelength(), "max_keys", std::to_string(max_keys));
  require(query_offset.has_value() || keys >= queries, "keys", std::to_string(keys),
          "must be >= queries = " + std::to_string(queries) + " unless query_offset is given (meliad's default offset is keys - queries)");
  require(keys - 1 < kMaxPos, "keys", std::to_string(keys), "puts key positions beyond 2^31 - 2");
  const std::int64_t off = offset();
  const std::int64_t rp_min = -(std::int64_t{queries} - 1) - off, rp_max = std::int64_t{keys} - 1 - off;
  require(off > -kMaxPos && off < kMaxPos && rp_min > -kMaxPos && rp_max < kMaxPos && off + queries - 1 < kMaxPos,
          "query_offset", std::to_string(off), "puts positions or relative positions outside +-(2^31 - 2)");
  const std::uint64_t row = std::uint64_t{row_len()} * heads;
  require(row <= 0xffffffffull, "heads * (queries + keys - 1)", std::to_string(row), "must be < 2^32");
  const std::uint64_t rows = detail::saturated_product({batch, heads, queries});
  require(rows <= 0xffffffffull, "batch * heads * queries", detail::product_text(rows), "must be < 2^32");
  detail::checked_elements({batch, heads, queries, keys}, "batch * heads * queries * keys");
}

std::vector<float> fourier_wavelengths(std::uint32_t vector_size, double max_wavelength) {
  require_vector_size(vector_size, "vector_size");
  require_wavelength(max_wavelength, "max_wavelength", std::to_string(max_wavelength));
  const std::uint32_t half = vector_size / 2;
  const float w = static_cast<float>(max_wavelength);
  std::vector<float> out(half);
  for (std::uint32_t p = 0; p < half; ++p) {
    const float t = static_cast<float>(p) / static_cast<float>(half);
    out[p] = static_cast<float>(std::pow(static_cast<double>(w), static_cast<double>(t)));
  }
  return out;
}

std::vector<float> fourier_default_rotation(const FourierParams& p) {
  p.validate();
  const std::uint32_t half = p.vector_size / 2;
  std::vector<float> rot(std::size_t{p.heads} * p.vector_size, 0.0f);
  const float scale = static_cast<float>(2.0 / p.vector_size);
  for (std::uint32_t h = 0; h < p.heads; ++h)
    for (std::uint32_t q = 0; q < half; ++q) rot[std::size_t{h} * p.vector_size + q] = scale;
  return rot;
}

}  // namespace relpos

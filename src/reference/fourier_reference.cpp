// CPU reference for the sinusoidal encoding and the Fourier relative bias, straight from docs/fourier.md.
// Values are computed in float64 and rounded once to float32.
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>
#include <string>

#include "params/checks.hpp"
#include "relpos/fourier.hpp"

namespace relpos {

namespace {

// [N, d] with cos_sin(pos, w_p) giving the (cos, sin) pair of each position and wavelength.
template <class CosSin>
std::vector<float> encode(const SinusoidalParams& p, CosSin&& cos_sin) {
  p.validate();
  const auto w = fourier_wavelengths(p.vector_size, p.wavelength());
  const std::uint32_t half = p.vector_size / 2;
  std::vector<float> out(std::size_t{p.positions} * p.vector_size);
  for (std::uint32_t k = 0; k < p.positions; ++k) {
    float* row = &out[std::size_t{k} * p.vector_size];
    for (std::uint32_t q = 0; q < half; ++q) {
      const auto [c, s] = cos_sin(p.offset + k, w[q]);
      row[q] = static_cast<float>(c);
      row[half + q] = static_cast<float>(s);
    }
  }
  return out;
}

// π·pos/w in float64: whole periods 2w are taken out exactly (remainder) before the division,
// so the angle keeps float64 precision at any |pos| < 2^31.
double exact_angle(std::int64_t pos, float w) {
  return std::numbers::pi * (std::remainder(static_cast<double>(pos), 2.0 * w) / w);
}

}  // namespace

std::vector<float> sinusoidal_reference(const SinusoidalParams& p) {
  return encode(p, [](std::int64_t pos, float w) {
    const double a = exact_angle(pos, w);
    return std::pair{std::cos(a), std::sin(a)};
  });
}

std::vector<float> sinusoidal_float32_reference(const SinusoidalParams& p) {
  return encode(p, [](std::int64_t pos, float w) {
    const float angle = static_cast<float>(pos) * (std::numbers::pi_v<float> / w);
    // NumPy's float32 sin/cos are within an ulp or so of the exact function of the float32 angle.
    return std::pair{std::cos(static_cast<double>(angle)), std::sin(static_cast<double>(angle))};
  });
}

namespace {

void check_rotation(const FourierParams& p, std::size_t size) {
  const std::size_t need = std::size_t{p.heads} * p.vector_size;
  detail::require(size == need, "rotation", std::to_string(size) + " values",
                  "must hold [heads, vector_size] = " + std::to_string(p.heads) + " x " + std::to_string(p.vector_size) + " = " +
                      std::to_string(need));
}

// [heads, Q + K - 1] in float64.
std::vector<double> distance_row(const FourierParams& p, std::span<const float> rotation) {
  p.validate();
  check_rotation(p, rotation.size());
  const std::uint32_t half = p.vector_size / 2, len = p.row_len();
  const auto w = fourier_wavelengths(p.vector_size, p.wavelength());
  const std::int64_t rp_first = -(std::int64_t{p.queries} - 1) - p.offset();
  std::vector<double> row(std::size_t{p.heads} * len, 0.0);
  for (std::uint32_t r = 0; r < len; ++r) {
    const std::int64_t rp = rp_first + r;
    for (std::uint32_t q = 0; q < half; ++q) {
      const double angle = exact_angle(rp, w[q]);
      const double c = std::cos(angle), s = std::sin(angle);
      for (std::uint32_t h = 0; h < p.heads; ++h) {
        const float* ab = &rotation[std::size_t{h} * p.vector_size];
        row[std::size_t{h} * len + r] += ab[q] * c + ab[half + q] * s;
      }
    }
  }
  return row;
}

// bias(h, i, j) = row[h][(Q - 1 - i) + j]: rp = j - i - offset.
template <class F>
void for_each_bias(const FourierParams& p, const std::vector<double>& row, F&& f) {
  const std::uint32_t len = p.row_len();
  for (std::uint32_t h = 0; h < p.heads; ++h)
    for (std::uint32_t i = 0; i < p.queries; ++i) {
      const double* window = &row[std::size_t{h} * len + (p.queries - 1 - i)];
      for (std::uint32_t j = 0; j < p.keys; ++j) f((std::size_t{h} * p.queries + i) * p.keys + j, window[j]);
    }
}

}  // namespace

std::vector<float> fourier_distance_row_reference(const FourierParams& p, std::span<const float> rotation) {
  const auto row = distance_row(p, rotation);
  return std::vector<float>(row.begin(), row.end());
}

std::vector<float> fourier_bias_reference(const FourierParams& p, std::span<const float> rotation) {
  const auto row = distance_row(p, rotation);
  std::vector<float> out(std::size_t{p.heads} * p.queries * p.keys);
  for_each_bias(p, row, [&](std::size_t e, double v) { out[e] = static_cast<float>(v); });
  return out;
}

std::vector<float> fourier_bias_einsum_reference(const FourierParams& p, std::span<const float> rotation) {
  p.validate();
  check_rotation(p, rotation.size());
  const std::uint32_t d = p.vector_size, half = d / 2;
  const auto w = fourier_wavelengths(d, p.wavelength());
  auto encode = [&](std::int64_t pos) {
    std::vector<double> v(d);
    for (std::uint32_t q = 0; q < half; ++q) {
      const double angle = exact_angle(pos, w[q]);
      v[q] = std::cos(angle);
      v[half + q] = std::sin(angle);
    }
    return v;
  };
  std::vector<std::vector<double>> ks(p.keys);
  for (std::uint32_t j = 0; j < p.keys; ++j) ks[j] = encode(j);
  std::vector<float> out(std::size_t{p.heads} * p.queries * p.keys);
  for (std::uint32_t i = 0; i < p.queries; ++i) {
    const auto qs = encode(p.offset() + i);
    for (std::uint32_t h = 0; h < p.heads; ++h) {
      const float* a = &rotation[std::size_t{h} * d];
      const float* b = a + half;
      std::vector<double> rot(d);  // [a·qx - b·qy, b·qx + a·qy]
      for (std::uint32_t q = 0; q < half; ++q) {
        rot[q] = a[q] * qs[q] - b[q] * qs[half + q];
        rot[half + q] = b[q] * qs[q] + a[q] * qs[half + q];
      }
      for (std::uint32_t j = 0; j < p.keys; ++j) {
        double dot = 0.0;
        for (std::uint32_t e = 0; e < d; ++e) dot += rot[e] * ks[j][e];
        out[(std::size_t{h} * p.queries + i) * p.keys + j] = static_cast<float>(dot);
      }
    }
  }
  return out;
}

void fourier_bias_add_reference(const FourierParams& p, std::span<const float> rotation, std::span<float> logits) {
  const auto row = distance_row(p, rotation);
  const std::size_t per_batch = std::size_t{p.heads} * p.queries * p.keys;
  detail::require(logits.size() == per_batch * p.batch, "logits", std::to_string(logits.size()) + " values",
                  "must hold batch * heads * queries * keys = " + std::to_string(per_batch * p.batch));
  for (std::size_t b = 0; b < p.batch; ++b)
    for_each_bias(p, row, [&](std::size_t e, double v) {
      float& x = logits[b * per_batch + e];
      x = static_cast<float>(static_cast<double>(x) + v);
    });
}

// The phase is exact to 2^-32 turns; the reduced angle |θ| <= π/4 is formed with three float32
// roundings (<= 1.5 ulp of π/4 = 9e-8); sin/cos on that range add a few float32 ulps (2e-7
// allowed; llvmpipe measured 1.2e-7 in all); the reference is itself rounded to float32 (3e-8).
double sinusoidal_error_bound() { return 3.5e-7; }

double fourier_error_bound(const FourierParams& p, std::span<const float> rotation, FourierPath path) {
  p.validate();
  detail::require_one_of(path, {FourierPath::Direct, FourierPath::Distance}, "path", "must be Direct or Distance");
  check_rotation(p, rotation.size());
  double s = 0;  // max over heads of Σ|rotation|: bounds every term's magnitude
  for (std::uint32_t h = 0; h < p.heads; ++h) {
    double sum = 0;
    for (std::uint32_t e = 0; e < p.vector_size; ++e) sum += std::abs(rotation[std::size_t{h} * p.vector_size + e]);
    s = std::max(s, sum);
  }
  constexpr double ulp = 0x1p-24;  // one float32 rounding, relative
  const double enc = sinusoidal_error_bound();
  // Per distance: each term a·cos + b·sin carries (|a| + |b|)·enc, the float32 sum of d/2 terms
  // at most (d/2)·2^-24 of Σ(|a| + |b|), and the result is rounded twice more (sum, output).
  if (path == FourierPath::Distance) return s * (enc + (p.vector_size / 2 + 2) * ulp);
  // Direct: the query and the key encodings each carry enc, the rotation a·qx - b·qy rounds twice,
  // and the d-long float32 dot product adds up to d·2^-24 of the terms' magnitudes.
  return s * (2 * enc + (p.vector_size + 4) * ulp);
}

}  // namespace relpos

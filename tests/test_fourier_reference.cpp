// The CPU reference of the sinusoidal encoding and the Fourier bias against NumPy-computed and
// hand-computed values (tests/data/fourier_values.txt) and meliad's properties at initialisation.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cmath>
#include <numbers>
#include <random>

#include "support/expect.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::data_lines;
using relpos::test::expect_invalid;
using relpos::test::random_floats;

namespace {

std::uint32_t u32(const std::string& s) { return static_cast<std::uint32_t>(std::stoul(s)); }

FourierParams fourier(std::uint32_t h, std::uint32_t q, std::uint32_t k, std::uint32_t d, std::uint32_t max_keys) {
  FourierParams p;
  p.heads = h;
  p.queries = q;
  p.keys = k;
  p.vector_size = d;
  p.max_keys = max_keys;
  return p;
}

}  // namespace

TEST(FourierReference, WavelengthsMatchNumPy) {
  int checked = 0;
  for (const auto& w : data_lines("fourier_values.txt")) {
    if (w[0] != "wavelength") continue;
    const auto got = fourier_wavelengths(u32(w[1]), std::stod(w[2]));
    EXPECT_EQ(got.at(u32(w[3])), std::stof(w[4])) << "d=" << w[1] << " W=" << w[2] << " p=" << w[3];
    ++checked;
  }
  EXPECT_EQ(checked, 17);
  EXPECT_EQ(fourier_wavelengths(128, 2048).front(), 1.0f);  // the first half-wave is one position
}

TEST(FourierReference, SinusoidalMatchesNumPyValues) {
  int checked = 0;
  for (const auto& w : data_lines("fourier_values.txt")) {
    if (w[0] != "sinusoidal") continue;
    SinusoidalParams p{u32(w[1]), u32(w[2]), std::stoll(w[3]), std::stod(w[4])};
    const auto enc = sinusoidal_reference(p);
    const double want = std::stod(w[7]);
    // The reference is float64 rounded once to float32: within half a float32 ulp of the value.
    EXPECT_NEAR(enc.at(u32(w[5]) * p.vector_size + u32(w[6])), want, std::ldexp(1.0, -25)) << "N=" << w[1] << " k=" << w[5] << " c=" << w[6];
    ++checked;
  }
  EXPECT_EQ(checked, 5 * 8 + 3 * 6 + 4 * 4);
}

TEST(FourierReference, SinusoidalLayoutAndDefaultWavelength) {
  SinusoidalParams p{6, 10, 0, 0.0};
  EXPECT_EQ(p.wavelength(), 12.0);  // meliad: W defaults to 2N
  const auto enc = sinusoidal_reference(p);
  const auto w = fourier_wavelengths(10, 12.0);
  for (std::uint32_t k = 0; k < 6; ++k)
    for (std::uint32_t q = 0; q < 5; ++q) {
      const double a = std::numbers::pi * k / w[q];
      EXPECT_NEAR(enc[k * 10 + q], std::cos(a), 1e-7);      // cos half first
      EXPECT_NEAR(enc[k * 10 + 5 + q], std::sin(a), 1e-7);  // then sin, not interleaved
    }
}

// meliad's own float32 arithmetic drifts from the exact encoding as positions grow: the float32
// angle pos·(π/w) carries about |angle|·2^-23 of error. The reference stays exact.
TEST(FourierReference, Float32AngleErrorGrowsWithPosition) {
  auto max_diff = [](std::int64_t offset) {
    SinusoidalParams p{64, 128, offset, 2048.0};
    const auto exact = sinusoidal_reference(p), f32 = sinusoidal_float32_reference(p);
    double m = 0;
    for (std::size_t e = 0; e < exact.size(); ++e) m = std::max(m, std::abs(double(exact[e]) - f32[e]));
    return m;
  };
  EXPECT_LT(max_diff(0), 1e-4);
  EXPECT_GT(max_diff(100000), 1e-3);
}

TEST(FourierReference, ClosedFormMatchesDataFile) {
  int checked = 0;
  for (const auto& w : data_lines("fourier_values.txt")) {
    if (w[0] != "bias") continue;
    const std::uint32_t d = u32(w[1]);
    const std::int64_t rp = std::stoll(w[3]);
    std::vector<float> rot(d);
    for (std::uint32_t e = 0; e < d; ++e) rot[e] = std::stof(w[4 + e]);
    // One query at position -rp, one key at 0: the row holds just that rp.
    FourierParams p = fourier(1, 1, 1, d, u32(w[2]));
    p.query_offset = -rp;
    const auto row = fourier_distance_row_reference(p, rot);
    ASSERT_EQ(row.size(), 1u);
    EXPECT_NEAR(row[0], std::stod(w[4 + d]), 4e-7) << "d=" << d << " rp=" << rp;
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

// meliad's einsum (encodings of absolute positions, rotation, dot product) and the closed form
// Σ a cos + b sin are the same function of rp: random rotations, Q != K, several offsets.
TEST(FourierReference, EinsumEqualsClosedForm) {
  std::mt19937 rng(11);
  for (auto [q, k, d, m, off] : {std::tuple{5u, 9u, 8u, 16u, std::optional<std::int64_t>{}}, {7u, 3u, 16u, 1024u, std::optional<std::int64_t>{-2}},
                                 {4u, 4u, 6u, 3u, std::optional<std::int64_t>{1'000'000}}, {1u, 40u, 128u, 1024u, std::optional<std::int64_t>{}}}) {
    FourierParams p = fourier(3, q, k, d, m);
    p.query_offset = off;
    const auto rot = random_floats(rng, std::size_t{3} * d, -1.0f, 1.0f);
    const auto a = fourier_bias_einsum_reference(p, rot), b = fourier_bias_reference(p, rot);
    EXPECT_LT(normalised_error(a, b), 1e-6) << "Q=" << q << " K=" << k << " d=" << d;
  }
}

TEST(FourierReference, PropertiesAtInitialisation) {
  FourierParams p = fourier(2, 300, 300, 128, 1024);
  const auto rot = fourier_default_rotation(p);
  EXPECT_EQ(rot[0], 2.0f / 128);
  EXPECT_EQ(rot[64], 0.0f);
  const auto row = fourier_distance_row_reference(p, rot);
  const std::uint32_t len = p.row_len(), zero = p.queries - 1;  // offset 0: rp = r - (Q - 1)
  for (std::uint32_t h = 0; h < 2; ++h) {
    EXPECT_NEAR(row[h * len + zero], 1.0f, 1e-6);  // Σ 2/d · cos 0 = 1
    for (std::uint32_t r = 0; r < len; ++r) {
      EXPECT_LE(std::abs(row[h * len + r]), 1.0f + 1e-6f);
      const std::uint32_t mirror = 2 * zero - r;  // rp -> -rp
      EXPECT_EQ(row[h * len + r], row[h * len + mirror]) << "symmetric when b = 0, r=" << r;
    }
  }
  const auto bias = fourier_bias_reference(p, rot);
  for (std::uint32_t i = 0; i < p.queries; ++i) EXPECT_NEAR(bias[i * p.keys + i], 1.0f, 1e-6);  // the diagonal is rp = 0
}

TEST(FourierReference, DefaultOffsetAlignsLastQueryWithLastKey) {
  std::mt19937 rng(2);
  FourierParams p = fourier(2, 3, 10, 8, 8);
  const auto rot = random_floats(rng, 16);
  FourierParams explicit_p = p;
  explicit_p.query_offset = 7;
  EXPECT_EQ(fourier_bias_reference(p, rot), fourier_bias_reference(explicit_p, rot));
}

TEST(FourierReference, AddAccumulatesEveryBatch) {
  std::mt19937 rng(4);
  FourierParams p = fourier(2, 4, 6, 8, 16);
  p.batch = 3;
  const auto rot = random_floats(rng, 16);
  const auto bias = fourier_bias_reference(p, rot);
  std::vector<float> logits = random_floats(rng, 3 * bias.size()), want = logits;
  fourier_bias_add_reference(p, rot, logits);
  for (std::size_t e = 0; e < logits.size(); ++e) EXPECT_NEAR(logits[e], want[e] + bias[e % bias.size()], 1e-6);
}

TEST(FourierReference, InvalidParameters) {
  const std::vector<float> rot(2 * 8, 0.0f);
  FourierParams p = fourier(2, 4, 6, 8, 16);
  FourierParams bad = p;
  bad.vector_size = 7;
  expect_invalid([&] { bad.validate(); }, "vector_size");
  bad = p;
  bad.max_keys = 0;  // W = 0 <= 1
  expect_invalid([&] { bad.validate(); }, "max_keys");
  bad = p;
  bad.keys = 3;  // K < Q without an explicit offset
  expect_invalid([&] { bad.validate(); }, "query_offset");
  bad.query_offset = 0;
  EXPECT_NO_THROW(bad.validate());
  expect_invalid([&] { fourier_bias_reference(p, std::vector<float>(15)); }, "rotation");
  bad = p;
  bad.query_offset = std::int64_t{1} << 31;
  expect_invalid([&] { bad.validate(); }, "query_offset");

  expect_invalid([] { SinusoidalParams{4, 5, 0, 0.0}.validate(); }, "vector_size");
  expect_invalid([] { SinusoidalParams{4, 0, 0, 0.0}.validate(); }, "vector_size");
  expect_invalid([] { SinusoidalParams{4, 8, 0, 1.0}.validate(); }, "max_wavelength");
  expect_invalid([] { SinusoidalParams{4, 8, 0, -3.0}.validate(); }, "max_wavelength");
  expect_invalid([] { SinusoidalParams{4, 8, 0, std::nan("")}.validate(); }, "max_wavelength");
  expect_invalid([] { SinusoidalParams{0, 8, 0, 0.0}.validate(); }, "positions");
  expect_invalid([] { SinusoidalParams{4, 8, 2147483645, 0.0}.validate(); }, "offset");
}

// The CPU reference of ALiBi against Press et al.'s slopes, a published causal mask and independently computed
// float64 slopes (tests/data/gen_alibi_rope.py).
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cmath>
#include <limits>

#include "support/expect.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::data_lines;
using relpos::test::expect_invalid;

namespace {

AlibiParams heads(std::uint32_t n, AlibiSlopeRule rule = AlibiSlopeRule::Interleaved, double max_bias = 8.0) {
  AlibiParams p;
  p.heads = n;
  p.rule = rule;
  p.max_bias = max_bias;
  return p;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST(AlibiReference, SlopesFromTheSpec) {
  // Powers of two are exact in float32, so these compare with ==.
  EXPECT_EQ(alibi_slopes(heads(1)), (std::vector<float>{0x1p-8f}));
  EXPECT_EQ(alibi_slopes(heads(6)), (std::vector<float>{0x1p-2f, 0x1p-4f, 0x1p-6f, 0x1p-8f, 0x1p-1f, 0x1p-3f}));
  EXPECT_EQ(alibi_slopes(heads(8)), (std::vector<float>{0x1p-1f, 0x1p-2f, 0x1p-3f, 0x1p-4f, 0x1p-5f, 0x1p-6f, 0x1p-7f, 0x1p-8f}));
  const std::vector<float> twelve = alibi_slopes(heads(12));
  ASSERT_EQ(twelve.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(twelve[h], std::ldexp(1.0f, -(h + 1)));
  for (int k = 0; k < 4; ++k) EXPECT_EQ(twelve[8 + k], static_cast<float>(std::exp2(-0.5 - k))) << "2^-" << 0.5 + k;
  // meliad does not interleave: 2^(-8h/6) for six heads.
  const std::vector<float> meliad = alibi_slopes(heads(6, AlibiSlopeRule::Geometric));
  for (int h = 0; h < 6; ++h) EXPECT_EQ(meliad[h], static_cast<float>(std::exp2(-8.0 * (h + 1) / 6.0)));
  // max_bias scales the exponent.
  EXPECT_EQ(alibi_slopes(heads(4, AlibiSlopeRule::Interleaved, 4.0)), (std::vector<float>{0x1p-1f, 0x1p-2f, 0x1p-3f, 0x1p-4f}));
}

TEST(AlibiReference, SlopesMatchIndependentFloat64) {
  int checked = 0;
  for (const auto& w : data_lines("alibi_slopes.txt")) {
    const AlibiParams p = heads(static_cast<std::uint32_t>(std::stoul(w[1])),
                                w[0] == "press" ? AlibiSlopeRule::Interleaved : AlibiSlopeRule::Geometric, std::stod(w[2]));
    const std::vector<float> got = alibi_slopes(p);
    ASSERT_EQ(got.size() + 3, w.size()) << w[0] << " " << w[1];
    // Both sides round the same double to float32 once.
    for (std::size_t h = 0; h < got.size(); ++h, ++checked)
      EXPECT_EQ(got[h], static_cast<float>(std::stod(w[3 + h]))) << w[0] << " n=" << w[1] << " max_bias=" << w[2] << " h=" << h;
  }
  EXPECT_GT(checked, 500);
}

TEST(AlibiReference, GivenSlopesReplaceTheRule) {
  AlibiParams p = heads(3);
  p.slopes = {0.5f, -0.25f, 3.0f};
  EXPECT_EQ(alibi_slopes(p), p.slopes);
}

TEST(AlibiReference, SeedMaskTimesSlope) {
  const auto rows = data_lines("alibi_seed_mask.txt");
  AlibiParams p = heads(2);
  p.queries = p.keys = 4;
  const std::vector<float> bias = alibi_bias_reference(p);
  const std::vector<float> m = alibi_slopes(p);
  for (std::uint32_t h = 0; h < 2; ++h)
    for (std::uint32_t i = 0; i < 4; ++i)
      for (std::uint32_t j = 0; j < 4; ++j) {
        const float mask = std::stof(rows[i][j]);
        EXPECT_EQ(bias[(h * 4 + i) * 4 + j], std::isinf(mask) ? -kInf : mask * m[h]) << "h=" << h << " i=" << i << " j=" << j;
      }
}

TEST(AlibiReference, SymmetricAndQueryOffset) {
  AlibiParams p = heads(1);
  p.causal = false;
  p.queries = 3;
  p.keys = 5;
  p.query_offset = 2;  // last query with last key
  const float m = 0x1p-8f;
  const std::vector<float> sym = alibi_bias_reference(p);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(sym[i * 5 + j], -m * std::abs(j - (i + 2))) << i << "," << j;
  p.causal = true;
  const std::vector<float> causal = alibi_bias_reference(p);
  EXPECT_EQ(causal[0 * 5 + 2], 0.0f);   // query 0 sits at position 2
  EXPECT_EQ(causal[0 * 5 + 3], -kInf);  // the future
  EXPECT_EQ(causal[2 * 5 + 0], -4 * m);
  EXPECT_EQ(causal[2 * 5 + 4], 0.0f);
}

TEST(AlibiReference, AddsIntoEveryBatch) {
  AlibiParams p = heads(3);
  p.queries = 4;
  p.keys = 6;
  p.batch = 2;
  p.causal = false;
  const std::vector<float> bias = alibi_bias_reference(p);
  std::vector<float> logits(2 * bias.size(), 1.5f);
  alibi_bias_add_reference(p, logits);
  for (std::size_t e = 0; e < bias.size(); ++e) {
    EXPECT_EQ(logits[e], 1.5f + bias[e]);
    EXPECT_EQ(logits[bias.size() + e], 1.5f + bias[e]);
  }
  std::vector<float> short_logits(bias.size());
  expect_invalid([&] { alibi_bias_add_reference(p, short_logits); }, "logits");
}

TEST(AlibiReference, InvalidParametersAreRejected) {
  AlibiParams ok = heads(4);
  ok.queries = ok.keys = 4;
  EXPECT_NO_THROW(ok.validate());
  AlibiParams p = ok;
  p.heads = 0;
  expect_invalid([&] { alibi_slopes(p); }, "heads");
  p.heads = 0xffffffffu;  // one slope each: 16 GiB
  expect_invalid([&] { alibi_slopes(p); }, "heads = 4294967295: must be <= 2^24");
  p = ok;
  p.max_bias = 0.0;
  expect_invalid([&] { alibi_slopes(p); }, "max_bias");
  p.max_bias = -1e-9;
  expect_invalid([&] { alibi_slopes(p); }, "max_bias = -1e-09: must be finite and > 0");
  p.max_bias = NAN;
  expect_invalid([&] { alibi_slopes(p); }, "max_bias");
  p = ok;
  p.slopes = {1.0f, 2.0f};
  expect_invalid([&] { alibi_slopes(p); }, "slopes");
  p.slopes = {1.0f, 2.0f, INFINITY, 1.0f};
  expect_invalid([&] { alibi_slopes(p); }, "slopes");
  p = ok;
  p.queries = 0;
  expect_invalid([&] { p.validate(); }, "queries");
  p = ok;
  p.keys = 0;
  expect_invalid([&] { p.validate(); }, "keys");
  p = ok;
  p.query_offset = 3'000'000'000ll;
  expect_invalid([&] { p.validate(); }, "query_offset");
  p = ok;
  p.batch = 1u << 31;
  expect_invalid([&] { p.validate(); }, "batch * heads * queries");
}

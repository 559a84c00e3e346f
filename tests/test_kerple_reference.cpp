// KERPLE's CPU reference: values worked by hand from the paper's two kernels, the causal mask, the
// window layout shared with every per-distance bias, and clear errors for parameters outside the
// kernels' domain.
#include <relpos/relpos.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/expect.hpp"

using namespace relpos;
using relpos::test::expect_invalid;

namespace {

KerpleParams two_heads(KerpleVariant v) {
  KerpleParams p;
  p.heads = 2;
  p.variant = v;
  p.r1 = {2.0f, 0.5f};
  p.r2 = {0.5f, 1.5f};
  return p;
}

}  // namespace

TEST(KerpleReference, ValuesOfBothKernels) {
  // log: -r1 * log(1 + r2 * |rp|)
  EXPECT_FLOAT_EQ(kerple_bias_value(2.0f, 0.5f, KerpleVariant::Log, -4), static_cast<float>(-2.0 * std::log(3.0)));
  EXPECT_FLOAT_EQ(kerple_bias_value(2.0f, 0.5f, KerpleVariant::Log, 4), static_cast<float>(-2.0 * std::log(3.0)));
  EXPECT_FLOAT_EQ(kerple_bias_value(1.0f, 1.0f, KerpleVariant::Log, 1), static_cast<float>(-std::log(2.0)));
  // power: -r1 * |rp|^r2
  EXPECT_EQ(kerple_bias_value(0.5f, 1.5f, KerpleVariant::Power, 9), -13.5f);
  EXPECT_EQ(kerple_bias_value(3.0f, 2.0f, KerpleVariant::Power, -7), -147.0f);
  EXPECT_EQ(kerple_bias_value(0.25f, 1.0f, KerpleVariant::Power, 1000), -250.0f);
  // Distance 0 is no penalty in both; tiny r2 * n keeps its precision (log1p, not log(1 + x)).
  EXPECT_EQ(kerple_bias_value(2.0f, 0.5f, KerpleVariant::Log, 0), 0.0f);
  EXPECT_EQ(kerple_bias_value(2.0f, 0.5f, KerpleVariant::Power, 0), 0.0f);
  EXPECT_FLOAT_EQ(kerple_bias_value(1.0f, 1e-9f, KerpleVariant::Log, 3), -3e-9f);
  // The farthest distance relpos indexes, 2^31 - 1.
  EXPECT_FLOAT_EQ(kerple_bias_value(1.0f, 2.0f, KerpleVariant::Power, 2147483647), -4.611686e18f);
}

TEST(KerpleReference, WindowLayoutAndCausalMask) {
  for (KerpleVariant v : {KerpleVariant::Log, KerpleVariant::Power}) {
    KerpleParams p = two_heads(v);
    p.queries = 3;
    p.keys = 5;
    p.query_offset = 2;  // last-aligned: query i at position i + 2
    for (bool causal : {false, true}) {
      p.causal = causal;
      const std::vector<float> out = kerple_bias_reference(p);
      ASSERT_EQ(out.size(), 2u * 3 * 5);
      for (std::uint32_t h = 0; h < 2; ++h)
        for (std::uint32_t i = 0; i < 3; ++i)
          for (std::uint32_t j = 0; j < 5; ++j) {
            const std::int64_t rp = static_cast<std::int64_t>(j) - i - 2;
            const float want = causal && rp > 0 ? -std::numeric_limits<float>::infinity() : kerple_bias_value(p.r1[h], p.r2[h], v, rp);
            EXPECT_EQ(out[(h * 3 + i) * 5 + j], want) << h << " " << i << " " << j;
          }
    }
  }
}

TEST(KerpleReference, AddIsOneFloatAddPerValueOverTheBatch) {
  KerpleParams p = two_heads(KerpleVariant::Power);
  p.queries = 2;
  p.keys = 3;
  p.batch = 2;
  const std::vector<float> bias = kerple_bias_reference(p);
  std::vector<float> logits(bias.size() * 2, 1.25f);
  kerple_bias_add_reference(p, logits);
  for (std::size_t e = 0; e < logits.size(); ++e) EXPECT_EQ(logits[e], 1.25f + bias[e % bias.size()]);
  std::vector<float> short_logits(bias.size());
  expect_invalid([&] { kerple_bias_add_reference(p, short_logits); }, "logits");
}

// Fused attention's bias mode computes the same values as the materialised bias.
TEST(KerpleReference, AttentionBiasEqualsTheMaterialisedBias) {
  KerpleParams k = two_heads(KerpleVariant::Log);
  k.queries = 4;
  k.keys = 9;
  k.query_offset = 5;
  AttentionParams p{.heads = 2, .kv_heads = 2, .queries = 4, .keys = 9, .head_dim = 4, .query_offset = 5, .bias = AttentionBias::Kerple};
  std::vector<float> params = k.r1;
  params.insert(params.end(), k.r2.begin(), k.r2.end());
  AttentionHostInputs in{};
  in.bias = params;
  EXPECT_EQ(attention_bias_reference(p, in), kerple_bias_reference(k));
}

TEST(KerpleReference, ParametersOutsideTheKernelsDomainAreRefused) {
  KerpleParams p = two_heads(KerpleVariant::Log);
  p.r1 = {1.0f};
  expect_invalid([&] { p.validate(); }, "r1");
  p = two_heads(KerpleVariant::Log);
  p.r1[1] = 0.0f;
  expect_invalid([&] { p.validate(); }, "r1[1] = 0: must be finite and > 0");  // the head, and the value as given
  p.r1[1] = -1e-7f;
  expect_invalid([&] { p.validate(); }, "r1[1] = -1.00000001e-07");
  p.r1[1] = std::numeric_limits<float>::infinity();
  expect_invalid([&] { p.validate(); }, "r1");
  p = two_heads(KerpleVariant::Log);
  p.r2[0] = -0.5f;
  expect_invalid([&] { p.validate(); }, "r2");
  p.r2[0] = std::nanf("");
  expect_invalid([&] { p.validate(); }, "r2");
  p = two_heads(KerpleVariant::Power);
  p.r2[1] = 2.5f;  // fine for log, outside (0, 2] for power
  expect_invalid([&] { p.validate(); }, "r2");
  p.r2[1] = std::nextafter(2.0f, 3.0f);
  expect_invalid([&] { p.validate(); }, "r2[1] = 2.00000024: must be in (0, 2] for the power variant");
  p.variant = KerpleVariant::Log;
  EXPECT_NO_THROW(p.validate());
  p.variant = static_cast<KerpleVariant>(7);
  expect_invalid([&] { p.validate(); }, "variant");
  p = two_heads(KerpleVariant::Log);
  p.queries = 0;
  expect_invalid([&] { p.validate(); }, "queries");
  p.queries = 1;
  p.query_offset = -(std::int64_t{1} << 31);
  expect_invalid([&] { p.validate(); }, "query_offset");
  // Fused attention checks the same parameters in its reference.
  AttentionParams a{.heads = 2, .kv_heads = 2, .queries = 1, .keys = 1, .head_dim = 4, .bias = AttentionBias::Kerple};
  const std::vector<float> q(8, 0.0f), kv(8, 0.0f), bad = {1.0f, -1.0f, 0.5f, 0.5f};
  AttentionHostInputs in{};
  in.q = q;
  in.k = kv;
  in.v = kv;
  in.bias = bad;
  expect_invalid([&] { (void)attention_reference(a, in); }, "r1");
}

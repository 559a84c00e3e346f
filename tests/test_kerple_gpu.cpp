// KERPLE on the GPU against the CPU reference: every float32 value within kerple_error_bound of
// the float64 reference (the GPU's log and pow are float32), f16 the float32 value rounded once,
// masked entries -inf; the kit's split paths; fused attention's kerple mode.
#include <relpos/relpos.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "support/distance_bias_checks.hpp"
#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_expansion;
using relpos::test::gpu_small_limits;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

// Both variants, r1 and r2 over several orders of magnitude, both directions, offsets
// first-aligned, last-aligned, decoding and far (distances up to ~3e6).
KerpleParams random_params(std::mt19937& rng) {
  std::uniform_int_distribution<int> coin(0, 1), size(1, 70);
  std::uniform_real_distribution<double> exponent(-8.0, 3.0);
  KerpleParams p;
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 12)(rng);
  p.variant = coin(rng) ? KerpleVariant::Log : KerpleVariant::Power;
  for (std::uint32_t h = 0; h < p.heads; ++h) {
    p.r1.push_back(static_cast<float>(std::exp2(exponent(rng))));
    p.r2.push_back(p.variant == KerpleVariant::Power ? std::uniform_real_distribution<float>(0.01f, 2.0f)(rng)
                                                     : static_cast<float>(std::exp2(exponent(rng))));
  }
  p.causal = coin(rng);
  p.queries = size(rng);
  p.keys = size(rng);
  p.query_offset = relpos::test::random_query_offset(rng, p.queries, p.keys, 3'000'000, 100);
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  return p;
}

std::string describe(const KerpleParams& p) {
  return "H=" + std::to_string(p.heads) + (p.variant == KerpleVariant::Log ? " log" : " power") + (p.causal ? " causal" : " symmetric") +
         " Q=" + std::to_string(p.queries) + " K=" + std::to_string(p.keys) + " off=" + std::to_string(p.query_offset) +
         " B=" + std::to_string(p.batch);
}

void expect_matches(Context& ctx, const KerpleParams& p, std::mt19937& rng) {
  SCOPED_TRACE(describe(p));
  relpos::test::expect_distance_bias_ops(
      ctx, p, rng, [&](std::uint32_t h, std::int64_t rp) { return static_cast<double>(kerple_bias_value(p.r1[h], p.r2[h], p.variant, rp)); },
      [&](std::uint32_t h, std::int64_t rp) { return kerple_error_bound(p.r1[h], p.r2[h], p.variant, rp); },
      [](Recorder& r, const KerpleParams& q, const Buffer& out, DType dtype) { kerple_bias(r, q, out, dtype); },
      [](Recorder& r, const KerpleParams& q, const Buffer& logits, DType dtype) { kerple_bias_add(r, q, logits, dtype); });
}

class KerpleGpu : public GpuTest {};

}  // namespace

TEST_F(KerpleGpu, RandomConfigurationsWithinTheErrorBound) {
  std::mt19937 rng(1301);
  for (int trial = 0; trial < 24; ++trial) expect_matches(gpu(), random_params(rng), rng);
}

TEST_F(KerpleGpu, BothExpansionPathsAndSplitPaths) {
  std::mt19937 rng(1302);
  for (DistanceExpansion path : {DistanceExpansion::Shader, DistanceExpansion::Copies}) {
    SCOPED_TRACE(path == DistanceExpansion::Copies ? "copies" : "shader");
    for (int trial = 0; trial < 6; ++trial) expect_matches(gpu_expansion(path), random_params(rng), rng);
  }
  for (int trial = 0; trial < 6; ++trial) expect_matches(gpu_small_limits(), random_params(rng), rng);
}

// More heads than one invocation of the row shader may loop over: split across dispatches.
TEST_F(KerpleGpu, ManyHeadsAreSplitAcrossDispatches) {
  KerpleParams p;
  p.heads = 70'000;
  p.r1.assign(p.heads, 0.5f);
  p.r2.assign(p.heads, 1.5f);
  for (std::uint32_t h = 0; h < p.heads; h += 997) p.r1[h] = 0.001f * static_cast<float>(h % 13 + 1);
  p.variant = KerpleVariant::Power;
  p.queries = 2;
  p.keys = 3;
  p.query_offset = 1;
  std::mt19937 rng(1304);
  expect_matches(gpu(), p, rng);
}

TEST_F(KerpleGpu, BadParametersAndBuffersAreRefusedBeforeRecording) {
  KerpleParams p;
  p.heads = 2;
  p.r1 = {1.0f, 1.0f};
  p.r2 = {0.5f, 3.0f};
  p.variant = KerpleVariant::Power;
  p.queries = p.keys = 4;
  Buffer out(gpu(), 2 * 16 * 4);
  Recorder r(gpu());
  expect_invalid([&] { kerple_bias(r, p, out); }, "r2");
  p.r2[1] = 1.0f;
  Buffer small(gpu(), 2 * 16 * 4 - 4);
  expect_invalid([&] { kerple_bias(r, p, small); }, "output buffer");
  expect_invalid([&] { kerple_bias(r, p, out, DType::I32); }, "out_dtype");
  EXPECT_EQ(r.dispatch_count(), 0u);
}

// Fused attention with the kerple bias against the reference: prefill, grouped-query decoding with
// split keys, a memory prefix, f16 storage.
TEST_F(KerpleGpu, FusedAttentionMatchesReference) {
  std::mt19937 rng(1303);
  struct Case { std::uint32_t b, h, hkv, q, k, d, m; std::int64_t off; bool causal; KerpleVariant v; DType dtype; };
  for (const Case& c : {Case{1, 4, 4, 33, 47, 32, 0, 14, true, KerpleVariant::Log, DType::F32},
                        Case{2, 8, 2, 1, 3000, 64, 0, 2999, true, KerpleVariant::Power, DType::F32},
                        Case{1, 2, 1, 9, 40, 16, 8, 0, false, KerpleVariant::Power, DType::F16}}) {
    AttentionParams p{.batch = c.b, .heads = c.h, .kv_heads = c.hkv, .queries = c.q, .keys = c.k, .head_dim = c.d, .dtype = c.dtype,
                      .query_offset = c.off, .causal = c.causal, .memory_prefix = c.m, .bias = AttentionBias::Kerple};
    p.kerple_variant = c.v;
    SCOPED_TRACE("B=" + std::to_string(c.b) + " H=" + std::to_string(c.h) + " K=" + std::to_string(c.k));
    auto stored = [&](std::vector<float> x) { return c.dtype == DType::F16 ? from_half(to_half(x)) : x; };
    const std::vector<float> q = stored(random_floats(rng, p.rows() * c.d, -1.0f, 1.0f));
    const std::vector<float> k = stored(random_floats(rng, std::size_t{c.b} * c.hkv * c.k * c.d, -1.0f, 1.0f));
    const std::vector<float> v = stored(random_floats(rng, k.size(), -1.0f, 1.0f));
    const std::vector<float> params = random_floats(rng, 2 * c.h, 0.05f, 0.5f);
    const AttentionResult want = attention_reference(p, {q, k, v, params, {}, {}, {}});
    Buffer bq = make_float_buffer(gpu(), q, c.dtype), bk = make_float_buffer(gpu(), k, c.dtype), bv = make_float_buffer(gpu(), v, c.dtype);
    Buffer bout(gpu(), want.out.size() * dtype_size(c.dtype)), blse(gpu(), want.lse.size() * 4), bparams = make_buffer(gpu(), params);
    AttentionBuffers b{.q = &bq, .k = &bk, .v = &bv, .out = &bout, .lse = &blse, .bias = &bparams};
    run(gpu(), [&](Recorder& r) { attention(r, p, b); });
    const double tol = c.dtype == DType::F16 ? 2e-3 : 2e-5;
    EXPECT_LE(normalised_error(download_floats(bout, want.out.size(), c.dtype), want.out), tol);
    EXPECT_LE(normalised_error(blse.download<float>(want.lse.size()), want.lse), 2e-5);
  }
}

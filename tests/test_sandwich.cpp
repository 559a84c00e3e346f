// Sandwich: the reference against values worked independently (glibc's cos of exactly
// representable angles, the paper's inner product of two sinusoidal embeddings), its mask and
// domain; the GPU bias, its add and its plan against the reference within sandwich_error_bound
// (the kit's split paths, many heads, long K, offsets near 2^31); fused attention's sandwich mode;
// the tool's `run sandwich-bias` and `run attention --bias sandwich`.
#include <relpos/relpos.hpp>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>

#include "support/distance_bias_checks.hpp"
#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/run_tool.hpp"
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

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- reference ---------------------------------------------------------------------------

// The reference's phase is rp·(ω / 2π) in long double, within |rp|·2^-64 turns (1e-10 radians at
// 2^31); the values below are exact to a few ulps.
constexpr double kPhaseTolerance = 2e-10;

// d' = 2 is one frequency, ω_0 = 1: S(rp) = cos(rp). glibc reduces any double argument exactly,
// and every rp below 2^31 is a double.
TEST(SandwichReference, OneFrequencyIsTheCosineOfTheDistance) {
  for (std::int64_t rp : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1}, std::int64_t{7}, std::int64_t{355}, std::int64_t{-104348},
                          std::int64_t{1} << 24, (std::int64_t{1} << 31) - 1, -((std::int64_t{1} << 31) - 1)})
    EXPECT_NEAR(sandwich_sum(2, rp), std::cos(static_cast<double>(rp)), kPhaseTolerance) << rp;
}

// d' = 4: ω_1 = 10000^(-1/2) = 1/100, so S(rp) = cos(rp) + cos(rp / 100); with rp = 100·n + m,
// cos(n + m/100) = cos(n)·cos(m/100) - sin(n)·sin(m/100), every argument exact or small.
TEST(SandwichReference, TwoFrequencies) {
  for (std::int64_t rp : {std::int64_t{0}, std::int64_t{3}, std::int64_t{-250}, std::int64_t{31416}, std::int64_t{2000000001}}) {
    const double n = static_cast<double>(rp / 100), m = static_cast<double>(rp % 100) / 100.0;
    const double slow = std::cos(n) * std::cos(m) - std::sin(n) * std::sin(m);
    EXPECT_NEAR(sandwich_sum(4, rp), std::cos(static_cast<double>(rp)) + slow, kPhaseTolerance) << rp;
  }
}

// The paper's definition: the inner product of the sinusoidal embeddings of positions i and j
// (sin and cos of position·ω_k for each k) is Σ_k cos((j - i)·ω_k), whatever i and j are.
TEST(SandwichReference, IsTheInnerProductOfTwoSinusoidalEmbeddings) {
  for (std::uint32_t dim : {2u, 8u, 64u, 128u})
    for (auto [i, j] : {std::pair{0, 0}, {3, 10}, {10, 3}, {100, 1}, {513, 2047}}) {
      double dot = 0.0;
      for (std::uint32_t k = 0; k < dim / 2; ++k) {
        const double w = std::pow(10000.0, -2.0 * k / dim);
        dot += std::sin(i * w) * std::sin(j * w) + std::cos(i * w) * std::cos(j * w);
      }
      EXPECT_NEAR(sandwich_sum(dim, j - i), dot, 1e-10) << "dim " << dim << " i " << i << " j " << j;
    }
}

// first_frequency = 1: the paper's sum over i = 1 ... d'/2, as NeMo's SandwichRelativePositionEmbedding
// computes it (inv_freq = 1 / 10000^(2 · arange(1, d'/2 + 1) / d')); its values at d' = 64, rp = 0 ... 3
// as numpy gives them from NeMo's formula (a trial, 2026-11-28), and d' = 2, one frequency of 1e-4.
TEST(SandwichReference, FromTheFirstFrequencyAsThePaperSumsIt) {
  const double nemo[] = {32.0, 31.376529, 29.720009, 27.577021};
  for (std::int64_t rp = 0; rp < 4; ++rp) {
    EXPECT_NEAR(sandwich_sum(64, rp, 1), nemo[rp], 5e-6) << rp;
    EXPECT_NEAR(sandwich_sum(64, -rp, 1), nemo[rp], 5e-6) << rp;
  }
  EXPECT_NEAR(sandwich_sum(64, 1, 0), 30.916834, 5e-6);  // the default's k = 0 ... 31 differ
  for (std::int64_t rp : {std::int64_t{0}, std::int64_t{7}, std::int64_t{-31416}, std::int64_t{2000000001}})
    EXPECT_NEAR(sandwich_sum(2, rp, 1), std::cos(static_cast<double>(rp) * 1e-4), 1e-9) << rp;
  for (std::uint32_t dim : {2u, 8u, 128u})
    for (std::int64_t rp : {std::int64_t{3}, std::int64_t{-250}, std::int64_t{100000}}) {
      double sum = 0.0;
      for (std::uint32_t i = 1; i <= dim / 2; ++i) sum += std::cos(static_cast<double>(rp) * std::pow(10000.0, -2.0 * i / dim));
      EXPECT_NEAR(sandwich_sum(dim, rp, 1), sum, 1e-9) << dim << " " << rp;
    }
  EXPECT_EQ(sandwich_bias_value(2.0f, 64, 3, 1), static_cast<float>(2.0 * sandwich_sum(64, 3, 1)));
}

TEST(SandwichReference, BiasIsScaledEvenAndMaskedAboveTheDiagonal) {
  SandwichParams p;
  p.heads = 2;
  p.dim = 16;
  p.scale = {0.5f, -2.0f};
  p.queries = 3;
  p.keys = 5;
  p.query_offset = 1;
  for (bool causal : {false, true}) {
    p.causal = causal;
    const std::vector<float> b = sandwich_bias_reference(p);
    ASSERT_EQ(b.size(), 2u * 3 * 5);
    for (std::uint32_t h = 0; h < 2; ++h)
      for (std::uint32_t i = 0; i < 3; ++i)
        for (std::uint32_t j = 0; j < 5; ++j) {
          const std::int64_t rp = static_cast<std::int64_t>(j) - i - 1;
          const float got = b[(h * 3 + i) * 5 + j];
          if (causal && rp > 0) {
            EXPECT_EQ(got, kNegInf);
            continue;
          }
          EXPECT_EQ(got, static_cast<float>(p.scale[h] * sandwich_sum(16, rp)));
          EXPECT_EQ(got, sandwich_bias_value(p.scale[h], 16, -rp));  // even in rp
        }
  }
  EXPECT_EQ(sandwich_bias_value(1.0f, 16, 0), 8.0f);  // d'/2 cosines of 0
}

TEST(SandwichReference, BadParametersAreRefused) {
  SandwichParams p;
  p.heads = 2;
  p.dim = 8;
  p.scale = {1.0f, 1.0f};
  p.validate();
  for (std::uint32_t dim : {0u, 3u, SandwichParams::kMaxDim + 2}) {
    SandwichParams bad = p;
    bad.dim = dim;
    expect_invalid([&] { bad.validate(); }, "dim");
  }
  SandwichParams bad = p;
  bad.first_frequency = 2;
  expect_invalid([&] { bad.validate(); }, "first_frequency = 2: must be 0 (k = 0 ... d'/2 - 1) or 1 (k = 1 ... d'/2)");
  bad = p;
  bad.scale = {1.0f};
  expect_invalid([&] { bad.validate(); }, "scale");
  bad.scale = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  expect_invalid([&] { bad.validate(); }, "scale");
  bad = p;
  bad.query_offset = std::int64_t{1} << 31;
  expect_invalid([&] { bad.validate(); }, "query_offset");
}

// ---- GPU -----------------------------------------------------------------------------------

SandwichParams random_params(std::mt19937& rng) {
  std::uniform_int_distribution<int> coin(0, 1), size(1, 70);
  SandwichParams p;
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 12)(rng);
  p.dim = 2 * std::uniform_int_distribution<std::uint32_t>(1, 300)(rng);
  p.first_frequency = coin(rng);
  p.scale = random_floats(rng, p.heads, -3.0f, 3.0f);
  p.causal = coin(rng);
  p.queries = size(rng);
  p.keys = size(rng);
  p.query_offset = relpos::test::random_query_offset(rng, p.queries, p.keys, 2'000'000'000, 100);
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  return p;
}

std::string describe(const SandwichParams& p) {
  return "H=" + std::to_string(p.heads) + " d=" + std::to_string(p.dim) + " f=" + std::to_string(p.first_frequency) + (p.causal ? " causal" : " symmetric") + " Q=" + std::to_string(p.queries) +
         " K=" + std::to_string(p.keys) + " off=" + std::to_string(p.query_offset) + " B=" + std::to_string(p.batch);
}

void expect_matches(Context& ctx, const SandwichParams& p, std::mt19937& rng) {
  SCOPED_TRACE(describe(p));
  const std::int64_t rp_first = -(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset;
  std::vector<double> sums(std::size_t{p.queries} + p.keys - 1);  // of each relative position, once
  for (std::size_t x = 0; x < sums.size(); ++x) sums[x] = sandwich_sum(p.dim, rp_first + static_cast<std::int64_t>(x), p.first_frequency);
  relpos::test::expect_distance_bias_ops(
      ctx, p, rng, [&](std::uint32_t h, std::int64_t rp) { return p.scale[h] * sums[static_cast<std::size_t>(rp - rp_first)]; },
      [&](std::uint32_t h, std::int64_t) { return sandwich_error_bound(p.scale[h], p.dim); },
      [](Recorder& r, const SandwichParams& q, const Buffer& out, DType dtype) { sandwich_bias(r, q, out, dtype); },
      [](Recorder& r, const SandwichParams& q, const Buffer& logits, DType dtype) { sandwich_bias_add(r, q, logits, dtype); });
}

class SandwichGpu : public GpuTest {};

}  // namespace

TEST_F(SandwichGpu, RandomConfigurationsWithinTheErrorBound) {
  std::mt19937 rng(1401);
  for (int trial = 0; trial < 20; ++trial) expect_matches(gpu(), random_params(rng), rng);
}

TEST_F(SandwichGpu, BothExpansionPathsAndSplitPaths) {
  std::mt19937 rng(1402);
  for (DistanceExpansion path : {DistanceExpansion::Shader, DistanceExpansion::Copies}) {
    SCOPED_TRACE(path == DistanceExpansion::Copies ? "copies" : "shader");
    for (int trial = 0; trial < 4; ++trial) expect_matches(gpu_expansion(path), random_params(rng), rng);
  }
  for (int trial = 0; trial < 4; ++trial) expect_matches(gpu_small_limits(), random_params(rng), rng);
}

// The largest d' (16,384 cosines per distance, half the loop bound) and more heads than one
// invocation of the row shader may loop over; a decoding row of 100,000 keys near the int32 edge.
TEST_F(SandwichGpu, LargestDimensionManyHeadsAndLongRows) {
  std::mt19937 rng(1403);
  SandwichParams p;
  p.heads = 3;
  p.dim = SandwichParams::kMaxDim;
  p.scale = {1.0f, -0.25f, 1e-3f};
  p.queries = 3;
  p.keys = 40;
  p.query_offset = 7;
  expect_matches(gpu(), p, rng);
  p.heads = 20'000;
  p.dim = 6;
  p.scale = random_floats(rng, p.heads, -1.0f, 1.0f);
  p.queries = 2;
  p.keys = 3;
  expect_matches(gpu(), p, rng);
  p.heads = 2;
  p.dim = 128;
  p.scale = {0.75f, -1.5f};
  p.queries = 1;
  p.keys = 100'000;
  p.query_offset = (std::int64_t{1} << 31) - 100'001;
  p.causal = true;
  expect_matches(gpu(), p, rng);
}

TEST_F(SandwichGpu, BadParametersAndBuffersAreRefusedBeforeRecording) {
  SandwichParams p;
  p.heads = 2;
  p.dim = 7;
  p.scale = {1.0f, 1.0f};
  p.queries = p.keys = 4;
  Buffer out(gpu(), 2 * 16 * 4);
  Recorder r(gpu());
  expect_invalid([&] { sandwich_bias(r, p, out); }, "dim");
  p.dim = 8;
  Buffer small(gpu(), 2 * 16 * 4 - 4);
  expect_invalid([&] { sandwich_bias(r, p, small); }, "output buffer");
  expect_invalid([&] { sandwich_bias(r, p, out, DType::I32); }, "out_dtype");
  EXPECT_EQ(r.dispatch_count(), 0u);
}

// A plan's steps equal the free functions' results bit for bit and create nothing after the first.
TEST_F(SandwichGpu, PlanEqualsTheFreeFunctions) {
  Context& ctx = gpu();
  std::mt19937 rng(1404);
  SandwichParams env;
  env.heads = 3;
  env.dim = 96;
  env.scale = {0.5f, -1.0f, 2.0f};
  env.queries = 8;
  env.keys = 700;
  env.batch = 2;
  env.causal = true;
  for (DType dtype : {DType::F32, DType::F16})
    for (bool add : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (add ? " add" : " write"));
      BiasPlan plan(ctx, env, dtype, add);
      const std::size_t n = std::size_t{add ? env.batch : 1u} * env.heads * env.queries * env.keys;
      const std::vector<float> logits = add ? random_floats(rng, n, -4.0f, 4.0f) : std::vector<float>(n, 0.0f);
      Buffer by_plan = make_float_buffer(ctx, logits, dtype), by_free = make_float_buffer(ctx, logits, dtype);
      const std::vector<std::uint8_t> initial = by_plan.download<std::uint8_t>(n * dtype_size(dtype));
      Recorder r(ctx);
      const std::vector<BiasStep> steps = {{1, 1, 0}, {1, 500, 499}, {8, 700, 692}, {5, 64, -3}, {3, 333, 1'000'000}};
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const BiasStep& st = steps[i];
        by_plan.upload(initial.data(), initial.size());
        by_free.upload(initial.data(), initial.size());
        const ResourceCounts before = resource_counts(ctx);
        plan.record(r, st, by_plan);
        r.submit_and_wait();
        if (i > 0) {  // the first step may fill the recorder's own pools
          EXPECT_EQ(resource_counts(ctx).allocations(), before.allocations());
          EXPECT_EQ(resource_counts(ctx).pipelines, before.pipelines);
        }
        SandwichParams p = env;
        p.queries = st.queries, p.keys = st.keys, p.query_offset = st.query_offset;
        run(ctx, [&](Recorder& fr) { add ? sandwich_bias_add(fr, p, by_free, dtype) : sandwich_bias(fr, p, by_free, dtype); });
        const std::size_t used = std::size_t{add ? env.batch : 1u} * env.heads * st.queries * st.keys;
        ASSERT_EQ(download_floats(by_plan, used, dtype), download_floats(by_free, used, dtype)) << "step " << i;
      }
    }
}

// Fused attention with the sandwich bias against the reference: prefill, grouped-query decoding
// with split keys, a memory prefix, f16 storage, both kernel classes, and a plan's decode steps.
TEST_F(SandwichGpu, FusedAttentionMatchesReference) {
  std::mt19937 rng(1405);
  struct Case { std::uint32_t b, h, hkv, q, k, d, m, dim, first; std::int64_t off; bool causal; DType dtype; };
  for (Kernels kernels : {Kernels::Cpu, Kernels::Gpu})
    for (const Case& c : {Case{1, 4, 4, 33, 47, 32, 0, 64, 0, 14, true, DType::F32}, Case{2, 8, 2, 1, 3000, 64, 0, 128, 1, 2999, true, DType::F32},
                          Case{1, 2, 1, 9, 40, 16, 8, 2, 1, 0, false, DType::F16}}) {
      Context& ctx = relpos::test::gpu_kernels(kernels);
      AttentionParams p{.batch = c.b, .heads = c.h, .kv_heads = c.hkv, .queries = c.q, .keys = c.k, .head_dim = c.d, .dtype = c.dtype,
                        .query_offset = c.off, .causal = c.causal, .memory_prefix = c.m, .bias = AttentionBias::Sandwich};
      p.sandwich_dim = c.dim;
      p.sandwich_first_frequency = c.first;
      SCOPED_TRACE(std::string(kernels == Kernels::Gpu ? "gpu" : "cpu") + " kernels B=" + std::to_string(c.b) + " K=" + std::to_string(c.k));
      auto stored = [&](std::vector<float> x) { return c.dtype == DType::F16 ? from_half(to_half(x)) : x; };
      const std::vector<float> q = stored(random_floats(rng, p.rows() * c.d, -1.0f, 1.0f));
      const std::vector<float> k = stored(random_floats(rng, std::size_t{c.b} * c.hkv * c.k * c.d, -1.0f, 1.0f));
      const std::vector<float> v = stored(random_floats(rng, k.size(), -1.0f, 1.0f));
      const std::vector<float> scale = random_floats(rng, c.h, -0.5f, 0.5f);
      const AttentionResult want = attention_reference(p, {q, k, v, scale, {}, {}, {}});
      Buffer bq = make_float_buffer(ctx, q, c.dtype), bk = make_float_buffer(ctx, k, c.dtype), bv = make_float_buffer(ctx, v, c.dtype);
      Buffer bout(ctx, want.out.size() * dtype_size(c.dtype)), blse(ctx, want.lse.size() * 4), bscale = make_buffer(ctx, scale);
      AttentionBuffers b{.q = &bq, .k = &bk, .v = &bv, .out = &bout, .lse = &blse, .bias = &bscale};
      run(ctx, [&](Recorder& r) { attention(r, p, b); });
      const double tol = c.dtype == DType::F16 ? 2e-3 : 5e-5;
      EXPECT_LE(normalised_error(download_floats(bout, want.out.size(), c.dtype), want.out), tol);
      EXPECT_LE(normalised_error(blse.download<float>(want.lse.size()), want.lse), 5e-5);
      if (c.q == 1) {  // the same step through a plan: the same bits
        const std::vector<float> direct = download_floats(bout, want.out.size(), c.dtype);
        AttentionPlan plan(ctx, p);
        run(ctx, [&](Recorder& r) { plan.record(r, {1, c.k, c.off}, b); });
        EXPECT_EQ(download_floats(bout, want.out.size(), c.dtype), direct);
      }
    }
}

TEST_F(SandwichGpu, FusedAttentionRefusesBadDimensionsAndScales) {
  AttentionParams p{.heads = 2, .kv_heads = 2, .queries = 2, .keys = 5, .head_dim = 8, .bias = AttentionBias::Sandwich};
  for (std::uint32_t dim : {0u, 5u, SandwichParams::kMaxDim + 2}) {
    p.sandwich_dim = dim;
    expect_invalid([&] { p.validate(); }, "sandwich_dim");
  }
  p.sandwich_dim = 4;
  p.sandwich_first_frequency = 2;
  expect_invalid([&] { p.validate(); }, "sandwich_first_frequency = 2: must be 0 (k = 0 ... d'/2 - 1) or 1 (k = 1 ... d'/2)");
  p.sandwich_first_frequency = 0;
  const std::vector<float> q(2 * 2 * 8, 0.1f), kv(2 * 5 * 8, 0.1f), scale = {1.0f, std::numeric_limits<float>::infinity()};
  expect_invalid([&] { (void)attention_reference(p, {q, kv, kv, scale, {}, {}, {}}); }, "scale");
}

namespace {

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("relpos_sandwich_" + std::to_string(getpid()) + "_" + name)).string();
}

void write_f32(const std::string& name, const std::vector<float>& x, std::vector<std::uint64_t> shape) {
  write_npy(temp(name), DType::F32, shape, x.data());
}

}  // namespace

// The contract: `run sandwich-bias --heads H --queries Q --keys K --sandwich-dim D
// --scale S.npy [--causal] [--query-offset O] [--dtype f32|f16] --out F.npy` and `run attention
// --bias sandwich --sandwich-dim D --sandwich-scale S.npy`.
TEST(SandwichCli, BiasAndAttention) {
  using relpos::test::tool;
  const std::vector<float> scale = {0.5f, -1.25f, 0.03125f};
  write_f32("scale.npy", scale, {3});
  SandwichParams p;
  p.heads = 3;
  p.dim = 24;
  p.scale = scale;
  p.queries = 4;
  p.keys = 7;
  p.causal = true;
  p.query_offset = 3;
  const std::vector<float> want = sandwich_bias_reference(p);
  const std::string args = "run sandwich-bias --heads 3 --queries 4 --keys 7 --causal --query-offset 3 --sandwich-dim 24 --scale " +
                           temp("scale.npy") + " --out " + temp("bias.npy");
  auto r = tool(args + " --reference");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_npy(temp("bias.npy")).to_f32("bias"), want);
  r = tool(args);
  ASSERT_EQ(r.status, 0) << r.output;
  const NpyArray a = read_npy(temp("bias.npy"));
  EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{3, 4, 7}));
  EXPECT_LE(normalised_error(a.to_f32("bias"), want), 1e-5);
  r = tool(args + " --dtype f16");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_npy(temp("bias.npy")).descr, "<f2");

  // Fused: the same parameters as AttentionBias::Sandwich.
  AttentionParams ap{.heads = 3, .kv_heads = 3, .queries = 4, .keys = 7, .head_dim = 8, .query_offset = 3, .causal = true,
                     .bias = AttentionBias::Sandwich};
  ap.sandwich_dim = 24;
  std::vector<float> q(3 * 4 * 8), kv(3 * 7 * 8);
  for (std::size_t e = 0; e < q.size(); ++e) q[e] = std::sin(0.37f * e);
  for (std::size_t e = 0; e < kv.size(); ++e) kv[e] = std::cos(0.11f * e);
  write_f32("q.npy", q, {1, 3, 4, 8});
  write_f32("kv.npy", kv, {1, 3, 7, 8});
  const auto att = attention_reference(ap, {q, kv, kv, scale, {}, {}, {}});
  const std::string attention = "run attention --q " + temp("q.npy") + " --k " + temp("kv.npy") + " --v " + temp("kv.npy") +
                                " --causal --query-offset 3 --bias sandwich --out " + temp("att.npy");
  r = tool(attention + " --sandwich-dim 24 --sandwich-scale " + temp("scale.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_LE(normalised_error(read_npy(temp("att.npy")).to_f32("out"), att.out), 1e-4);
  // The paper's frequencies, k = 1 ... d'/2, in both commands.
  p.first_frequency = ap.sandwich_first_frequency = 1;
  r = tool(args + " --sandwich-first-frequency 1 --reference");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_npy(temp("bias.npy")).to_f32("bias"), sandwich_bias_reference(p));
  EXPECT_NE(sandwich_bias_reference(p), want);
  r = tool(attention + " --sandwich-dim 24 --sandwich-first-frequency 1 --sandwich-scale " + temp("scale.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_LE(normalised_error(read_npy(temp("att.npy")).to_f32("out"), attention_reference(ap, {q, kv, kv, scale, {}, {}, {}}).out), 1e-4);

  // An odd dimension, a scale per head missing, no scale file.
  write_f32("two.npy", {1.0f, 2.0f}, {2});
  const std::string base = "run sandwich-bias --heads 3 --queries 2 --keys 2 --out " + temp("x.npy");
  for (auto [line, message] : {std::pair<std::string, std::string>{base + " --sandwich-dim 7 --scale " + temp("scale.npy"), "dim = 7"},
                               {base + " --sandwich-dim 8 --scale " + temp("two.npy"), "one scale per head"},
                               {base + " --sandwich-dim 8", "--scale"},
                               {base + " --sandwich-dim 8 --sandwich-first-frequency 2 --scale " + temp("scale.npy"), "first_frequency = 2"},
                               {attention + " --sandwich-dim 5 --sandwich-scale " + temp("scale.npy"), "sandwich_dim"},
                               {attention + " --sandwich-dim 8", "--sandwich-scale is required"}}) {
    r = tool(line);
    EXPECT_NE(r.status, 0) << line;
    EXPECT_NE(r.output.find(message), std::string::npos) << line << ": " << r.output;
  }
  for (const char* f : {"scale.npy", "bias.npy", "q.npy", "kv.npy", "att.npy", "two.npy"}) std::filesystem::remove(temp(f));
}

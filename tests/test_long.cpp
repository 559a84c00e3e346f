// The sizes users run: 32k to 200k keys, past lavapipe's 65,535-iteration budget for the loops of
// one shader invocation (and long enough for a GPU watchdog to matter). Every op whose loops grow
// with the keys is checked against the float64 reference there. Values ramp along the keys, so a
// loop cut short (a lost tail of keys) moves the output and the log-sum-exp far past the bounds.
// Label `long`: run by .ci/test, left out of quick runs.
#include <relpos/relpos.hpp>

#include <random>

#include "support/gpu_fixture.hpp"
#include "support/paged_data.hpp"
#include "support/ring_data.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_kernels;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

// Normalised error bounds (max |got - want| / max(1, max |want|)): float32 dot products over
// D <= 64 terms, per-split float32 sums over at most 8192 keys (typically ~sqrt(n) ulp) and the
// merge; a lost tail of keys moves lse by log(K / K_seen) and the output by the ramp's slope.
constexpr double kTolF32 = 1e-4;

// Values in [-1, 1] plus a ramp over the keys, so that every stretch of keys contributes its own part.
std::vector<float> ramped(std::mt19937& rng, std::size_t rows, std::size_t keys, std::size_t width) {
  std::vector<float> v = random_floats(rng, rows * keys * width, -1.0f, 1.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < keys; ++j)
      for (std::size_t d = 0; d < width; ++d) v[(r * keys + j) * width + d] += 2.0f * static_cast<float>(j) / keys;
  return v;
}

struct LongCase {
  std::uint32_t keys;
  AttentionBias bias;
  bool causal;
  Kernels kernels = Kernels::Auto;  // Auto: the device's own class
};

class LongGpu : public GpuTest, public ::testing::WithParamInterface<LongCase> {};

// Attention over a paged cache of sequences of 100,352 and 61,000 keys (p's blocks: max_blocks
// 392 of 256 keys) against the reference; the values vary over the keys (no stretch alike).
void expect_paged_matches(Context& ctx, AttentionParams p, std::uint32_t seed) {
  std::mt19937 rng(seed);
  relpos::test::PagedInputs in = relpos::test::random_paged_inputs(rng, p, {100352, 61000}, 1);
  for (std::size_t e = 0; e < in.v.size(); ++e) in.v[e] += 2.0f * static_cast<float>(e % 997) / 997;
  const AttentionResult want = attention_reference(p, in.host());
  const AttentionResult got = relpos::test::gpu_paged_attention(ctx, p, in);
  EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
}

// B·H·Q = 64 rows (the shape that went wrong from ~27,600 keys), one kv head shared by 8.
TEST_P(LongGpu, FusedAttentionMatchesReference) {
  const LongCase c = GetParam();
  std::mt19937 rng(c.keys);
  AttentionParams p{.heads = 8, .kv_heads = 1, .queries = 8, .keys = c.keys, .head_dim = 64, .bias = c.bias};
  p.causal = c.causal;
  p.query_offset = std::int64_t{c.keys} - p.queries;
  p.t5.bidirectional = !c.causal;
  p.max_relative_position = 16;
  p.sandwich_dim = 64;
  AttentionHostInputs in;
  std::vector<float> q = random_floats(rng, p.rows() * p.head_dim, -1.0f, 1.0f), k = random_floats(rng, std::size_t{c.keys} * 64, -1.0f, 1.0f);
  std::vector<float> v = ramped(rng, 1, c.keys, 64), bias, rel_keys, rel_values;
  if (c.bias == AttentionBias::Alibi) bias = random_floats(rng, p.heads, 0.0f, 1e-4f);
  else if (c.bias != AttentionBias::None && c.bias != AttentionBias::Shaw) bias = random_floats(rng, p.bias_elements(), -1.0f, 1.0f);
  if (c.bias == AttentionBias::Shaw) {
    rel_keys = random_floats(rng, (2 * p.max_relative_position + 1) * 64, -1.0f, 1.0f);
    rel_values = random_floats(rng, (2 * p.max_relative_position + 1) * 64, -1.0f, 1.0f);
  }
  const AttentionResult want = attention_reference(p, {q, k, v, bias, rel_keys, rel_values, {}});

  Context& ctx = gpu_kernels(c.kernels);
  Buffer bq = make_buffer(ctx, q), bk = make_buffer(ctx, k), bv = make_buffer(ctx, v);
  Buffer out(ctx, q.size() * 4), lse(ctx, p.rows() * 4), bb, brk, brv;
  AttentionBuffers b{&bq, &bk, &bv, &out, &lse};
  if (!bias.empty()) b.bias = &(bb = make_buffer(ctx, bias));
  if (!rel_keys.empty()) {
    b.rel_keys = &(brk = make_buffer(ctx, rel_keys));
    b.rel_values = &(brv = make_buffer(ctx, rel_values));
  }
  run(ctx, [&](Recorder& r) { attention(r, p, b); });
  EXPECT_LE(normalised_error(out.download<float>(q.size()), want.out), kTolF32);
  EXPECT_LE(normalised_error(lse.download<float>(p.rows()), want.lse), kTolF32);
}

std::string case_name(const ::testing::TestParamInfo<LongCase>& info) {
  return std::string(attention_bias_info(info.param.bias).name) + "_" + std::to_string(info.param.keys) +
         (info.param.causal ? "_causal" : "") + (info.param.kernels == Kernels::Gpu ? "_gpu_kernels" : info.param.kernels == Kernels::Cpu ? "_cpu_kernels" : "");
}

INSTANTIATE_TEST_SUITE_P(Keys, LongGpu,
                         ::testing::Values(LongCase{32768, AttentionBias::None, false}, LongCase{100000, AttentionBias::T5, true},
                                           LongCase{100000, AttentionBias::Shaw, false}, LongCase{200000, AttentionBias::Alibi, false},
                                           LongCase{200000, AttentionBias::Distance, true}, LongCase{100000, AttentionBias::Sandwich, true},
                                           LongCase{100000, AttentionBias::T5, true, Kernels::Gpu},
                                           LongCase{100000, AttentionBias::Shaw, false, Kernels::Gpu},
                                           LongCase{200000, AttentionBias::Alibi, false, Kernels::Gpu}),
                         case_name);

// A paged cache of 100,352 keys per sequence in 256-key blocks: one sequence full, one at 61,000
// (split keys, the merge, the table walked past 65,535 keys), T5 decoder bias, causal, 4 queries.
TEST_F(LongGpu, PagedCacheOfAHundredThousandKeys) {
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
    AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 1, .queries = 4, .head_dim = 64, .causal = true, .bias = AttentionBias::T5};
    p.t5.bidirectional = false;
    p.paged.block_size = 256;
    p.paged.max_blocks = 392;
    expect_paged_matches(gpu_kernels(kernels), p, 100352);
  }
}

// Decoding grouped-query heads (4 on one kv head: a 98 MiB cache, within lavapipe's 128 MiB binding)
// at head_dim 128 over a paged cache of 100,352 keys, in the GPU
// class: on a device whose subgroups of 8 lanes cannot hold a kv head's 4 query heads in the
// decoding kernel (lavapipe, dg2), attention_tiled decodes them as its rows. T5 decoder bias and
// Shaw (its products near the diagonal in their own pass), split keys and their merge.
TEST_F(LongGpu, GroupedQueryDecodingOfAHundredThousandKeys) {
  for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Shaw}) {
    SCOPED_TRACE(attention_bias_info(bias).name);
    AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 1, .queries = 1, .head_dim = 128, .causal = true, .bias = bias,
                      .max_relative_position = 16};
    p.t5.bidirectional = false;
    p.paged.block_size = 256;
    p.paged.max_blocks = 392;
    expect_paged_matches(gpu_kernels(Kernels::Gpu), p, 100353);
  }
}

// Ring attention of 100,000 keys over 4 in-process ranks (zigzag: 12,500 keys a chunk, past the
// 8192 of one split) with the T5 decoder bias, and sharded decoding of one query against them: the
// chunks' global positions and the merges hold where the loops are long.
TEST_F(LongGpu, RingAndShardedOverAHundredThousandKeys) {
  std::mt19937 rng(100000);
  AttentionParams p{.heads = 4, .kv_heads = 1, .queries = 8, .keys = 100000, .head_dim = 64, .causal = true, .bias = AttentionBias::T5};
  p.query_offset = std::int64_t{p.keys} - p.queries;
  p.t5.bidirectional = false;
  relpos::test::WholeInputs in;
  in.q = random_floats(rng, p.rows() * p.head_dim, -1.0f, 1.0f);
  in.k = random_floats(rng, std::size_t{p.keys} * p.head_dim, -1.0f, 1.0f);
  in.v = ramped(rng, 1, p.keys, p.head_dim);
  in.bias = random_floats(rng, p.bias_elements(), -1.0f, 1.0f);
  const RingParams rp{p, 4, RingLayout::Zigzag};
  const AttentionResult want = attention_reference(p, in.host());
  AttentionResult got{std::vector<float>(want.out.size()), std::vector<float>(want.lse.size())};
  const InProcessRingOutcome ring = run_in_process_ring(std::vector<Context*>(4, &gpu()), std::chrono::minutes(10),
                                                        [&](std::uint32_t, Context& ctx, RingTransport& t) {
                                                          RingRank rank(ctx, t);
                                                          relpos::test::ring_rank(rank, rp, in, got);
                                                        });
  ASSERT_TRUE(ring.ok()) << ring.describe();
  EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);

  AttentionParams d = p;
  d.queries = 1;
  d.query_offset = std::int64_t{d.keys} - 1;
  relpos::test::WholeInputs one = in;
  one.q.resize(d.rows() * d.head_dim);
  const AttentionResult want_d = attention_reference(d, one.host());
  std::vector<AttentionResult> got_d(4);
  const InProcessRingOutcome sharded = run_in_process_ring(std::vector<Context*>(4, &gpu()), std::chrono::minutes(10),
                                                           [&](std::uint32_t r, Context& ctx, RingTransport& t) {
                                                             RingRank rank(ctx, t);
                                                             relpos::test::sharded_rank(rank, {d, 4, RingGather::All, 0}, one, got_d[r]);
                                                           });
  ASSERT_TRUE(sharded.ok()) << sharded.describe();
  for (const AttentionResult& r : got_d) {
    EXPECT_LE(normalised_error(r.out, want_d.out), kTolF32);
    EXPECT_LE(normalised_error(r.lse, want_d.lse), kTolF32);
  }
}

class LongUnfused : public GpuTest {};

// Rows of 200,000 logits, causal with an offset and with key padding: sums of 1 where any key is
// visible, exact zeros for masked keys.
TEST_F(LongUnfused, MaskedSoftmaxOfLongRows) {
  std::mt19937 rng(5);
  UnfusedAttentionParams p{.batch = 2, .heads = 1, .queries = 3, .keys = 200000, .head_dim = 1};
  p.causal = true;
  p.query_offset = 150000;
  p.key_lengths = {200000, 170001};
  std::vector<float> logits = ramped(rng, 6, p.keys, 1);
  std::vector<float> want = logits;
  masked_softmax_reference(p, want);
  Buffer b = make_buffer(gpu(), logits);
  run(gpu(), [&](Recorder& r) { masked_softmax(r, p, b); });
  const std::vector<float> got = b.download<float>(logits.size());
  // Each weight is ~1/150000: compare relative to the largest weight of the row.
  double worst = 0.0;
  for (std::size_t row = 0; row < 6; ++row) {
    const std::span<const float> g(got.data() + row * p.keys, p.keys), w(want.data() + row * p.keys, p.keys);
    double peak = 0.0, err = 0.0, sum = 0.0;
    for (std::size_t j = 0; j < p.keys; ++j) {
      peak = std::max(peak, static_cast<double>(w[j]));
      err = std::max(err, std::abs(static_cast<double>(g[j]) - w[j]));
      sum += g[j];
    }
    worst = std::max(worst, err / peak);
    EXPECT_NEAR(sum, 1.0, 1e-3) << "row " << row;
  }
  EXPECT_LE(worst, 1e-4);
}

// softmax(q·kᵀ)·v over 100,000 keys: the weights·v matmul's shared dimension is the keys.
TEST_F(LongUnfused, UnfusedAttentionOver100kKeys) {
  std::mt19937 rng(6);
  UnfusedAttentionParams p{.batch = 1, .heads = 2, .queries = 3, .keys = 100000, .head_dim = 16, .scale = 0.25f};
  const std::vector<float> q = random_floats(rng, 2 * 3 * 16, -1.0f, 1.0f), k = random_floats(rng, 2 * std::size_t{p.keys} * 16, -1.0f, 1.0f);
  const std::vector<float> v = ramped(rng, 2, p.keys, 16);
  const std::vector<float> want = unfused_attention_reference(p, q, k, v);
  Buffer bq = make_buffer(gpu(), q), bk = make_buffer(gpu(), k), bv = make_buffer(gpu(), v), out(gpu(), want.size() * 4);
  run(gpu(), [&](Recorder& r) { unfused_attention(r, p, bq, bk, bv, out); });
  EXPECT_LE(normalised_error(out.download<float>(want.size()), want), kTolF32);
}

// Shaw's unfused pipeline over 100,000 keys: the edge buckets sum most of each row's weights.
TEST_F(LongUnfused, ShawAttentionOver100kKeys) {
  std::mt19937 rng(7);
  ShawAttentionParams p;
  p.attention = {.batch = 1, .heads = 2, .queries = 3, .keys = 100000, .head_dim = 8, .scale = 0.5f};
  p.attention.query_offset = 50000;
  p.max_relative_position = 9000;  // 2k + 1 buckets past one part of a row as well
  const std::vector<float> q = random_floats(rng, 2 * 3 * 8, -1.0f, 1.0f), k = random_floats(rng, 2 * std::size_t{p.attention.keys} * 8, -1.0f, 1.0f);
  const std::vector<float> v = ramped(rng, 2, p.attention.keys, 8);
  const std::vector<float> rk = random_floats(rng, (2 * 9000 + 1) * 8, -1.0f, 1.0f), rv = random_floats(rng, (2 * 9000 + 1) * 8, -1.0f, 1.0f);
  const std::vector<float> want = shaw_attention_reference(p, q, k, v, rk, rv);
  Buffer bq = make_buffer(gpu(), q), bk = make_buffer(gpu(), k), bv = make_buffer(gpu(), v);
  Buffer brk = make_buffer(gpu(), rk), brv = make_buffer(gpu(), rv), out(gpu(), want.size() * 4);
  run(gpu(), [&](Recorder& r) { shaw_attention(r, p, bq, bk, bv, brk, brv, out); });
  EXPECT_LE(normalised_error(out.download<float>(want.size()), want), kTolF32);
}

// An explicit key split longer than one invocation may walk is refused, naming the parameter.
TEST(LongParams, KeySplitsTooFewAreRefused) {
  AttentionParams p{.heads = 1, .kv_heads = 1, .queries = 1, .keys = 100000, .head_dim = 8, .key_splits = 2};
  try {
    p.validate();
    FAIL() << "accepted 50,000 keys per split";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("key_splits"), std::string::npos) << e.what();
  }
}

}  // namespace

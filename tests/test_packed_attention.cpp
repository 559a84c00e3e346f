// Packed (ragged) queries over a paged cache (AttentionParams::total_queries): the reference against
// one paged call per sequence; both kernel classes against the reference over every bias mode, f32
// and f16, grouped-query heads, causal or not, lengths of 0, decode rows beside prefill chunks and
// forced key splits; plans against attention(); bad lengths refused on the host and clamped on the
// device.
#include <relpos/relpos.hpp>

#include <numeric>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/paged_data.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_kernels;
using relpos::test::gpu_paged_attention;
using relpos::test::PagedBuffers;
using relpos::test::PagedInputs;
using relpos::test::random_paged_inputs;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

constexpr double kTolF32 = 1e-4;  // as test_paged_attention.cpp
constexpr double kTolF16 = 1e-3;

std::string describe(const AttentionParams& p, const PagedInputs& in) {
  std::string s = std::string(attention_bias_info(p.bias).name) + " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) + "/" +
                  std::to_string(p.kv_heads) + " Q=" + std::to_string(p.queries) + " total=" + std::to_string(p.total_queries) +
                  " bs=" + std::to_string(p.paged.block_size) + " D=" + std::to_string(p.head_dim) + " " + std::string(dtype_name(p.dtype)) +
                  (p.causal ? " causal" : "") + " splits=" + std::to_string(p.key_splits) + " off=" + std::to_string(p.query_offset) +
                  " lengths (cache/queries)=";
  for (std::size_t b = 0; b < in.cache_lengths.size(); ++b) s += std::to_string(in.cache_lengths[b]) + "/" + std::to_string(in.query_lengths[b]) + ",";
  return s;
}

// A packed call over random sequences: some empty, some decoding (one query), some prefilling a
// chunk (up to Q queries, at most their cache length), lengths of 0 among them.
struct PackedCase {
  AttentionParams p;
  PagedInputs in;
};

PackedCase random_packed(std::mt19937& rng, AttentionBias bias, DType dtype, std::uint32_t max_batch = 5) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  PackedCase c;
  AttentionParams& p = c.p;
  p.bias = bias;
  p.dtype = dtype;
  p.batch = pick(1, static_cast<int>(max_batch));
  p.kv_heads = pick(1, 2);
  p.heads = p.kv_heads * pick(1, 3);
  p.queries = pick(0, 3) == 0 ? 1 : pick(2, 40);
  p.head_dim = pick(0, 1) ? 8 : 20;
  p.causal = pick(0, 2) != 0;
  p.paged.block_size = 16 * pick(1, 2);
  p.paged.max_blocks = pick(2, 5);
  if (pick(0, 1)) p.scale = 1.0f;
  if (pick(0, 3) == 0) p.key_splits = pick(1, 4);
  p.t5.bidirectional = pick(0, 1);
  p.t5.num_buckets = pick(p.t5.bidirectional ? 4 : 2, 20);
  p.t5.max_distance = p.t5.max_exact() + pick(1, 30);
  p.max_relative_position = pick(1, 5);
  p.kerple_variant = pick(0, 1) ? KerpleVariant::Power : KerpleVariant::Log;
  p.sandwich_dim = 2 * static_cast<std::uint32_t>(pick(1, 16));
  if (pick(0, 3) == 0) p.query_offset = pick(-20, 40);
  const int capacity = static_cast<int>(p.paged.block_size * p.paged.max_blocks);
  std::vector<std::int32_t> lengths, queries;
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    const int L = b == 1 ? 0 : b == 2 ? capacity : pick(1, capacity);
    const int most = std::min<int>(L, static_cast<int>(p.queries));
    const int kind = pick(0, 3);  // empty, decode, a chunk, the most
    lengths.push_back(L);
    queries.push_back(most == 0 || kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? pick(1, most) : most);
  }
  p.total_queries = static_cast<std::uint32_t>(std::accumulate(queries.begin(), queries.end(), 0));
  if (p.total_queries == 0) {  // one query at least: the buffers hold a token
    lengths[0] = std::max(lengths[0], 1);
    queries[0] = 1;
    p.total_queries = 1;
  }
  c.in = random_paged_inputs(rng, p, lengths);
  c.in.query_lengths = queries;
  return c;
}

void expect_matches(Context& ctx, const PackedCase& c) {
  SCOPED_TRACE(describe(c.p, c.in));
  const AttentionResult want = attention_reference(c.p, c.in.host());
  const AttentionResult got = gpu_paged_attention(ctx, c.p, c.in);
  EXPECT_LE(normalised_error(got.out, want.out), c.p.dtype == DType::F16 ? kTolF16 : kTolF32);
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
}

// The semantics, independently of the packed reference's own path: sequence b's n queries give
// what a paged call of that sequence alone with n queries gives (its distance rows the first
// n + keys - 1 values of each head's, its dense bias the last n rows of each head's).
TEST(PackedAttentionReference, EachSequenceIsItsOwnPagedCall) {
  std::mt19937 rng(41);
  for (const AttentionBiasInfo& info : attention_biases())
    for (int trial = 0; trial < 3; ++trial) {
      PackedCase c = random_packed(rng, info.bias, DType::F32);
      const AttentionParams& p = c.p;
      SCOPED_TRACE(describe(p, c.in));
      const AttentionResult packed = attention_reference(p, c.in.host());
      const std::uint32_t H = p.heads, D = p.head_dim, Q = p.queries, K = p.keys;
      std::size_t first = 0;
      for (std::uint32_t b = 0; b < p.batch; ++b) {
        const std::uint32_t n = static_cast<std::uint32_t>(c.in.query_lengths[b]);
        if (n == 0) continue;
        AttentionParams one = p;
        one.batch = 1;
        one.queries = n;
        one.total_queries = 0;
        PagedInputs in1 = c.in;
        in1.block_table.assign(c.in.block_table.begin() + b * p.paged.max_blocks, c.in.block_table.begin() + (b + 1) * p.paged.max_blocks);
        in1.cache_lengths = {c.in.cache_lengths[b]};
        in1.query_lengths.clear();
        in1.q.assign(std::size_t{H} * n * D, 0.0f);
        for (std::uint32_t h = 0; h < H; ++h)
          for (std::uint32_t t = 0; t < n; ++t)
            std::copy_n(c.in.q.begin() + ((first + t) * H + h) * D, D, in1.q.begin() + (std::size_t{h} * n + t) * D);
        if (p.bias == AttentionBias::Distance) {
          in1.bias.clear();
          for (std::uint32_t h = 0; h < H; ++h)
            in1.bias.insert(in1.bias.end(), c.in.bias.begin() + h * (Q + K - 1), c.in.bias.begin() + h * (Q + K - 1) + (n + K - 1));
        } else if (p.bias == AttentionBias::Dense) {
          in1.bias.clear();
          for (std::uint32_t h = 0; h < H; ++h)
            in1.bias.insert(in1.bias.end(), c.in.bias.begin() + (std::size_t{h} * Q + Q - n) * K, c.in.bias.begin() + (std::size_t{h} * Q + Q) * K);
        }
        const AttentionResult want = attention_reference(one, in1.host());
        for (std::uint32_t h = 0; h < H; ++h)
          for (std::uint32_t t = 0; t < n; ++t) {
            const std::size_t got_row = (first + t) * H + h, want_row = std::size_t{h} * n + t;
            for (std::uint32_t d = 0; d < D; ++d) ASSERT_EQ(packed.out[got_row * D + d], want.out[want_row * D + d]) << "b " << b << " h " << h << " t " << t;
            ASSERT_EQ(packed.lse[got_row], want.lse[want_row]);
          }
        first += n;
      }
    }
}

TEST(PackedAttentionReference, BadLengthsNameTheSequenceAndLimit) {
  AttentionParams p{.batch = 3, .heads = 2, .kv_heads = 1, .queries = 4, .keys = 64, .head_dim = 8};
  p.paged = {.block_size = 32, .num_blocks = 6, .max_blocks = 2};
  p.total_queries = 5;
  const std::vector<std::int32_t> cache = {10, 0, 64};
  EXPECT_NO_THROW(check_query_lengths(p, std::vector<std::int32_t>{1, 0, 4}, cache));
  expect_invalid([&] { check_query_lengths(p, std::vector<std::int32_t>{-1, 0, 6}, cache); }, "query_lengths[0]");
  expect_invalid([&] { check_query_lengths(p, std::vector<std::int32_t>{0, 1, 4}, cache); }, "query_lengths[1]");  // past its cache
  expect_invalid([&] { check_query_lengths(p, std::vector<std::int32_t>{0, 0, 5}, cache); }, "query_lengths[2]");  // past queries
  expect_invalid([&] { check_query_lengths(p, std::vector<std::int32_t>{1, 0, 3}, cache); }, "total_queries");
  expect_invalid([&] { check_query_lengths(p, std::vector<std::int32_t>{1, 0}, cache); }, "query_lengths");
  auto bad = p;
  bad.total_queries = 13;  // more than batch * queries
  expect_invalid([&] { bad.validate(); }, "total_queries");
  bad = p;
  bad.paged = {};
  expect_invalid([&] { bad.validate(); }, "total_queries");
  bad = p;
  bad.batch = AttentionParams::kMaxPackedBatch + 1;
  bad.total_queries = 1;
  expect_invalid([&] { bad.validate(); }, "batch");
  AttentionParams unpacked = p;
  unpacked.total_queries = 0;
  expect_invalid([&] { check_query_lengths(unpacked, std::vector<std::int32_t>{1, 0, 4}, cache); }, "total_queries");
}

class PackedAttentionGpu : public GpuTest {};

TEST_F(PackedAttentionGpu, EveryBiasModeInBothKernelClasses) {
  std::mt19937 rng(2031);
  const auto modes = attention_biases();
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
    for (std::size_t trial = 0; trial < 2 * modes.size(); ++trial)
      expect_matches(gpu_kernels(kernels), random_packed(rng, modes[trial % modes.size()].bias, trial < modes.size() ? DType::F32 : DType::F16));
  }
}

// attention_tiled at several workgroup and tile sizes (tiles of 4 to 64 keys, 8 to 64 lanes): a
// packed sequence's rows start anywhere in a workgroup's rows.
TEST_F(PackedAttentionGpu, GpuKernelsAtSeveralTileSizes) {
  struct Tiles {
    std::uint32_t shared_bytes, lanes;
    bool shuffles;
  };
  std::mt19937 rng(79);
  for (const Tiles t : {Tiles{2048, 64, true}, Tiles{8192, 16, true}, Tiles{32768, 8, true}, Tiles{32768, 64, false}}) {
    SCOPED_TRACE("shared " + std::to_string(t.shared_bytes) + " lanes " + std::to_string(t.lanes));
    Context ctx = relpos::test::gpu_kernels_tiles(t.shared_bytes, t.lanes, 0, t.shuffles);
    for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Alibi, AttentionBias::Dense}) {
      PackedCase c = random_packed(rng, bias, DType::F32);
      if (t.shared_bytes == 2048 && c.p.head_dim > 8) continue;
      expect_matches(ctx, c);
    }
  }
}

// The engine's mixed step: one sequence prefilling a chunk of 37 queries beside decoding ones, at
// head_dim 128 with grouped-query heads and the T5 decoder bias, f16 caches, keys split.
TEST_F(PackedAttentionGpu, ChunkedPrefillBesideDecoding) {
  std::mt19937 rng(2032);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    PackedCase c;
    c.p = AttentionParams{.batch = 4, .heads = 8, .kv_heads = 2, .queries = 37, .head_dim = 128, .dtype = DType::F16, .causal = true,
                          .bias = AttentionBias::T5};
    c.p.t5.bidirectional = false;
    c.p.paged.block_size = 16;
    c.p.paged.max_blocks = 12;
    c.p.total_queries = 37 + 1 + 0 + 1;
    c.in = random_paged_inputs(rng, c.p, {37, 100, 5, 190});
    c.in.query_lengths = {37, 1, 0, 1};
    expect_matches(gpu_kernels(kernels), c);
  }
}

// A packed step on the CPU class: its sequences of up to kDecodedQueries (16) queries decode, their
// keys split across lanes as a decoding call's (8 ways for 1024 keys), a lane taking one query; in
// a call of more queries, in a launch of their own, and the other launch skips them, with fewer
// splits (its rows' other parts filled with an lse of -inf). On the GPU class, its sequences of one
// query, through attention_decode, and without subgroup shuffles attention_tiled with heads as
// rows. Every bias mode, f32 and f16, grouped-query heads and not, causal and not,
// an empty sequence, one whose cache is shorter than the chunk of another, sequences of 16 and 17
// queries.
TEST_F(PackedAttentionGpu, SequencesOfAFewQueriesDecode) {
  std::mt19937 rng(2034);
  // No subgroup shuffles: no attention_decode, so attention_tiled takes grouped-query heads as rows.
  Context no_shuffles = relpos::test::gpu_kernels_tiles(32768, 0, 0, false);
  int n = 0;
  for (AttentionBias bias : {AttentionBias::None, AttentionBias::T5, AttentionBias::Distance, AttentionBias::Alibi, AttentionBias::Shaw,
                             AttentionBias::Dense, AttentionBias::Kerple, AttentionBias::Sandwich})
    for (const bool all_few : {false, true}) {
      PackedCase c;
      const bool gqa = n % 2 == 1;
      c.p = AttentionParams{.batch = 7, .heads = gqa ? 8u : 4u, .kv_heads = gqa ? 2u : 4u, .queries = all_few ? 16u : 21u, .head_dim = 32,
                            .dtype = n % 3 == 1 ? DType::F16 : DType::F32, .causal = n % 4 != 3, .bias = bias, .max_relative_position = 5};
      c.p.t5.bidirectional = false;
      c.p.sandwich_dim = 16;
      c.p.paged.block_size = 16;
      c.p.paged.max_blocks = 64;
      const std::vector<std::int32_t> lengths = all_few ? std::vector<std::int32_t>{16, 1, 3, 0, 4, 9, 2}
                                                        : std::vector<std::int32_t>{21, 1, 16, 0, 4, 17, 2};
      c.p.total_queries = 0;
      for (std::int32_t q : lengths) c.p.total_queries += q;
      c.in = random_paged_inputs(rng, c.p, {300, 1024, 700, 50, 999, 640, 130});
      c.in.query_lengths = lengths;
      ++n;
      SCOPED_TRACE(testing::Message() << (all_few ? "every sequence decodes" : "beside sequences of 21 and 17 queries"));
      expect_matches(gpu_kernels(Kernels::Cpu), c);
      expect_matches(gpu_kernels(Kernels::Gpu), c);
      if (gqa) expect_matches(no_shuffles, c);
    }
}

// Lengths on the device are not checked: they are clamped into [0, queries], and no row past
// total_queries is written (a plan's out buffer may be larger than its step's: the rows past the
// step's 5 tokens keep what they held).
TEST_F(PackedAttentionGpu, DeviceLengthsAreClamped) {
  std::mt19937 rng(2033);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    Context& ctx = gpu_kernels(kernels);
    PackedCase c;
    c.p = AttentionParams{.batch = 3, .heads = 2, .kv_heads = 1, .queries = 4, .head_dim = 16, .causal = true};
    c.p.paged.block_size = 16;
    c.p.paged.max_blocks = 2;
    c.p.total_queries = 5;
    c.in = random_paged_inputs(rng, c.p, {20, 3, 32});
    c.in.query_lengths = {0, 1, 4};
    PagedInputs negative = c.in;
    negative.query_lengths = {-7, 1, 4};  // as 0
    EXPECT_EQ(gpu_paged_attention(ctx, c.p, negative).out, gpu_paged_attention(ctx, c.p, c.in).out);

    AttentionParams env = c.p;
    env.total_queries = 12;
    AttentionPlan plan(ctx, env);
    PagedBuffers b(ctx, c.p, c.in);
    const std::vector<std::int32_t> past = {4, 4, 4};  // 12 tokens, 7 of them past the step's 5
    b.query_lengths = make_buffer(ctx, std::span<const std::int32_t>(past));
    const std::vector<float> sentinel(std::size_t{12} * 2 * 16, 7.0f);
    b.out = make_buffer(ctx, std::span<const float>(sentinel));
    run(ctx, [&](Recorder& r) { plan.record(r, {c.p.queries, c.p.keys, 0, c.p.total_queries}, b.buffers()); });
    const std::vector<float> got = b.out.download<float>(sentinel.size());
    const std::size_t stored = std::size_t{5} * 2 * 16;
    for (std::size_t x = 0; x < got.size(); ++x) {
      if (x < stored) EXPECT_NE(got[x], 7.0f) << x;  // softmax weights average the values: never the sentinel
      else EXPECT_EQ(got[x], 7.0f) << x;
    }
  }
}

TEST_F(PackedAttentionGpu, MismatchedBuffersAreRefusedBeforeRecording) {
  Context& ctx = gpu();
  std::mt19937 rng(6);
  PackedCase c = random_packed(rng, AttentionBias::None, DType::F32, 3);
  PagedBuffers b(ctx, c.p, c.in);
  Buffer small(ctx, 4);
  Recorder r(ctx);
  auto with = [&](auto change) {
    AttentionBuffers x = b.buffers();
    change(x);
    return [&, x] { attention(r, c.p, x); };
  };
  expect_invalid(with([&](AttentionBuffers& x) { x.query_lengths = nullptr; }), "query_lengths buffer");
  expect_invalid(with([&](AttentionBuffers& x) { x.query_lengths = &small; }), "query_lengths buffer");
  expect_invalid(with([&](AttentionBuffers& x) { x.q = &small; }), "q buffer");
  AttentionParams unpacked = c.p;
  unpacked.total_queries = 0;
  expect_invalid([&] { attention(r, unpacked, b.buffers()); }, "q buffer");
}

// A plan step's inputs: `full`'s cache with these cache and query lengths, q cut to their tokens
// (p.total_queries set to their sum).
PagedInputs step_inputs(AttentionParams& p, const PagedInputs& full, const std::vector<std::int32_t>& cache,
                        const std::vector<std::int32_t>& query) {
  p.total_queries = static_cast<std::uint32_t>(std::accumulate(query.begin(), query.end(), 0));
  PagedInputs in = full;
  in.cache_lengths = cache;
  in.query_lengths = query;
  in.q.resize(std::size_t{p.total_queries} * p.heads * p.head_dim);
  return in;
}

// The plan's step gives what attention() gives, bit for bit, and the reference within float32's
// tolerance.
void expect_plan_step_matches(Context& ctx, AttentionPlan& plan, const AttentionParams& p, const PagedInputs& in) {
  SCOPED_TRACE(describe(p, in));
  PagedBuffers b(ctx, p, in);
  run(ctx, [&](Recorder& r) { plan.record(r, {p.queries, p.keys, 0, p.total_queries}, b.buffers()); });
  const AttentionResult planned = b.download(p);
  const AttentionResult direct = gpu_paged_attention(ctx, p, in);
  EXPECT_EQ(planned.out, direct.out);
  EXPECT_EQ(planned.lse, direct.lse);
  EXPECT_LE(normalised_error(planned.out, attention_reference(p, in.host()).out), kTolF32);
}

// A packed plan's steps give what attention() gives, bit for bit, as the batch's mix changes.
TEST_F(PackedAttentionGpu, PlanStepsMatchAttention) {
  Context& ctx = gpu();
  std::mt19937 rng(2034);
  for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Shaw, AttentionBias::Distance}) {
    AttentionParams env{.batch = 3, .heads = 4, .kv_heads = 2, .queries = 24, .head_dim = 16, .causal = true, .bias = bias,
                        .max_relative_position = 4};
    env.t5.bidirectional = false;
    env.paged.block_size = 32;
    env.paged.max_blocks = 4;
    env.total_queries = 3 * 24;
    PagedInputs full = random_paged_inputs(rng, env, {128, 128, 128});
    AttentionPlan plan(ctx, env);
    struct Mix {
      std::uint32_t queries;
      std::vector<std::int32_t> cache, query;
    };
    for (const Mix& m : {Mix{24, {24, 60, 1}, {24, 1, 1}}, Mix{1, {25, 61, 2}, {1, 1, 0}}, Mix{9, {100, 9, 128}, {1, 9, 3}}}) {
      AttentionParams p = env;
      p.queries = m.queries;
      PagedInputs in = step_inputs(p, full, m.cache, m.query);
      if (bias == AttentionBias::Distance) in.bias = random_floats(rng, std::size_t{p.heads} * (p.queries + p.keys - 1));
      expect_plan_step_matches(ctx, plan, p, in);
    }
    PagedBuffers b(ctx, env, full);
    expect_invalid([&] { Recorder r(ctx); plan.record(r, {env.queries, env.keys, 0, env.total_queries + 1}, b.buffers()); }, "total_queries");
    expect_invalid([&] { Recorder r(ctx); plan.record(r, {env.queries, env.keys, 0, 0}, b.buffers()); }, "total_queries");
  }
}

// Plan steps whose packed calls take a decoding launch beside the other (17 queries, keys that a
// decoding call splits, on the CPU class): steps of one query count but different tokens, in either
// order, take the splits the envelope planned for (they follow its batch and queries, not the
// step's tokens), and match attention() bit for bit.
TEST_F(PackedAttentionGpu, PlanStepsWithADecodingLaunch) {
  Context& ctx = gpu_kernels(Kernels::Cpu);
  std::mt19937 rng(2035);
  AttentionParams env{.batch = 4, .heads = 8, .kv_heads = 1, .queries = 17, .head_dim = 8, .causal = true, .bias = AttentionBias::Alibi};
  env.paged.block_size = 32;
  env.paged.max_blocks = 2048;  // 65,536 keys: 8 splits a row at least
  env.total_queries = 4 * 17;
  const PagedInputs full = random_paged_inputs(rng, env, {65536, 65536, 65536, 65536});
  AttentionPlan plan(ctx, env);
  struct Mix {
    std::vector<std::int32_t> cache, query;
  };
  for (const Mix& m : {Mix{{65536, 1500, 9, 700}, {1, 0, 0, 0}}, Mix{{65536, 1500, 9, 700}, {17, 1, 2, 1}}, Mix{{600, 65536, 2, 40000}, {1, 1, 1, 17}},
                       Mix{{65536, 1500, 9, 700}, {1, 0, 0, 0}}}) {
    AttentionParams p = env;
    expect_plan_step_matches(ctx, plan, p, step_inputs(p, full, m.cache, m.query));
  }
}

}  // namespace

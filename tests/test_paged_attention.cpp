// Paged fused attention (a KV cache of blocks and a block table): the reference against the
// contiguous reference where both can express the call; both kernel classes against the reference
// over every bias mode, f32 and f16, grouped-query heads, causal masks, per-sequence lengths from
// empty to full, block sizes 16 to 256 and forced key splits; plans against attention(); bad tables
// refused on the host and clamped into the cache on the device.
#include <relpos/relpos.hpp>

#include <limits>
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
using relpos::test::run;

namespace {

// As in test_attention_gpu.cpp: float32 accumulation ~1e-5 relative; f16 output rounded once.
constexpr double kTolF32 = 1e-4;
constexpr double kTolF16 = 1e-3;

constexpr AttentionBias kModes[] = {AttentionBias::None,  AttentionBias::T5,   AttentionBias::Distance, AttentionBias::Alibi,
                                    AttentionBias::Shaw, AttentionBias::Dense, AttentionBias::Kerple};

std::string describe(const AttentionParams& p, const PagedInputs& in) {
  std::string s = "bias=" + std::to_string(static_cast<int>(p.bias)) + " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) +
                  "/" + std::to_string(p.kv_heads) + " Q=" + std::to_string(p.queries) + " bs=" + std::to_string(p.paged.block_size) +
                  " max_blocks=" + std::to_string(p.paged.max_blocks) + " D=" + std::to_string(p.head_dim) + " " +
                  std::string(dtype_name(p.dtype)) + (p.causal ? " causal" : "") + " splits=" + std::to_string(p.key_splits) + " off=" + std::to_string(p.query_offset) + " lengths=";
  for (std::int32_t L : in.cache_lengths) s += std::to_string(L) + ",";
  return s;
}

void expect_matches(Context& ctx, const AttentionParams& p, const PagedInputs& in) {
  SCOPED_TRACE(describe(p, in));
  const AttentionResult want = attention_reference(p, in.host());
  const AttentionResult got = gpu_paged_attention(ctx, p, in);
  EXPECT_LE(normalised_error(got.out, want.out), p.dtype == DType::F16 ? kTolF16 : kTolF32);
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
}

// Random shapes: lengths from 0 to the table's capacity (one sequence empty, one full when B = 3).
AttentionParams random_paged_params(std::mt19937& rng, AttentionBias bias, DType dtype, std::vector<std::int32_t>& lengths) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  AttentionParams p;
  p.bias = bias;
  p.dtype = dtype;
  p.batch = pick(1, 3);
  p.kv_heads = pick(1, 2);
  p.heads = p.kv_heads * pick(1, 3);
  p.queries = pick(0, 2) == 0 ? 1 : pick(2, 24);
  p.head_dim = pick(0, 1) ? 8 : 20;
  p.causal = pick(0, 1);
  p.paged.block_size = 16 * pick(1, 3);
  p.paged.max_blocks = pick(1, 4);
  const int capacity = static_cast<int>(p.paged.block_size * p.paged.max_blocks);
  if (pick(0, 1)) p.scale = 1.0f;
  if (pick(0, 2) == 0) p.key_splits = pick(1, 4);
  p.t5.bidirectional = pick(0, 1);
  p.t5.num_buckets = pick(p.t5.bidirectional ? 4 : 2, 20);
  p.t5.max_distance = p.t5.max_exact() + pick(1, 30);
  p.max_relative_position = pick(1, 5);
  p.kerple_variant = pick(0, 1) ? KerpleVariant::Power : KerpleVariant::Log;
  if (pick(0, 3) == 0) p.query_offset = pick(-20, 60);  // every sequence's queries shifted alike
  lengths.clear();
  for (std::uint32_t b = 0; b < p.batch; ++b) lengths.push_back(b == 1 ? 0 : b == 2 ? capacity : pick(1, capacity));
  return p;
}

// A contiguous call [B, Hkv, L, D] with every sequence at length L, query offset L - Q + O, as a
// paged cache of capacity K >= L with query_offset O (queries O past the cache's end: a slice of a
// longer sequence): the distance rows and the dense bias padded to K.
TEST(PagedAttentionReference, EqualsContiguousWhenLengthsAgree) {
  std::mt19937 rng(31);
  for (AttentionBias bias : kModes)
    for (bool causal : {false, true}) {
      const std::int64_t shift = causal ? 9 : -2;
      AttentionParams c{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 5, .keys = 37, .head_dim = 8, .causal = causal, .bias = bias,
                        .max_relative_position = 3};
      c.query_offset = std::int64_t{c.keys} - c.queries + shift;
      AttentionParams p = c;
      p.query_offset = shift;
      p.paged.block_size = 16;
      p.paged.max_blocks = 4;  // capacity 64 > 37
      PagedInputs in = random_paged_inputs(rng, p, {37, 37});
      SCOPED_TRACE(describe(p, in));
      const std::uint32_t H = c.heads, Q = c.queries, L = c.keys, K = p.keys, D = c.head_dim;
      std::vector<float> k(std::size_t{c.batch} * c.kv_heads * L * D), v(k.size());
      for (std::uint32_t b = 0; b < c.batch; ++b)
        for (std::uint32_t hk = 0; hk < c.kv_heads; ++hk)
          for (std::uint32_t j = 0; j < L; ++j) {
            const std::size_t block = static_cast<std::size_t>(in.block_table[b * p.paged.max_blocks + j / 16]);
            for (std::uint32_t d = 0; d < D; ++d) {
              const std::size_t from = ((block * 16 + j % 16) * c.kv_heads + hk) * D + d, to = ((std::size_t{b} * c.kv_heads + hk) * L + j) * D + d;
              k[to] = in.k[from];
              v[to] = in.v[from];
            }
          }
      std::vector<float> bias_c;
      if (bias == AttentionBias::Distance) {  // contiguous rows [H, Q + L - 1] at the end of the paged [H, Q + K - 1]
        for (std::uint32_t h = 0; h < H; ++h)
          bias_c.insert(bias_c.end(), in.bias.begin() + h * (Q + K - 1) + (K - L), in.bias.begin() + h * (Q + K - 1) + (K - L) + (Q + L - 1));
      } else if (bias == AttentionBias::Dense) {
        for (std::uint32_t hi = 0; hi < H * Q; ++hi) bias_c.insert(bias_c.end(), in.bias.begin() + hi * K, in.bias.begin() + hi * K + L);
      } else {
        bias_c = in.bias;
      }
      const AttentionResult want = attention_reference(c, {in.q, k, v, bias_c, in.rel_keys, in.rel_values, {}});
      const AttentionResult got = attention_reference(p, in.host());
      EXPECT_EQ(got.out, want.out);
      EXPECT_EQ(got.lse, want.lse);
    }
}

TEST(PagedAttentionReference, BadTablesNameTheSequenceAndEntry) {
  AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = 1, .keys = 64, .head_dim = 8};
  p.paged = {.block_size = 32, .num_blocks = 4, .max_blocks = 2};
  const std::vector<std::int32_t> table = {0, 1, 2, 3}, lengths = {64, 33};
  EXPECT_NO_THROW(check_block_table(p, table, lengths));
  EXPECT_NO_THROW(check_block_table(p, std::vector<std::int32_t>{0, 1, 2, -7}, std::vector<std::int32_t>{64, 32}));  // entry never read
  expect_invalid([&] { check_block_table(p, std::vector<std::int32_t>{0, 1, 2, 4}, lengths); }, "block_table[1][1]");
  expect_invalid([&] { check_block_table(p, std::vector<std::int32_t>{0, -1, 2, 3}, lengths); }, "block_table[0][1]");
  expect_invalid([&] { check_block_table(p, table, std::vector<std::int32_t>{65, 1}); }, "cache_lengths[0]");
  expect_invalid([&] { check_block_table(p, table, std::vector<std::int32_t>{1, -1}); }, "cache_lengths[1]");
  expect_invalid([&] { check_block_table(p, std::vector<std::int32_t>{0, 1, 2}, lengths); }, "block_table");
  expect_invalid([&] { check_block_table(p, table, std::vector<std::int32_t>{1}); }, "cache_lengths");
  auto bad = p;
  bad.paged.block_size = 24;
  bad.keys = 48;
  expect_invalid([&] { bad.validate(); }, "paged.block_size");
  bad = p;
  bad.keys = 60;
  expect_invalid([&] { bad.validate(); }, "keys");
  bad = p;
  bad.query_offset = std::numeric_limits<std::int32_t>::max();  // positions past int32
  expect_invalid([&] { bad.validate(); }, "query_offset");
  bad = p;
  bad.memory_prefix = 2;
  expect_invalid([&] { bad.validate(); }, "memory_prefix");
}

class PagedAttentionGpu : public GpuTest {};

TEST_F(PagedAttentionGpu, EveryBiasModeInBothKernelClasses) {
  std::mt19937 rng(2027);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
    for (int trial = 0; trial < 28; ++trial) {
      std::vector<std::int32_t> lengths;
      AttentionParams p = random_paged_params(rng, kModes[trial % 7], trial % 14 < 7 ? DType::F32 : DType::F16, lengths);
      const PagedInputs in = random_paged_inputs(rng, p, lengths);
      expect_matches(gpu_kernels(kernels), p, in);
    }
  }
}

// attention_tiled_paged at several workgroup and tile sizes: 8 to 64 lanes (fewer lanes than keys
// in a tile: each lane finds several key words), tiles of 4 to 64 keys, with and without shuffles.
TEST_F(PagedAttentionGpu, GpuKernelsAtSeveralTileSizes) {
  struct Tiles {
    std::uint32_t shared_bytes, lanes;
    bool shuffles;
  };
  std::mt19937 rng(78);
  for (const Tiles t : {Tiles{2048, 64, true}, Tiles{8192, 16, true}, Tiles{32768, 8, true}, Tiles{32768, 64, false}}) {
    SCOPED_TRACE("shared " + std::to_string(t.shared_bytes) + " lanes " + std::to_string(t.lanes) + (t.shuffles ? "" : " no shuffles"));
    Context ctx = relpos::test::gpu_kernels_tiles(t.shared_bytes, t.lanes, 0, t.shuffles);
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<std::int32_t> lengths;
      AttentionParams p = random_paged_params(rng, kModes[(trial * 3) % 7], trial % 2 ? DType::F16 : DType::F32, lengths);
      if (t.shared_bytes == 2048) p.head_dim = 8;
      if (trial >= 2) p.queries = 1;
      expect_matches(ctx, p, random_paged_inputs(rng, p, lengths));
    }
    bool paged = false;
    for (const PipelineReport& rep : pipeline_reports(ctx, false)) paged = paged || rep.shader.ends_with("_paged");
    EXPECT_TRUE(paged);
  }
}

// Blocks of 256 keys, decoding and a few queries, sequences of different lengths (one within its
// first block), split keys; in both kernel classes (the GPU class finds a tile's or a decoding
// step's keys from the first word of their block, one table load per block, where a block holds a
// whole number of tiles or steps).
TEST_F(PagedAttentionGpu, LargeBlocksAndDecoding) {
  std::mt19937 rng(2028);
  for (std::uint32_t Q : {1u, 7u})
    for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Alibi}) {
      AttentionParams p{.batch = 3, .heads = 4, .kv_heads = 2, .queries = Q, .head_dim = 64, .causal = true, .bias = bias};
      p.t5.bidirectional = false;
      p.paged.block_size = 256;
      p.paged.max_blocks = 6;
      const PagedInputs in = random_paged_inputs(rng, p, {1, 1300, 1536});
      expect_matches(gpu(), p, in);
      expect_matches(gpu_kernels(Kernels::Gpu), p, in);
    }
}

// Decoding on the CPU class, the lanes take the dispatch's items (a key split of one slab each) as
// they come free, each lane up to a bound that keeps its loops over all of them within
// RELPOS_MAX_LOOP_ITERATIONS: lavapipe leaves every loop of an invocation once it has run 65,535
// iterations in all, which would drop keys of the item under way. 32 sequences of 32 heads, each
// its own kv head, of 16,384 keys (4 blocks that every sequence's table names over and over, so the
// cache stays small) in 32 splits of 512: 32,768 items of 64 key blocks each, where a thread's first
// lanes would take over 2,000 items apiece if nothing bounded them.
TEST_F(PagedAttentionGpu, DecodingLanesThatTakeManySplitsStayWithinTheLoopBound) {
  std::mt19937 rng(2029);
  AttentionParams p{.batch = 32, .heads = 32, .kv_heads = 32, .queries = 1, .head_dim = 4, .causal = true};
  p.paged = {.block_size = 16, .num_blocks = 4, .max_blocks = 1024};
  p.keys = p.paged.block_size * p.paged.max_blocks;
  test::AttentionInputs a = test::random_attention_inputs(rng, p, p.paged.cache_elements(p.kv_heads, p.head_dim));
  PagedInputs in{.q = a.q, .k = a.k, .v = a.v};
  in.cache_lengths.assign(p.batch, static_cast<std::int32_t>(p.keys));
  for (std::uint32_t n = 0; n < p.batch * p.paged.max_blocks; ++n) in.block_table.push_back(static_cast<std::int32_t>((n * 7 + n / 5) % 4));
  expect_matches(gpu(), p, in);
}

// Forced key splits of an odd number of keys each (224 / 3 and / 5, 208 / 6: no whole number of
// tiles or decoding steps, which a block of 16 or 32 keys holds 1 to 8 of): the GPU class starts
// each split on a tile or step, so that none straddles two blocks (its keys are found from one
// block's first word); the splits past the keys are empty. Prefill and decoding, at several tile
// and workgroup sizes.
TEST_F(PagedAttentionGpu, SplitsStartOnATileOrStep) {
  std::mt19937 rng(2029);
  for (const auto& [shared_bytes, lanes] : {std::pair{32768u, 64u}, std::pair{8192u, 16u}, std::pair{32768u, 8u}}) {
    SCOPED_TRACE("shared " + std::to_string(shared_bytes) + " lanes " + std::to_string(lanes));
    Context ctx = relpos::test::gpu_kernels_tiles(shared_bytes, lanes, 0, true);
    for (std::uint32_t Q : {1u, 5u})
      for (std::uint32_t splits : {3u, 5u, 6u}) {
        AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 2, .queries = Q, .head_dim = 32, .causal = Q > 1, .bias = AttentionBias::Alibi};
        p.paged.block_size = 16 * (splits % 2 + 1);
        p.paged.max_blocks = p.paged.block_size == 32 ? 7 : 13;  // 224 or 208 keys
        p.key_splits = splits;
        const std::int32_t full = static_cast<std::int32_t>(p.paged.block_size * p.paged.max_blocks);
        expect_matches(ctx, p, random_paged_inputs(rng, p, {full - 3, full}));
      }
  }
}

// An entry the host never checked, outside the cache: the kernels clamp it to the last block, so
// the result is the reference's for the clamped table.
TEST_F(PagedAttentionGpu, DeviceTableOutsideTheCacheIsClampedIntoIt) {
  std::mt19937 rng(2029);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = 3, .head_dim = 16, .causal = true};
    p.paged.block_size = 16;
    p.paged.max_blocks = 3;
    PagedInputs in = random_paged_inputs(rng, p, {40, 20});
    const std::int32_t last = static_cast<std::int32_t>(p.paged.num_blocks) - 1;
    in.block_table[1] = 1'000'000;  // sequence 0, its second block
    in.block_table[3] = -5;         // sequence 1, its first block
    PagedInputs clamped = in;
    clamped.block_table[1] = last;
    clamped.block_table[3] = 0;
    expect_invalid([&] { attention_reference(p, in.host()); }, "block_table[0][1]");
    const AttentionResult want = attention_reference(p, clamped.host());
    const AttentionResult got = gpu_paged_attention(gpu_kernels(kernels), p, in);
    EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
    EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
  }
}

// A device length past the call's keys (the table's row holds no more) is clamped to them: the
// kernels read no table entry past the sequence's row, so the result is that of the length `keys`.
// One query and three (decoding and query rows), both kernel classes.
TEST_F(PagedAttentionGpu, DeviceLengthsPastKeysAreClamped) {
  std::mt19937 rng(2030);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu})
    for (std::uint32_t queries : {1u, 3u}) {
      AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = queries, .head_dim = 16, .causal = true};
      p.paged.block_size = 16;
      p.paged.max_blocks = 3;
      PagedInputs in = random_paged_inputs(rng, p, {48, 20});
      PagedInputs past = in;
      past.cache_lengths = {1000, 20};
      expect_invalid([&] { attention_reference(p, past.host()); }, "cache_lengths[0]");
      SCOPED_TRACE(testing::Message() << (kernels == Kernels::Gpu ? "gpu" : "cpu") << " kernels, Q = " << queries);
      const AttentionResult want = attention_reference(p, in.host());
      const AttentionResult got = gpu_paged_attention(gpu_kernels(kernels), p, past);
      EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
      EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
    }
}

TEST_F(PagedAttentionGpu, MismatchedBuffersAreRefusedBeforeRecording) {
  Context& ctx = gpu();
  std::mt19937 rng(5);
  AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = 2, .head_dim = 8};
  p.paged.block_size = 16;
  p.paged.max_blocks = 2;
  const PagedInputs in = random_paged_inputs(rng, p, {20, 32});
  PagedBuffers b(ctx, p, in);
  Buffer small(ctx, 4), lengths(ctx, 8);
  Recorder r(ctx);
  auto with = [&](auto change) {
    AttentionBuffers x = b.buffers();
    change(x);
    return [&, x] { attention(r, p, x); };
  };
  expect_invalid(with([&](AttentionBuffers& x) { x.k = &small; }), "k buffer");
  expect_invalid(with([&](AttentionBuffers& x) { x.block_table = nullptr; }), "block_table buffer");
  expect_invalid(with([&](AttentionBuffers& x) { x.cache_lengths = &small; }), "cache_lengths buffer");
  expect_invalid(with([&](AttentionBuffers& x) { x.key_lengths = &lengths; }), "key_lengths buffer");
  AttentionParams contiguous = p;
  contiguous.paged = {};
  expect_invalid([&] { attention(r, contiguous, b.buffers()); }, "k buffer");
  AttentionParams unfused = p;
  expect_invalid([&] { attention_unfused(r, unfused, b.buffers(), small); }, "paged.block_size");
}

// A plan's paged steps give what attention() gives, bit for bit, while the lengths grow; a step
// names only its queries (the plan fills in the envelope's keys and offset 0) or repeats them.
TEST_F(PagedAttentionGpu, PlanStepsMatchAttention) {
  Context& ctx = gpu();
  std::mt19937 rng(2030);
  for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Kerple, AttentionBias::Distance, AttentionBias::Alibi}) {
    AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = 2, .head_dim = 16, .causal = true, .bias = bias};
    p.t5.bidirectional = false;
    if (bias == AttentionBias::Alibi) p.key_splits = 3;  // split rows keep their lse relative: a wider partial lse
    p.paged.block_size = 32;
    p.paged.max_blocks = 4;
    PagedInputs in = random_paged_inputs(rng, p, {128, 128});
    AttentionPlan plan(ctx, p);
    PagedBuffers b(ctx, p, in);
    for (std::int32_t step : {1, 37, 100, 128}) {
      SCOPED_TRACE("length " + std::to_string(step));
      in.cache_lengths = {step, 128 - step + 1};
      b.cache_lengths = make_buffer(ctx, in.cache_lengths);
      const AttentionStep st = step % 2 ? AttentionStep{.queries = p.queries} : AttentionStep{p.queries, p.keys, 0};
      run(ctx, [&](Recorder& r) { plan.record(r, st, b.buffers()); });
      const AttentionResult planned = b.download(p);
      const AttentionResult direct = gpu_paged_attention(ctx, p, in);
      EXPECT_EQ(planned.out, direct.out);
      EXPECT_EQ(planned.lse, direct.lse);
      const AttentionResult want = attention_reference(p, in.host());
      EXPECT_LE(normalised_error(planned.out, want.out), kTolF32);
      EXPECT_LE(normalised_error(planned.lse, want.lse), kTolF32);
    }
    expect_invalid([&] { Recorder r(ctx); plan.record(r, {p.queries, p.keys - 1, 0}, b.buffers()); }, "keys");
    expect_invalid([&] { Recorder r(ctx); plan.record(r, {.queries = p.queries, .query_offset = 3}, b.buffers()); }, "query_offset");
    EXPECT_EQ(plan.step_params({.queries = 1}).keys, p.keys);
  }
}

}  // namespace

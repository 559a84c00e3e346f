// Fused attention over caches in every CacheFormat (bf16, q8_0, fp8 e4m3 with per-kv-head scales,
// and f16 or f32 caches under q and out of the other dtype): both kernel classes, contiguous and
// paged caches, packed queries, several bias modes, against the reference over the decoded caches;
// plans against attention(); bad formats, scales and buffers refused before anything is recorded.
#include <relpos/relpos.hpp>

#include <map>
#include <set>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/paged_data.hpp"
#include "support/attention_inputs.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_kernels;
using relpos::test::random_floats;
using relpos::test::random_paged_inputs;
using relpos::test::run;

namespace {

constexpr double kTolF32 = 1e-4;  // as test_attention_gpu.cpp: the decode is exact, the rest float32
constexpr double kTolF16 = 1e-3;  // q and out in f16

constexpr CacheFormat kFormats[] = {CacheFormat::F32, CacheFormat::F16, CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3};

// The caches' bytes: each row of `values` encoded with its kv head's scale.
std::vector<std::uint8_t> encode_rows(const AttentionParams& p, const std::vector<float>& values, const std::vector<float>& scales) {
  const std::size_t D = p.head_dim, row_bytes = cache_row_bytes(p.cache(), p.head_dim), rows = values.size() / D;
  std::vector<std::uint8_t> bytes(rows * row_bytes);
  for (std::size_t row = 0; row < rows; ++row) {
    const std::uint32_t hk = p.cache_row_kv_head(row);
    encode_cache_row(p.cache(), std::span<const float>(values).subspan(row * D, D), std::span<std::uint8_t>(bytes).subspan(row * row_bytes, row_bytes),
                     scales.empty() ? 1.0f : scales[hk]);
  }
  return bytes;
}

// One call over formatted caches, on the host and on the device.
struct FormatCase {
  AttentionParams p;
  std::vector<float> q, bias, rel_keys, rel_values;
  std::vector<std::uint8_t> k, v;
  std::vector<std::int32_t> block_table, cache_lengths, query_lengths;
  AttentionHostInputs host() const {
    return {q, {}, {}, bias, rel_keys, rel_values, {}, block_table, cache_lengths, query_lengths, k, v};
  }
};

FormatCase make_case(std::mt19937& rng, AttentionParams p, CacheFormat f, bool paged, const std::vector<std::int32_t>& lengths = {},
                     const std::vector<std::int32_t>& query_lengths = {}) {
  FormatCase c;
  p.cache_format = f;
  if (cache_format_scaled(f)) {  // scales that map the values into e4m3's range unevenly per head
    for (std::uint32_t h = 0; h < p.kv_heads; ++h) {
      p.k_scales.push_back(0.004f * static_cast<float>(h + 1));
      p.v_scales.push_back(0.01f / static_cast<float>(h + 1));
    }
  }
  std::vector<float> k, v;
  if (paged) {
    test::PagedInputs in = random_paged_inputs(rng, p, lengths);
    c.q = in.q;
    c.bias = in.bias;
    c.rel_keys = in.rel_keys;
    c.rel_values = in.rel_values;
    c.block_table = in.block_table;
    c.cache_lengths = in.cache_lengths;
    k = in.k;
    v = in.v;
  } else {
    test::AttentionInputs in = test::random_attention_inputs(rng, p, std::uint64_t{p.batch} * p.kv_heads * p.keys * p.head_dim);
    c.q = in.q;
    c.bias = in.bias;
    c.rel_keys = in.rel_keys;
    c.rel_values = in.rel_values;
    k = in.k;
    v = in.v;
  }
  c.query_lengths = query_lengths;
  c.k = encode_rows(p, k, p.k_scales);
  c.v = encode_rows(p, v, p.v_scales);
  c.p = p;
  return c;
}

AttentionResult gpu_attention(Context& ctx, const FormatCase& c) {
  const AttentionParams& p = c.p;
  Buffer q = make_float_buffer(ctx, c.q, p.dtype), k = make_buffer(ctx, std::span<const std::uint8_t>(c.k)),
         v = make_buffer(ctx, std::span<const std::uint8_t>(c.v)), out(ctx, p.rows() * p.head_dim * dtype_size(p.output_dtype())),
         lse(ctx, p.rows() * 4);
  Buffer bias, rk, rv, table, lengths, qlen;
  AttentionBuffers b{&q, &k, &v, &out, &lse};
  if (!c.bias.empty()) b.bias = &(bias = make_buffer(ctx, std::span<const float>(c.bias)));
  if (!c.rel_keys.empty()) {
    b.rel_keys = &(rk = make_buffer(ctx, std::span<const float>(c.rel_keys)));
    b.rel_values = &(rv = make_buffer(ctx, std::span<const float>(c.rel_values)));
  }
  if (p.paged.enabled()) {
    b.block_table = &(table = make_buffer(ctx, std::span<const std::int32_t>(c.block_table)));
    b.cache_lengths = &(lengths = make_buffer(ctx, std::span<const std::int32_t>(c.cache_lengths)));
  }
  if (p.packed()) b.query_lengths = &(qlen = make_buffer(ctx, std::span<const std::int32_t>(c.query_lengths)));
  run(ctx, [&](Recorder& r) { attention(r, p, b); });
  return {download_floats(out, p.rows() * p.head_dim, p.output_dtype()), lse.download<float>(p.rows())};
}

void expect_matches(Context& ctx, const FormatCase& c) {
  SCOPED_TRACE(std::string(cache_format_name(c.p.cache())) + " bias " + std::string(attention_bias_info(c.p.bias).name) + " q " +
               std::string(dtype_name(c.p.dtype)) + (c.p.paged.enabled() ? " paged" : "") + " H " + std::to_string(c.p.heads) + "/" +
               std::to_string(c.p.kv_heads) + " Q " + std::to_string(c.p.queries) + " K " + std::to_string(c.p.keys) + " D " +
               std::to_string(c.p.head_dim));
  const AttentionResult want = attention_reference(c.p, c.host());
  const AttentionResult got = gpu_attention(ctx, c);
  EXPECT_LE(normalised_error(got.out, want.out), c.p.output_dtype() == DType::F16 ? kTolF16 : kTolF32);
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
}

class AttentionFormatsGpu : public GpuTest {};

// One case in a kernel class: contiguous, or with `lengths` a paged cache of 16-key blocks.
void expect_format_case(Kernels kernels, std::mt19937& rng, AttentionParams p, CacheFormat f, const std::vector<std::int32_t>& lengths = {}) {
  if (!lengths.empty()) {
    p.paged.block_size = 16;
    p.paged.max_blocks = (p.keys + 15) / 16;
  }
  SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
  expect_matches(gpu_kernels(kernels), lengths.empty() ? make_case(rng, p, f, false) : make_case(rng, p, f, true, lengths));
}

TEST_F(AttentionFormatsGpu, EveryFormatContiguousAndPagedInBothKernelClasses) {
  std::mt19937 rng(2040);
  const AttentionBias biases[] = {AttentionBias::T5, AttentionBias::Alibi, AttentionBias::Shaw, AttentionBias::None, AttentionBias::Kerple};
  int n = 0;
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu})
    for (CacheFormat f : kFormats)
      for (bool paged : {false, true}) {
        const AttentionBias bias = biases[n++ % 5];
        AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 2, .queries = paged ? 3u : 19u, .keys = 70, .head_dim = f == CacheFormat::Q8_0 ? 64u : 20u,
                          .dtype = n % 3 == 0 ? DType::F16 : DType::F32, .causal = n % 2 == 0, .bias = bias, .max_relative_position = 5};
        p.t5.bidirectional = false;
        expect_format_case(kernels, rng, p, f, paged ? std::vector<std::int32_t>{70, 33} : std::vector<std::int32_t>{});
      }
}

// Decoding (one query: the CPU class's lanes take key splits; split keys merged), head_dim 128
// with grouped-query heads, and packed queries beside it.
TEST_F(AttentionFormatsGpu, DecodingAndPackedQueries) {
  std::mt19937 rng(2041);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu})
    for (CacheFormat f : {CacheFormat::Q8_0, CacheFormat::FP8_E4M3}) {
      AttentionParams p{.batch = 3, .heads = 8, .kv_heads = 2, .queries = 1, .head_dim = 128, .causal = true, .bias = AttentionBias::Alibi};
      p.paged.block_size = 16;
      p.paged.max_blocks = 40;
      SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
      expect_matches(gpu_kernels(kernels), make_case(rng, p, f, true, {640, 1, 300}));
      AttentionParams packed = p;
      packed.queries = 7;
      packed.total_queries = 7 + 1;
      packed.bias = AttentionBias::T5;
      packed.t5.bidirectional = false;
      expect_matches(gpu_kernels(kernels), make_case(rng, packed, f, true, {640, 1, 300}, {7, 0, 1}));
    }
}

// Decoding in every format, each key's row read whole (f16 and bf16 in 16-byte pairs of words when
// head_dim / 4 is even; q8_0 by its row's words when head_dim is a multiple of 64, 8 bytes a load
// when of 128; fp8 16 bytes a load when head_dim is a multiple of 16; otherwise word by word), with
// the query heads of a kv head together (groups of 4, 8 and 3: on a CPU device slabs of 4, 8 and 3
// heads) and in every bias mode that differs per head.
TEST_F(AttentionFormatsGpu, DecodingEveryFormatAndRowWidth) {
  std::mt19937 rng(2042);
  const AttentionBias biases[] = {AttentionBias::Alibi, AttentionBias::T5, AttentionBias::Shaw, AttentionBias::Kerple};
  int n = 0;
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu})
    for (CacheFormat f : kFormats)
      for (std::uint32_t head_dim : {20u, 64u, 96u, 128u}) {
        if (f == CacheFormat::Q8_0 ? head_dim == 20 : head_dim == 64 || head_dim == 96) continue;
        const bool paged = n % 2 == 0;
        const std::uint32_t heads = n % 3 == 0 ? 6u : n % 3 == 1 ? 16u : 8u;  // 16: a slab of 8 on a CPU device
        AttentionParams p{.batch = 2, .heads = heads, .kv_heads = 2, .queries = 1, .keys = 300, .head_dim = head_dim,
                          .dtype = n % 4 == 1 ? DType::F16 : DType::F32, .causal = true, .bias = biases[n % 4], .max_relative_position = 6};
        p.t5.bidirectional = false;
        ++n;
        expect_format_case(kernels, rng, p, f, paged ? std::vector<std::int32_t>{300, 129} : std::vector<std::int32_t>{});
      }
}

// Groups of query heads that no slab of 2 to 4 heads divides (7 in slabs of 4 and 3, 5 in 3 and 2,
// and 7 over one kv head): the last slab of each group has idle rows, which read the slab's last
// head and store nothing. attention_fused (CPU class), attention_decode (head_dim 32 in subgroups
// of 8) and attention_tiled with the heads as rows (head_dim 128), every bias mode that differs
// per head, contiguous and paged, f32 and f16.
TEST_F(AttentionFormatsGpu, DecodingGroupsThatNoSlabDivides) {
  std::mt19937 rng(2044);
  const AttentionBias biases[] = {AttentionBias::Alibi, AttentionBias::T5, AttentionBias::Dense, AttentionBias::Shaw};
  int n = 0;
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu})
    for (std::uint32_t head_dim : {32u, 128u})
      for (const auto& [heads, kv_heads] : {std::pair{14u, 2u}, std::pair{10u, 2u}, std::pair{7u, 1u}}) {
        if (kernels == Kernels::Cpu && (head_dim == 32 || kv_heads == 1)) continue;  // one kernel at any head_dim
        AttentionParams p{.batch = 2, .heads = heads, .kv_heads = kv_heads, .queries = 1, .keys = 300, .head_dim = head_dim,
                          .dtype = n % 2 ? DType::F16 : DType::F32, .causal = true, .bias = biases[n % 4], .max_relative_position = 6};
        p.t5.bidirectional = false;
        const bool paged = n % 3 != 0;
        if (!paged) p.query_offset = p.keys - 1;  // the query after the keys
        const CacheFormat f = n % 2 ? CacheFormat::F16 : CacheFormat::F32;
        ++n;
        expect_format_case(kernels, rng, p, f, paged ? std::vector<std::int32_t>{300, 129} : std::vector<std::int32_t>{});
      }
}

// attention_decode loads a step's values with its keys where a lane's registers hold both; where
// they do not (Shaw over an f32 cache at head_dim 128 with shuffles within 8 lanes, as lavapipe's
// and dg2's subgroups: a key's and its value's 4 words each, with their rel_keys and rel_values
// rows, would take 64 registers),
// one key a step, its value loaded after the weights. That form, contiguous and paged, split or not
// (AttentionSplits checks which shapes take it), on any device: shuffles within 8 lanes also lie
// within a wider subgroup.
TEST_F(AttentionFormatsGpu, DecodingWithValuesLoadedAfterTheWeights) {
  std::mt19937 rng(2051);
  Context ctx = test::gpu_kernels_tiles(32768, 64, 0, true, 0, 8);
  for (const bool paged : {false, true}) {
    AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 2, .queries = 1, .keys = 300, .head_dim = 128, .causal = true,
                      .bias = AttentionBias::Shaw, .max_relative_position = 6};
    if (!paged) p.query_offset = p.keys - 1;
    if (paged) {
      p.key_splits = 3;
      p.paged.block_size = 16;
      p.paged.max_blocks = (p.keys + 15) / 16;
    }
    expect_matches(ctx, paged ? make_case(rng, p, CacheFormat::F32, true, {300, 129}) : make_case(rng, p, CacheFormat::F32, false));
  }
}

// Grouped-query heads that attention_decode cannot hold together (head_dim 128 in subgroups of 8,
// as dg2 and lavapipe run it; head_dim 256 in subgroups of up to 16): attention_tiled decodes them
// with a row per query head, so that each staged key and value serves every query head of its kv
// head. Every bias mode (the per-distance rows, ALiBi's slopes and the dense bias are per head, so
// here per row), contiguous and paged (blocks of 16 and 256), f32, f16 and q8_0 caches, split keys,
// packed queries.
TEST_F(AttentionFormatsGpu, GroupedQueryHeadsAsRowsOfTheTiledKernel) {
  std::mt19937 rng(2043);
  // Shuffles within 8 lanes, as lavapipe's subgroups: there attention_decode holds no head of 256
  // (which a device of 32-lane subgroups decodes itself), so the heads go as rows.
  Context ctx = test::gpu_kernels_tiles(32768, 64, 0, true, 0, 8);
  int n = 0;
  for (std::uint32_t head_dim : {128u, 256u})
    for (const AttentionBiasInfo& info : attention_biases()) {
      const CacheFormat f = n % 3 == 0 ? CacheFormat::F32 : n % 3 == 1 ? CacheFormat::F16 : CacheFormat::Q8_0;
      AttentionParams p{.batch = 2, .heads = 8, .kv_heads = 2, .queries = 1, .keys = 300, .head_dim = head_dim,
                        .dtype = n % 4 == 1 ? DType::F16 : DType::F32, .causal = true, .bias = info.bias, .max_relative_position = 6};
      p.t5.bidirectional = false;
      p.sandwich_dim = 64;
      if (n % 5 == 0) p.key_splits = 3;
      const bool paged = n % 2 == 0;
      if (!paged) p.query_offset = p.keys - 1;  // the query after the keys (a paged one: after its cache)
      if (paged) {
        p.paged.block_size = n % 4 == 0 ? 16 : 256;
        p.paged.max_blocks = (p.keys + p.paged.block_size - 1) / p.paged.block_size;
      }
      ++n;
      expect_matches(ctx, paged ? make_case(rng, p, f, true, {300, 129}) : make_case(rng, p, f, false));
    }
  // Packed: one decoding sequence beside one without queries (its workgroups leave at once).
  for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Alibi}) {
    AttentionParams p{.batch = 2, .heads = 8, .kv_heads = 2, .queries = 1, .keys = 320, .head_dim = 128, .causal = true, .bias = bias};
    p.t5.bidirectional = false;
    p.paged.block_size = 16;
    p.paged.max_blocks = 20;
    p.total_queries = 1;
    expect_matches(ctx, make_case(rng, p, CacheFormat::F16, true, {300, 129}, {0, 1}));
  }
  // Groups of 3 and 2 query heads per kv head: 3 rows of 21 lanes (63, not a whole number of
  // subgroups), 2 rows of 32; groups of 7 and 5: slabs of 4 and 3, of 3 and 2.
  for (const std::uint32_t heads : {6u, 12u, 4u, 14u, 10u})
    for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Alibi, AttentionBias::Shaw}) {
      AttentionParams p{.batch = 2, .heads = heads, .kv_heads = 2, .queries = 1, .keys = 300, .head_dim = 256, .causal = true,
                        .bias = bias, .max_relative_position = 6};
      p.t5.bidirectional = false;
      p.paged.block_size = 16;
      p.paged.max_blocks = 19;
      expect_matches(ctx, make_case(rng, p, CacheFormat::F16, true, {300, 129}));
    }
  // The rows' counts (BR) of the pipelines that decoded heads as rows in `c`.
  auto rows_of_heads = [](Context& c) {
    std::set<std::uint32_t> rows;
    for (const PipelineReport& rep : pipeline_reports(c, false)) {
      const std::map<std::string, std::uint32_t> k(rep.constants.begin(), rep.constants.end());
      if (rep.shader.starts_with("attention_tiled") && k.at("ROWS_ARE_HEADS") != 0) rows.insert(k.at("BR"));
    }
    return rows;
  };
  EXPECT_EQ(rows_of_heads(ctx), (std::set<std::uint32_t>{2, 3, 4}));
  // In chunks: a binding holds one kv head's keys (150 KiB), so each dispatch covers one kv head's
  // slabs of heads (bh_first 0, 4, 8, ...; with 7 heads a kv head 0, 7, 14, ..., slabs of 4 and 3)
  // and binds its parts of q, k, v, the bias and out at offsets.
  {
    Context chunked = test::gpu_kernels_tiles(32768, 64, 3, true, 200 * 1024, 8);
    for (const std::uint32_t heads : {8u, 14u})
      for (AttentionBias bias : {AttentionBias::Dense, AttentionBias::Alibi, AttentionBias::Distance}) {
        AttentionParams p{.batch = 2, .heads = heads, .kv_heads = 2, .queries = 1, .keys = 300, .head_dim = 128, .query_offset = 299,
                          .causal = true, .bias = bias};
        expect_matches(chunked, make_case(rng, p, CacheFormat::F32, false));
      }
    EXPECT_EQ(rows_of_heads(chunked), (std::set<std::uint32_t>{4}));
  }
}

// A plan over a q8_0 cache gives what attention() gives, bit for bit.
TEST_F(AttentionFormatsGpu, PlanStepsMatchAttention) {
  Context& ctx = gpu();
  std::mt19937 rng(2042);
  for (CacheFormat f : {CacheFormat::Q8_0, CacheFormat::FP8_E4M3}) {
    AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 1, .head_dim = 32, .causal = true, .bias = AttentionBias::T5};
    p.t5.bidirectional = false;
    p.paged.block_size = 16;
    p.paged.max_blocks = 8;
    const FormatCase c = make_case(rng, p, f, true, {100, 128});
    AttentionPlan plan(ctx, c.p);
    Buffer q = make_float_buffer(ctx, c.q, DType::F32), k = make_buffer(ctx, std::span<const std::uint8_t>(c.k)),
           v = make_buffer(ctx, std::span<const std::uint8_t>(c.v)), out(ctx, c.p.rows() * c.p.head_dim * 4), lse(ctx, c.p.rows() * 4),
           bias = make_buffer(ctx, std::span<const float>(c.bias)), table = make_buffer(ctx, std::span<const std::int32_t>(c.block_table)),
           lengths = make_buffer(ctx, std::span<const std::int32_t>(c.cache_lengths));
    AttentionBuffers b{&q, &k, &v, &out, &lse, &bias};
    b.block_table = &table;
    b.cache_lengths = &lengths;
    run(ctx, [&](Recorder& r) { plan.record(r, {1, c.p.keys, 0}, b); });
    const AttentionResult direct = gpu_attention(ctx, c);
    EXPECT_EQ(out.download<float>(c.p.rows() * c.p.head_dim), direct.out);
    EXPECT_EQ(lse.download<float>(c.p.rows()), direct.lse);
  }
}

TEST(AttentionFormats, BadFormatsAndScalesAreRefused) {
  AttentionParams p{.batch = 1, .heads = 2, .kv_heads = 2, .queries = 1, .keys = 16, .head_dim = 48};
  p.cache_format = CacheFormat::Q8_0;
  expect_invalid([&] { p.validate(); }, "head_dim");  // not a multiple of 32
  p.head_dim = 64;
  EXPECT_NO_THROW(p.validate());
  p.k_scales = {1.0f, 1.0f};
  expect_invalid([&] { p.validate(); }, "k_scales");  // a q8_0 cache has none
  p.cache_format = CacheFormat::FP8_E4M3;
  p.v_scales = {1.0f};
  expect_invalid([&] { p.validate(); }, "v_scales");  // one per kv head
  p.v_scales = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  expect_invalid([&] { p.validate(); }, "v_scales[1]");
  p.v_scales = {1.0f, std::numeric_limits<float>::infinity()};
  expect_invalid([&] { p.validate(); }, "v_scales[1]");
  p.v_scales = {1.0f, 0.0f};
  expect_invalid([&] { p.validate(); }, "v_scales[1]");
  p.v_scales = {1.0f, 2.0f};
  EXPECT_NO_THROW(p.validate());
}

TEST_F(AttentionFormatsGpu, MismatchedCachesAreRefusedBeforeRecording) {
  Context& ctx = gpu();
  std::mt19937 rng(7);
  AttentionParams p{.batch = 1, .heads = 2, .kv_heads = 1, .queries = 2, .keys = 40, .head_dim = 32};
  const FormatCase c = make_case(rng, p, CacheFormat::Q8_0, false);
  Buffer q = make_float_buffer(ctx, c.q, DType::F32), k = make_buffer(ctx, std::span<const std::uint8_t>(c.k)),
         v = make_buffer(ctx, std::span<const std::uint8_t>(c.v)), out(ctx, c.p.rows() * c.p.head_dim * 4), f32_cache(ctx, 40 * 32 * 4);
  Recorder r(ctx);
  AttentionBuffers b{&q, &k, &v, &out};
  EXPECT_NO_THROW(attention(r, c.p, b));
  AttentionBuffers wrong = b;
  wrong.k = &f32_cache;  // a float32 cache's size, not q8_0's 40 rows of 34 bytes
  expect_invalid([&] { attention(r, c.p, wrong); }, "k buffer");
  AttentionParams f32 = c.p;
  f32.cache_format.reset();
  expect_invalid([&] { attention(r, f32, b); }, "k buffer");
}

}  // namespace

// Fused attention on the GPU against the float64 reference: every bias mode with causal masks,
// query offsets, key padding, memory prefixes, grouped-query heads, f16 and f32 storage, Q != K
// and decoding (split keys merged by log-sum-exp); the T5 mode against the unfused GPU bias; the
// merge op against attention over the whole key range; the split paths under lowered limits.
#include <relpos/relpos.hpp>
#include <relpos/ring.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <vector>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_kernels;
using relpos::test::gpu_kernels_tiles;
using relpos::test::gpu_small_limits;
using relpos::test::gpu_without_shuffles;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

// Tolerances of normalised_error (max |got - want| / max(1, max |want|)):
// f32: float32 dot products over D <= 64 terms, float32 sums over <= 1000 weights and the
// device's exp/log (a few ulp) each stay near 1e-5 relative; 1e-4 leaves margin while any wrong
// weight, bias or mask moves the result by far more.
// f16: q, k, v are stored as halves (the reference reads the same rounded values); the output is
// rounded to half once: 2^-11 relative, so 1e-3.
// bf16: q, k, v rounded to bfloat16 (8 significant bits), the output once: 2^-9 relative, so 8e-3.
constexpr double kTolF32 = 1e-4;
constexpr double kTolF16 = 1e-3;
constexpr double kTolBF16 = 8e-3;
double tolerance(DType t) { return t == DType::BF16 ? kTolBF16 : t == DType::F16 ? kTolF16 : kTolF32; }

struct Inputs {
  std::vector<float> q, k, v, bias, rel_keys, rel_values;
  std::vector<std::uint32_t> lengths;
  AttentionHostInputs host() const { return {q, k, v, bias, rel_keys, rel_values, lengths, {}, {}}; }
};


Inputs random_inputs(std::mt19937& rng, const AttentionParams& p) {
  Inputs in;
  const std::size_t D = p.head_dim, kv = std::size_t{p.batch} * p.kv_heads * p.keys * D;
  in.q = rounded_to_storage(random_floats(rng, p.rows() * D), p.dtype);
  in.k = rounded_to_storage(random_floats(rng, kv), p.dtype);
  in.v = rounded_to_storage(random_floats(rng, kv), p.dtype);
  if (p.bias == AttentionBias::Alibi) in.bias = random_floats(rng, p.heads, 0.0f, 1.0f);
  else in.bias = random_floats(rng, p.bias_elements(), -3.0f, 3.0f);
  if (p.bias == AttentionBias::Shaw) {
    in.rel_keys = random_floats(rng, (2 * p.max_relative_position + 1) * D);
    in.rel_values = random_floats(rng, (2 * p.max_relative_position + 1) * D);
  }
  return in;
}

AttentionResult gpu_attention(Context& ctx, const AttentionParams& p, const Inputs& in) {
  const std::size_t n = p.rows() * p.head_dim;
  Buffer q = make_float_buffer(ctx, in.q, p.dtype), k = make_float_buffer(ctx, in.k, p.dtype), v = make_float_buffer(ctx, in.v, p.dtype);
  Buffer out(ctx, n * dtype_size(p.output_dtype())), lse(ctx, p.rows() * 4);
  Buffer bias, rk, rv, lengths;
  AttentionBuffers b{&q, &k, &v, &out, &lse};
  if (!in.bias.empty()) b.bias = &(bias = make_buffer(ctx, in.bias));
  if (!in.rel_keys.empty()) {
    b.rel_keys = &(rk = make_buffer(ctx, in.rel_keys));
    b.rel_values = &(rv = make_buffer(ctx, in.rel_values));
  }
  if (!in.lengths.empty()) b.key_lengths = &(lengths = make_buffer(ctx, in.lengths));
  run(ctx, [&](Recorder& r) { attention(r, p, b); });
  return {download_floats(out, n, p.output_dtype()), lse.download<float>(p.rows())};
}

// The GPU's result where non-finite inputs may make rows NaN: its NaN rows of out and of lse must
// be the reference's, the other rows within the tolerances. With the NaN rows of each.
struct NanRowsResult {
  AttentionResult got;
  std::vector<bool> out_rows, lse_rows;
};
NanRowsResult expect_reference_nan_rows(Context& ctx, const AttentionParams& p, const Inputs& in) {
  const AttentionResult want = attention_reference(p, in.host());
  NanRowsResult r{gpu_attention(ctx, p, in), {}, {}};
  r.out_rows = test::expect_nan_rows_match(r.got.out, want.out, p.head_dim, tolerance(p.dtype), "out");
  r.lse_rows = test::expect_nan_rows_match(r.got.lse, want.lse, 1, kTolF32, "lse");
  return r;
}

std::string describe(const AttentionParams& p) {
  return std::string(attention_bias_info(p.bias).name) + " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) +
         " Hkv=" + std::to_string(p.kv_heads) + " Q=" + std::to_string(p.queries) + " K=" + std::to_string(p.keys) +
         " D=" + std::to_string(p.head_dim) + " " + std::string(dtype_name(p.dtype)) + " out " + std::string(dtype_name(p.output_dtype())) +
         (p.causal ? " causal" : "") +
         " off=" + std::to_string(p.query_offset) + " M=" + std::to_string(p.memory_prefix) +
         " splits=" + std::to_string(p.key_splits);
}

void expect_matches(Context& ctx, const AttentionParams& p, const Inputs& in) {
  SCOPED_TRACE(describe(p));
  const AttentionResult want = attention_reference(p, in.host());
  const AttentionResult got = gpu_attention(ctx, p, in);
  EXPECT_LE(normalised_error(got.out, want.out), std::max(tolerance(p.dtype), tolerance(p.output_dtype())));
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
}

AttentionParams random_params(std::mt19937& rng, AttentionBias bias, DType dtype) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  AttentionParams p;
  p.bias = bias;
  p.dtype = dtype;
  p.batch = pick(1, 2);
  p.kv_heads = pick(1, 2);
  p.heads = p.kv_heads * pick(1, 3);
  p.queries = pick(1, 40);
  p.keys = pick(1, 70);
  p.head_dim = pick(0, 1) ? 8 : 20;
  p.causal = pick(0, 1);
  switch (pick(0, 2)) {
    case 0: p.query_offset = 0; break;
    case 1: p.query_offset = std::int64_t{p.keys} - p.queries; break;
    default: p.query_offset = pick(-6, 6); break;
  }
  if (pick(0, 2) == 0) p.memory_prefix = pick(0, std::min<int>(p.keys, 6));
  if (pick(0, 1)) p.scale = 1.0f;
  if (pick(0, 2) == 0) p.key_splits = pick(1, std::min<int>(p.keys, 4));
  p.t5.bidirectional = pick(0, 1);
  p.t5.num_buckets = pick(p.t5.bidirectional ? 4 : 2, 20);
  p.t5.max_distance = p.t5.max_exact() + pick(1, 30);
  p.t5.scale = pick(0, 1) ? 1.0f : 0.5f;
  p.max_relative_position = pick(1, 5);
  return p;
}

class AttentionGpu : public GpuTest {};

constexpr AttentionBias kModes[] = {AttentionBias::None, AttentionBias::T5, AttentionBias::Distance,
                                    AttentionBias::Alibi, AttentionBias::Shaw, AttentionBias::Dense};

}  // namespace

TEST_F(AttentionGpu, EveryBiasModeMatchesReference) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 36; ++trial) {
    const AttentionParams p = random_params(rng, kModes[trial % 6], trial % 12 < 6 ? DType::F32 : DType::F16);
    Inputs in = random_inputs(rng, p);
    if (trial % 3 == 0) {  // key padding, including a batch with no keys at all
      std::uniform_int_distribution<std::uint32_t> len(0, p.keys);
      for (std::uint32_t b = 0; b < p.batch; ++b) in.lengths.push_back(b == 1 ? 0 : len(rng));
    }
    expect_matches(gpu(), p, in);
  }
}

// bfloat16 q and out (k and v bfloat16 too, or another cache format), in both kernel classes and
// every bias mode: prefill, decoding (one query; split keys merged into a bfloat16 out), an f32 out
// from bf16 q and a bf16 out from f32 q.
TEST_F(AttentionGpu, Bf16QueriesAndOutputsInBothKernelClasses) {
  std::mt19937 rng(2030);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
    for (int trial = 0; trial < 12; ++trial) {
      AttentionParams p = random_params(rng, kModes[trial % 6], trial % 3 == 2 ? DType::F32 : DType::BF16);
      if (trial % 3 == 1) p.out_dtype = DType::F32;
      if (trial % 3 == 2) p.out_dtype = DType::BF16;
      if (trial % 2 == 0) p.queries = 1, p.query_offset = std::int64_t{p.keys} - 1, p.key_splits = std::min<std::uint32_t>(p.keys, 3);
      expect_matches(gpu_kernels(kernels), p, random_inputs(rng, p));
    }
  }
}

// The kernels a device without subgroup shuffles gets (no shared key loads in the fused op,
// matmul.comp in the unfused pipeline), run here on a context that hides the shuffles.
TEST_F(AttentionGpu, EveryBiasModeWithoutSubgroupShuffles) {
  std::mt19937 rng(2025);
  for (int trial = 0; trial < 12; ++trial) {
    const AttentionParams p = random_params(rng, kModes[trial % 6], trial % 4 < 2 ? DType::F32 : DType::F16);
    expect_matches(gpu_without_shuffles(), p, random_inputs(rng, p));
  }
}

// Both kernel classes on every device: the GPU class (attention_tiled) and the CPU class
// (attention_fused), whichever the device would pick itself.
TEST_F(AttentionGpu, EveryBiasModeInBothKernelClasses) {
  std::mt19937 rng(2026);
  for (Kernels kernels : {Kernels::Gpu, Kernels::Cpu}) {
    SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
    for (int trial = 0; trial < 24; ++trial) {
      const AttentionParams p = random_params(rng, kModes[trial % 6], trial % 12 < 6 ? DType::F32 : DType::F16);
      Inputs in = random_inputs(rng, p);
      if (trial % 3 == 0) {
        std::uniform_int_distribution<std::uint32_t> len(0, p.keys);
        for (std::uint32_t b = 0; b < p.batch; ++b) in.lengths.push_back(b == 1 ? 0 : len(rng));
      }
      expect_matches(gpu_kernels(kernels), p, in);
    }
  }
}

// attention_tiled at several workgroup and tile sizes: lanes per query row from 1 to 8 (and 64 when
// decoding), key tiles from 4 to 64 (lower shared memory), head sizes that are and are not a
// multiple of the lanes per row or of 4 words, the row maxima through subgroup shuffles where the
// device has them (attention_tiled_shuffle) and through shared memory only. lavapipe runs a
// workgroup's lanes in a fixed order, which could hide a missing barrier; so many shapes make a
// stale tile show in some.
TEST_F(AttentionGpu, GpuKernelsAtSeveralTileSizes) {
  struct Tiles {
    std::uint32_t shared_bytes, lanes;
    bool shuffles;
  };
  std::mt19937 rng(77);
  for (const Tiles t : {Tiles{2048, 64, true}, Tiles{4096, 32, true}, Tiles{8192, 16, true}, Tiles{32768, 8, true}, Tiles{32768, 64, true},
                        Tiles{32768, 64, false}, Tiles{4096, 32, false}}) {
    SCOPED_TRACE("shared " + std::to_string(t.shared_bytes) + " lanes " + std::to_string(t.lanes) + (t.shuffles ? "" : " no shuffles"));
    Context ctx = gpu_kernels_tiles(t.shared_bytes, t.lanes, 0, t.shuffles);
    for (int trial = 0; trial < 6; ++trial) {
      AttentionParams p = random_params(rng, kModes[trial % 6], trial % 2 ? DType::F16 : DType::F32);
      p.head_dim = std::vector<std::uint32_t>{4, 12, 20, 36}[trial % 4];
      if (trial >= 4) p.queries = 1;  // decoding
      if (t.shared_bytes == 2048) p.head_dim = std::min<std::uint32_t>(p.head_dim, 12);
      p.keys = std::max<std::uint32_t>(p.keys, 1) + 50 * (trial % 3);
      if (p.key_splits > p.keys) p.key_splits = 0;
      if (p.query_offset > 6) p.query_offset = std::int64_t{p.keys} - p.queries;
      expect_matches(ctx, p, random_inputs(rng, p));
    }
    // Decoding on a device that shuffles (the workgroup a whole number of subgroups): attention_decode,
    // its lanes in groups of a power of two within the subgroup that share each key; otherwise
    // attention_tiled with one query row, its row maxima through shared memory only (or a row per
    // query head of a kv head, where attention_decode cannot hold them all).
    const std::uint32_t sub = ctx.limits().subgroup_size;
    const bool shuffles = t.shuffles && ctx.limits().subgroup_shuffle && t.lanes % sub == 0 && sub > 1;
    bool seen = false;
    for (const PipelineReport& rep : pipeline_reports(ctx, false)) {
      std::map<std::string, std::uint32_t> c(rep.constants.begin(), rep.constants.end());
      if (rep.shader == "attention_decode") {
        seen = true;
        EXPECT_TRUE(shuffles);
        EXPECT_EQ(c["WG_X"], t.lanes);
        EXPECT_TRUE(std::has_single_bit(c["KG"]) && c["KG"] <= std::min(t.lanes, sub)) << c["KG"];
        continue;
      }
      if (rep.shader.rfind("attention_tiled", 0) != 0) continue;
      // Decoding: one row, or (grouped-query heads that attention_decode cannot hold) a row per head.
      const bool decoding = c["BR"] == 1 || c["ROWS_ARE_HEADS"] == 1;
      seen = seen || decoding;
      if (c["BR"] == 1) EXPECT_FALSE(shuffles);
      EXPECT_EQ(rep.shader, "attention_tiled") << "rows " << c["BR"];
      EXPECT_EQ(c["SHUFFLE_LANES"], 1u) << "rows " << c["BR"];
    }
    EXPECT_TRUE(seen);
  }
}

// Where not even a tile of 4 keys fits the device's shared memory at this head size, the GPU
// kernels refuse clearly, naming head_dim and the bytes.
TEST_F(AttentionGpu, GpuKernelsRefuseAHeadTooLargeForSharedMemory) {
  Context ctx = gpu_kernels_tiles(2048, 64);
  const AttentionParams p{.heads = 1, .kv_heads = 1, .queries = 4, .keys = 8, .head_dim = 64};
  std::mt19937 rng(1);
  const Inputs in = random_inputs(rng, p);
  try {
    gpu_attention(ctx, p, in);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim = 64"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shared memory"), std::string::npos) << e.what();
  }
}

// One query against a long cache: the keys are split across workgroups and merged by lse.
TEST_F(AttentionGpu, DecodingSplitsKeysAndMerges) {
  std::mt19937 rng(7);
  for (AttentionBias mode : kModes)
    for (DType dtype : {DType::F32, DType::F16}) {
      AttentionParams p{.heads = 4, .kv_heads = 2, .queries = 1, .keys = 701, .head_dim = 20, .dtype = dtype, .scale = 1.0f,
                        .query_offset = 701 - 5 - 1, .causal = true, .memory_prefix = 5, .bias = mode, .max_relative_position = 3};
      p.t5.bidirectional = false;
      Inputs in = random_inputs(rng, p);
      in.lengths = {690};
      expect_matches(gpu(), p, in);
      expect_matches(gpu_kernels(Kernels::Gpu), p, in);
    }
  // More splits than lanes in a workgroup, and splits past the last key (empty, lse = -inf).
  const AttentionParams p{.batch = 2, .heads = 3, .kv_heads = 3, .queries = 1, .keys = 300, .head_dim = 8, .bias = AttentionBias::Alibi,
                          .key_splits = 37};
  expect_matches(gpu(), p, random_inputs(rng, p));
}

// An additive padding mask (HF style: -1e4 on every key but the last) in decoding: each key
// group of a workgroup has its own running maximum, and they meet through shared memory rescaled to
// the largest; a group whose keys are all "masked" sits 1e4 below the one that holds the last key,
// so merging against any other group's maximum overflows exp. Keys within one split and across
// several, both kernel classes.
TEST_F(AttentionGpu, DecodingWithAnAdditiveMaskOnAllButTheLastKey) {
  std::mt19937 rng(63);
  for (const std::uint32_t keys : {63u, 700u})
    for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
      const AttentionParams p{.heads = 2, .queries = 1, .keys = keys, .head_dim = 64, .bias = AttentionBias::Dense};
      Inputs in = random_inputs(rng, p);
      for (std::uint32_t h = 0; h < 2; ++h)
        for (std::uint32_t j = 0; j < keys; ++j) in.bias[h * keys + j] = j + 1 == keys ? 0.0f : -1e4f;
      SCOPED_TRACE(kernels == Kernels::Gpu ? "gpu kernels" : "cpu kernels");
      expect_matches(gpu_kernels(kernels), p, in);
    }
}

// A few queries against a long cache (speculative decoding's drafts): the CPU class decodes up to
// 16 as it decodes one (a lane takes one query over one key split), the GPU class up to 8 (a
// workgroup one query of a kv head's heads over one split); more take query rows.
TEST_F(AttentionGpu, AFewQueriesSplitKeysAsDecodingDoes) {
  std::mt19937 rng(8);
  int n = 0;
  // The CPU class decodes up to 16 (kDecodedQueries), the GPU class up to 8 (kGpuDecodedQueries).
  for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu})
    for (AttentionBias mode : kModes)
      for (const std::uint32_t queries : kernels == Kernels::Cpu ? std::vector<std::uint32_t>{2, 5, 16, 17} : std::vector<std::uint32_t>{2, 8, 9}) {
        AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 2, .queries = queries, .keys = 701, .head_dim = 20,
                          .dtype = n++ % 2 ? DType::F16 : DType::F32, .scale = 1.0f, .query_offset = 701 - 5 - std::int64_t{queries},
                          .causal = true, .memory_prefix = 5, .bias = mode, .max_relative_position = 3};
        p.t5.bidirectional = false;
        Inputs in = random_inputs(rng, p);
        in.lengths = {690, 333};
        expect_matches(gpu_kernels(kernels), p, in);
      }
  // The GPU class without subgroup shuffles: no attention_decode, the kv head's query heads as rows
  // of attention_tiled, each workgroup one of the 3 queries.
  Context no_shuffles = test::gpu_kernels_tiles(32768, 64, 0, false);
  for (AttentionBias mode : kModes) {
    AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 3, .keys = 701, .head_dim = 20, .scale = 1.0f,
                      .query_offset = 701 - 5 - 3, .causal = true, .memory_prefix = 5, .bias = mode, .max_relative_position = 3};
    p.t5.bidirectional = false;
    Inputs in = random_inputs(rng, p);
    in.lengths = {690, 333};
    expect_matches(no_shuffles, p, in);
  }
}

// T5 in the tile equals the unfused pipeline's bias: t5_bias materialised on the GPU, then fed to
// the fused op as a dense bias. The same float values take the same path: bit-exact.
TEST_F(AttentionGpu, T5MatchesMaterialisedGpuBias) {
  std::mt19937 rng(11);
  // D = 64 is in `relpos check`: its pipeline takes lavapipe many seconds to compile.
  const AttentionParams p{.heads = 4, .kv_heads = 4, .queries = 33, .keys = 65, .head_dim = 16, .scale = 1.0f, .query_offset = 32,
                          .causal = true, .bias = AttentionBias::T5};
  const Inputs in = random_inputs(rng, p);
  const AttentionResult fused = gpu_attention(gpu(), p, in);

  Buffer table = make_buffer(gpu(), in.bias);
  Buffer dense(gpu(), std::uint64_t{p.heads} * p.queries * p.keys * 4);
  run(gpu(), [&](Recorder& r) { t5_bias(r, p.t5_row_params(), table, dense); });
  AttentionParams pd = p;
  pd.bias = AttentionBias::Dense;
  Inputs ind = in;
  ind.bias = dense.download<float>(std::size_t{p.heads} * p.queries * p.keys);
  const AttentionResult unfused = gpu_attention(gpu(), pd, ind);
  EXPECT_EQ(fused.out, unfused.out);
  EXPECT_EQ(fused.lse, unfused.lse);
  EXPECT_LE(normalised_error(fused.out, attention_reference(p, in.host()).out), kTolF32);
}

namespace {
// attention_merge of these parts on `ctx` (whose kernel class picks the merge's lanes a word):
// the merged output and lse.
AttentionResult gpu_merge(Context& ctx, const AttentionMergeParams& mp, const std::vector<float>& parts_out,
                          const std::vector<float>& parts_lse) {
  Buffer po = make_float_buffer(ctx, parts_out, mp.dtype), pl = make_buffer(ctx, parts_lse);
  Buffer out(ctx, mp.rows * mp.head_dim * dtype_size(mp.dtype)), lse(ctx, mp.rows * 4);
  run(ctx, [&](Recorder& r) { attention_merge(r, mp, po, pl, out, &lse); });
  return {download_floats(out, mp.rows * mp.head_dim, mp.dtype), lse.download<float>(mp.rows)};
}
}  // namespace

// attention_merge over results computed on separate key blocks (as ring attention or several
// devices would) equals attention over the whole key range.
TEST_F(AttentionGpu, MergeOpMatchesWholeKeyRange) {
  std::mt19937 rng(13);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = 5, .keys = 23, .head_dim = 8, .dtype = dtype,
                            .bias = AttentionBias::Dense};
    Inputs in = random_inputs(rng, p);
    for (std::uint32_t j = 0; j < 10; ++j) in.bias[3 * p.keys + j] = -std::numeric_limits<float>::infinity();
    const std::uint32_t cuts[] = {0, 10, 11, 23};  // a block of one key, blocks masked for one row
    const std::size_t rows = p.rows(), D = p.head_dim;
    std::vector<float> parts_out, parts_lse;
    for (int n = 0; n < 3; ++n) {
      AttentionParams pb = p;
      pb.keys = cuts[n + 1] - cuts[n];
      Inputs ib;
      ib.q = in.q;
      for (std::uint32_t kv = 0; kv < p.batch * p.kv_heads; ++kv)
        for (std::uint32_t j = cuts[n]; j < cuts[n + 1]; ++j) {
          ib.k.insert(ib.k.end(), in.k.begin() + (kv * p.keys + j) * D, in.k.begin() + (kv * p.keys + j + 1) * D);
          ib.v.insert(ib.v.end(), in.v.begin() + (kv * p.keys + j) * D, in.v.begin() + (kv * p.keys + j + 1) * D);
        }
      for (std::uint32_t r = 0; r < p.heads * p.queries; ++r)
        ib.bias.insert(ib.bias.end(), in.bias.begin() + r * p.keys + cuts[n], in.bias.begin() + r * p.keys + cuts[n + 1]);
      const AttentionResult part = gpu_attention(gpu(), pb, ib);
      parts_out.insert(parts_out.end(), part.out.begin(), part.out.end());
      parts_lse.insert(parts_lse.end(), part.lse.begin(), part.lse.end());
    }
    const AttentionMergeParams mp{3, rows, p.head_dim, dtype};
    const AttentionResult want = attention_reference(p, in.host());
    const AttentionResult ref_merge = attention_merge_reference(mp, rounded_to_storage(parts_out, dtype), parts_lse);
    for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {  // one lane a word, or 8 sharing its parts
      const AttentionResult got = gpu_merge(gpu_kernels(kernels), mp, parts_out, parts_lse);
      const double tol = dtype == DType::F32 ? kTolF32 : 2 * tolerance(dtype);  // f16, bf16: the parts are rounded too
      EXPECT_LE(normalised_error(got.out, want.out), tol) << dtype_name(dtype);
      EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
      EXPECT_LE(normalised_error(got.out, ref_merge.out), tolerance(dtype));
    }
  }
}

// The merge takes the parts a chunk at a time: any count (one chunk, a chunk +-1, two and a
// part), and a part whose lse is -inf is never read, whatever it holds (a split with no keys
// writes nothing); a row with every part -inf gives zeros and -inf.
TEST_F(AttentionGpu, MergeSkipsMaskedPartsWhateverTheyHold) {
  std::mt19937 rng(31);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::uint32_t parts : {1u, 7u, 8u, 9u, 17u, 63u, 64u, 65u, 129u}) {
    const std::uint32_t rows = 3, D = 8;
    auto parts_out = random_floats(rng, std::size_t{parts} * rows * D, -1.0f, 1.0f);
    auto parts_lse = random_floats(rng, std::size_t{parts} * rows, -20.0f, 5.0f);
    auto held = parts_out;  // what the masked parts hold: NaN and infinities
    for (std::uint32_t n = 0; n < parts; ++n)
      for (std::uint32_t row = 0; row < rows; ++row) {
        float& l = parts_lse[std::size_t{n} * rows + row];
        // Row 2: masked in every part; row 1: in its first 8 (a word's first lane has none live
        // where a later one has some).
        if (row == 2 || (row == 1 && n < 8 && parts > 8) || (n % 3 == 1 && parts > 1)) l = -inf;
        if (l != -inf) continue;
        for (std::uint32_t d = 0; d < D; ++d) {
          const std::size_t at = (std::size_t{n} * rows + row) * D + d;
          parts_out[at] = 0.0f;
          held[at] = d % 2 ? nan : inf;
        }
      }
    const AttentionMergeParams mp{parts, rows, D, DType::F32};
    const AttentionResult want = attention_merge_reference(mp, parts_out, parts_lse);
    for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
      SCOPED_TRACE(testing::Message() << parts << " parts, " << (kernels == Kernels::Gpu ? "gpu" : "cpu") << " kernels");
      const AttentionResult got = gpu_merge(gpu_kernels(kernels), mp, held, parts_lse);
      EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
      EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
      for (std::uint32_t d = 0; d < D; ++d) EXPECT_EQ(got.out[2 * D + d], 0.0f);
      EXPECT_EQ(got.lse[2], -inf);
    }
  }
}

// A NaN among the inputs of a visible key makes its rows NaN, out and lse, as the reference
// gives, in both kernel classes, whole or over key splits merged by their lse; a NaN the mask hides
// changes nothing. (An ordered `l > 0` once turned such a row into a masked one, zeros and lse
// -inf, and a merge then skipped it: ring attention dropped the chunk, and answered.)
TEST_F(AttentionGpu, ANaNInputMakesItsRowsNaN) {
  std::mt19937 rng(41);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Poison { const char* what; std::vector<float> Inputs::*input; std::size_t at; std::vector<std::size_t> rows; };
  // Prefill, causal, Q = K = 6, two heads on one kv head (row h·6 + i), D = 8, a dense bias [H, Q, K].
  const AttentionParams prefill{.heads = 2, .kv_heads = 1, .queries = 6, .keys = 6, .head_dim = 8, .causal = true, .bias = AttentionBias::Dense};
  const std::vector<Poison> prefill_cases = {
      {"k of key 3", &Inputs::k, 3 * 8 + 2, {3, 4, 5, 9, 10, 11}},
      {"k of key 0 (row 0's only key)", &Inputs::k, 0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
      {"q of head 1, query 1", &Inputs::q, 7 * 8 + 5, {7}},
      {"bias of head 0, query 4, key 5 (masked)", &Inputs::bias, 4 * 6 + 5, {}},
      {"bias of head 0, query 4, key 2", &Inputs::bias, 4 * 6 + 2, {4}},
  };
  // Decoding: one query over 701 keys, four heads on two kv heads (heads 2 and 3 on kv head 1), the
  // keys split (chosen, then forced to 5) and merged.
  AttentionParams decode{.heads = 4, .kv_heads = 2, .queries = 1, .keys = 701, .head_dim = 20, .query_offset = 700, .causal = true};
  const std::vector<Poison> decode_cases = {
      {"k of kv head 1, key 500", &Inputs::k, (701 + 500) * 20 + 7, {2, 3}},
      {"q of head 0", &Inputs::q, 3, {0}},
  };
  auto run_cases = [&](const AttentionParams& p, const std::vector<Poison>& cases) {
    for (const Poison& c : cases)
      for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
        SCOPED_TRACE(testing::Message() << describe(p) << ", NaN in " << c.what << ", " << (kernels == Kernels::Gpu ? "gpu" : "cpu") << " kernels");
        Inputs in = random_inputs(rng, p);
        (in.*c.input)[c.at] = nan;
        const std::vector<bool> nan_rows = expect_reference_nan_rows(gpu_kernels(kernels), p, in).lse_rows;
        std::vector<bool> expected(p.rows(), false);
        for (std::size_t r : c.rows) expected[r] = true;
        EXPECT_EQ(nan_rows, expected) << "the reference's NaN rows";
      }
  };
  run_cases(prefill, prefill_cases);
  run_cases(decode, decode_cases);
  decode.key_splits = 5;
  run_cases(decode, decode_cases);
}

// A NaN or infinite v behind the mask changes nothing: a key masked for a row (a causal row's
// future key in the same key tile, a key behind a -inf dense bias) takes no part in it, as in the
// reference, while a row that sees that key is NaN (or infinite) where the reference is. Both
// kernel classes; prefill within one tile and across tiles, Shaw's value term too, and decoding
// (split keys chosen, then forced).
TEST_F(AttentionGpu, ANaNOrInfiniteValueBehindTheMaskChangesNothing) {
  std::mt19937 rng(47);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Poison { const char* what; float value; std::size_t key, dim; std::vector<std::pair<std::size_t, float>> bias; };
  auto check = [&](Context& ctx, const char* kernels, const AttentionParams& p, const Poison& c) {
    SCOPED_TRACE(testing::Message() << describe(p) << ", " << c.what << ", " << kernels << " kernels");
    Inputs in = random_inputs(rng, p);
    in.v[(std::size_t{p.kv_heads - 1} * p.keys + c.key) * p.head_dim + c.dim] = c.value;  // the last kv head
    for (const auto& [at, x] : c.bias) in.bias[at] = x;
    const NanRowsResult checked = expect_reference_nan_rows(ctx, p, in);
    const std::vector<bool>& nan_rows = checked.out_rows;
    // The reference's NaN rows are exactly the rows that see the key (for a NaN v), not all of them.
    std::size_t n = 0;
    for (bool r : nan_rows) n += r;
    if (std::isnan(c.value)) EXPECT_TRUE(n > 0 && n < p.rows()) << n << " NaN rows of " << p.rows();
  };
  // Prefill, causal, two heads on one kv head: key 3 is a future key of rows 0-2 in their tile.
  const AttentionParams small{.heads = 2, .kv_heads = 1, .queries = 6, .keys = 6, .head_dim = 8, .causal = true};
  const AttentionParams shaw{.heads = 2, .kv_heads = 1, .queries = 6, .keys = 6, .head_dim = 8, .causal = true,
                             .bias = AttentionBias::Shaw, .max_relative_position = 2};
  // Across tiles: 150 queries and keys, head_dim 64; keys 37 and 100 future keys of many rows' tiles.
  const AttentionParams large{.heads = 2, .kv_heads = 1, .queries = 150, .keys = 150, .head_dim = 64, .causal = true};
  const std::vector<Poison> prefill_cases = {
      {"v NaN at key 3", nan, 3, 2, {}},
      {"v +inf at key 3", inf, 3, 5, {}},
      {"v -inf at key 4", -inf, 4, 0, {}},
  };
  const std::vector<Poison> large_cases = {
      {"v NaN at key 100", nan, 100, 7, {}},
      {"v +inf at key 37", inf, 37, 63, {}},
  };
  // Decoding: one query over 701 keys, four heads on two kv heads; key 500 of kv head 1 has a NaN
  // v and is behind a -inf dense bias for head 2 (bias [H, 1, K]) but visible to head 3.
  AttentionParams decode{.heads = 4, .kv_heads = 2, .queries = 1, .keys = 701, .head_dim = 20, .query_offset = 700, .causal = true,
                         .bias = AttentionBias::Dense};
  const std::vector<Poison> decode_cases = {
      {"v NaN at key 500, -inf bias for head 2", nan, 500, 7, {{2 * 701 + 500, -inf}}},
      {"v +inf at key 500, -inf bias for heads 2 and 3", inf, 500, 7, {{2 * 701 + 500, -inf}, {3 * 701 + 500, -inf}}},
  };
  for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
    const char* name = kernels == Kernels::Gpu ? "gpu" : "cpu";
    Context& ctx = gpu_kernels(kernels);
    for (const Poison& c : prefill_cases) {
      check(ctx, name, small, c);
      check(ctx, name, shaw, c);
    }
    for (const Poison& c : large_cases) check(ctx, name, large, c);
    AttentionParams d = decode;
    for (const std::uint32_t splits : {0u, 5u}) {
      d.key_splits = splits;
      for (const Poison& c : decode_cases) check(ctx, name, d, c);
    }
  }
  // The GPU class without subgroup shuffles (attention_tiled for decoding too).
  Context no_shuffles = test::gpu_kernels_tiles(32768, 64, 0, false);
  for (const Poison& c : large_cases) check(no_shuffles, "gpu, no shuffles", large, c);
  for (const Poison& c : decode_cases) check(no_shuffles, "gpu, no shuffles", decode, c);
}

// The kernels guard a masked key's value only where a key they read can be masked for a row: a
// -inf in a dense bias or a per-distance row (any key, prefill or decoding), or causality in
// prefill (a future key in the row's tile). Decoding reads no key past its query's, so there
// (no bias, ALiBi) a future key's NaN v must never be read at all. Both kernel classes.
TEST_F(AttentionGpu, ANaNValueBehindAMaskingBiasOrPastTheQueryChangesNothing) {
  std::mt19937 rng(53);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Poison { const char* what; std::size_t key; std::vector<std::size_t> masked; bool some_nan; };
  auto check = [&](Context& ctx, const char* kernels, const AttentionParams& p, const Poison& c) {
    SCOPED_TRACE(testing::Message() << describe(p) << ", " << c.what << ", " << kernels << " kernels");
    Inputs in = random_inputs(rng, p);
    in.v[(std::size_t{p.kv_heads - 1} * p.keys + c.key) * p.head_dim + 3] = nan;  // the last kv head
    for (const std::size_t at : c.masked) in.bias[at] = -std::numeric_limits<float>::infinity();
    const NanRowsResult checked = expect_reference_nan_rows(ctx, p, in);
    const std::vector<bool>& nan_rows = checked.out_rows;
    std::size_t n = 0;
    for (bool r : nan_rows) n += r;
    if (c.some_nan) EXPECT_TRUE(n > 0 && n < p.rows()) << n << " NaN rows of " << p.rows();
    else EXPECT_EQ(n, 0u);
  };
  // Decoding one query (offset 700) over 701 keys, four heads on two kv heads: key 500 of kv head
  // 1 is behind a -inf per-distance bias (Distance: index j for this query) for head 2 only.
  AttentionParams distance{.heads = 4, .kv_heads = 2, .queries = 1, .keys = 701, .head_dim = 20, .query_offset = 700, .causal = true,
                           .bias = AttentionBias::Distance};
  const Poison distance_case{"v NaN at key 500, -inf distance bias for head 2", 500, {2 * 701 + 500}, true};
  // Decoding query 600 of 701 keys: keys 601-700 are in the future, key 650's NaN v never counts.
  AttentionParams future{.heads = 4, .kv_heads = 2, .queries = 1, .keys = 701, .head_dim = 20, .query_offset = 600, .causal = true};
  const Poison future_case{"v NaN at future key 650", 650, {}, false};
  // Prefill without causality, 40 queries and keys, heads 0 and 1 on one kv head: key 20 is behind
  // a -inf dense bias for head 1's queries 0-9 (mid-tile, other rows of the tile see it), and a
  // per-distance row's -inf at rp = 5 hides key 20 from query 15 alone.
  const AttentionParams dense{.heads = 2, .kv_heads = 1, .queries = 40, .keys = 40, .head_dim = 16, .bias = AttentionBias::Dense};
  std::vector<std::size_t> dense_masked;
  for (std::size_t i = 0; i < 10; ++i) dense_masked.push_back((40 + i) * 40 + 20);
  const Poison dense_case{"v NaN at key 20, -inf dense bias for head 1, queries 0-9", 20, dense_masked, true};
  const AttentionParams row{.heads = 2, .kv_heads = 1, .queries = 40, .keys = 40, .head_dim = 16, .bias = AttentionBias::Distance};
  const Poison row_case{"v NaN at key 20, -inf distance bias at rp 5 (query 15)", 20, {5 + 39, 79 + 5 + 39}, true};
  for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
    const char* name = kernels == Kernels::Gpu ? "gpu" : "cpu";
    Context& ctx = gpu_kernels(kernels);
    for (const std::uint32_t splits : {0u, 5u}) {
      distance.key_splits = splits;
      future.key_splits = splits;
      check(ctx, name, distance, distance_case);
      for (const AttentionBias bias : {AttentionBias::None, AttentionBias::Alibi}) {
        future.bias = bias;
        check(ctx, name, future, future_case);
      }
    }
    check(ctx, name, dense, dense_case);
    check(ctx, name, row, row_case);
  }
  Context no_shuffles = test::gpu_kernels_tiles(32768, 64, 0, false);
  check(no_shuffles, "gpu, no shuffles", distance, distance_case);
  check(no_shuffles, "gpu, no shuffles", dense, dense_case);
}

// Causal prefill guards a masked key's value only in the blocks where some row of the workgroup
// cannot see a key it reads (the CPU class walks the blocks below its first query's bound without
// the guard): a NaN or infinite v at a key reaches exactly the rows that see it, with the key just
// past a workgroup's first query or on either side of a block's edge, in workgroups of every
// position, with memory keys, a query offset and split keys; past a sequence's length it reaches
// none, causal or not. A -inf dense bias or distance row masks within a causal row too. Both
// kernel classes, and the CPU class without shared loads.
TEST_F(AttentionGpu, ANaNValueReachesExactlyTheCausalRowsThatSeeIt) {
  std::mt19937 rng(59);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Poison { std::uint32_t batch, key; float value; std::vector<std::size_t> masked; };
  // The rows of (batch b, every head) that see key j: j below b's length, and causal, j a memory
  // key or at most the query's position; less those a -inf bias masks (one a poison here).
  auto seeing = [](const AttentionParams& p, const std::vector<std::uint32_t>& lengths, const Poison& c) {
    const std::uint32_t len = lengths.empty() ? p.keys : lengths[c.batch];
    std::size_t n = 0;
    for (std::uint32_t i = 0; i < p.queries && c.key < len; ++i)
      n += !p.causal || c.key < p.memory_prefix || c.key - p.memory_prefix <= i + p.query_offset;
    return n * p.heads - c.masked.size();
  };
  auto check = [&](Context& ctx, const char* kernels, const AttentionParams& p, const std::vector<std::uint32_t>& lengths, const Poison& c) {
    SCOPED_TRACE(testing::Message() << describe(p) << ", v " << c.value << " at batch " << c.batch << " key " << c.key << ", "
                                    << c.masked.size() << " masked, " << kernels << " kernels");
    Inputs in = random_inputs(rng, p);
    in.lengths = lengths;
    in.v[((std::size_t{c.batch} * p.kv_heads + p.kv_heads - 1) * p.keys + c.key) * p.head_dim + 3] = c.value;
    for (const std::size_t at : c.masked) in.bias[at] = -inf;
    const NanRowsResult checked = expect_reference_nan_rows(ctx, p, in);
    const std::vector<bool>& nan_rows = checked.out_rows;
    std::size_t n = 0;
    for (std::size_t r = 0; r < checked.got.out.size() / p.head_dim; ++r) n += std::isnan(c.value) ? nan_rows[r] : std::isinf(checked.got.out[r * p.head_dim + 3]);
    EXPECT_EQ(n, seeing(p, lengths, c)) << " rows see the key";
  };
  struct Case { AttentionParams p; std::vector<std::uint32_t> lengths; std::vector<Poison> poisons; };
  auto causal = [](std::uint32_t q, std::uint32_t k, std::uint32_t m = 0, std::int64_t off = 0, std::uint32_t splits = 0) {
    return AttentionParams{.queries = q, .keys = k, .head_dim = 16, .query_offset = off, .causal = true, .memory_prefix = m, .key_splits = splits};
  };
  AttentionParams dense = causal(131, 131), distance = causal(131, 131);
  dense.bias = AttentionBias::Dense;
  distance.bias = AttentionBias::Distance;
  AttentionParams batch = causal(13, 20);
  batch.batch = 2;
  AttentionParams open = batch;
  open.causal = false;
  const std::vector<Case> cases = {
      // A query and a key; a query past a block of keys.
      {causal(1, 1), {}, {{0, 0, nan, {}}}},
      {causal(1, 9, 0, 3), {}, {{0, 5, nan, {}}, {0, 2, inf, {}}}},
      // A block of keys less one and more one (the CPU class's blocks are the subgroup: 8 on
      // lavapipe), a prime.
      {causal(7, 7), {}, {{0, 3, nan, {}}, {0, 6, inf, {}}}},
      {causal(9, 9), {}, {{0, 1, nan, {}}, {0, 8, nan, {}}, {0, 7, inf, {}}}},
      {causal(13, 13), {}, {{0, 5, nan, {}}, {0, 12, inf, {}}}},
      // Two workgroups of the CPU class (128 queries), many of the GPU class: the second's first
      // query 128 sees keys below 129, mid-block: 127 and 128 reach it, 129 and 130 do not.
      {causal(131, 131), {}, {{0, 127, nan, {}}, {0, 128, nan, {}}, {0, 129, nan, {}}, {0, 130, inf, {}}}},
      // Seven memory keys: query 128 sees keys below 136, a block's edge.
      {causal(131, 138, 7), {}, {{0, 3, nan, {}}, {0, 135, nan, {}}, {0, 136, nan, {}}, {0, 137, inf, {}}}},
      // Queries 5 keys on: query 128 sees keys below 134.
      {causal(131, 136, 0, 5), {}, {{0, 133, nan, {}}, {0, 134, nan, {}}, {0, 135, inf, {}}}},
      // Three splits (keys 0-43, 44-87, 88-130): the last one's blocks from 88, its first query's
      // bound mid-block again; with memory keys, splits that start past the memories.
      {causal(131, 131, 0, 0, 3), {}, {{0, 87, nan, {}}, {0, 128, nan, {}}, {0, 129, nan, {}}}},
      {causal(131, 138, 7, 0, 3), {}, {{0, 135, nan, {}}, {0, 136, nan, {}}}},
      // A -inf dense bias for query 130 and a -inf distance row at rp -3 (query 103) hide key 100
      // from one row each of those that see it.
      {dense, {}, {{0, 100, nan, {130 * 131 + 100}}}},
      {distance, {}, {{0, 100, nan, {-3 + 130}}}},
      // The second sequence's 11 keys: a key past them reaches no row, causal or not.
      {batch, {20, 11}, {{1, 15, nan, {}}, {1, 5, nan, {}}, {1, 11, inf, {}}}},
      {open, {20, 11}, {{1, 15, nan, {}}, {1, 10, nan, {}}, {1, 11, inf, {}}}},
  };
  auto run_cases = [&](Context& ctx, const char* name) {
    for (const Case& c : cases)
      for (const Poison& x : c.poisons) check(ctx, name, c.p, c.lengths, x);
  };
  run_cases(gpu_kernels(Kernels::Cpu), "cpu");
  run_cases(gpu_kernels(Kernels::Gpu), "gpu");
  run_cases(gpu_without_shuffles(), "default, no shuffles");
}

// The merge of parts one of which has a NaN lse gives NaN, out and lse, wherever the part lies
// among the lanes that share a row's parts, and also where every other part is masked.
TEST_F(AttentionGpu, MergeOfANaNPartIsNaN) {
  std::mt19937 rng(43);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const std::uint32_t parts : {1u, 9u, 65u}) {
    const std::uint32_t rows = 3, D = 8;
    auto parts_out = random_floats(rng, std::size_t{parts} * rows * D, -1.0f, 1.0f);
    auto parts_lse = random_floats(rng, std::size_t{parts} * rows, -20.0f, 5.0f);
    // Row 0: its last part NaN; row 1: a NaN part among masked ones; row 2: no NaN.
    parts_lse[std::size_t{parts - 1} * rows + 0] = nan;
    for (std::uint32_t n = 0; n < parts; ++n) parts_lse[std::size_t{n} * rows + 1] = n == parts / 2 ? nan : -inf;
    const AttentionMergeParams mp{parts, rows, D, DType::F32};
    const AttentionResult want = attention_merge_reference(mp, parts_out, parts_lse);
    for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
      SCOPED_TRACE(testing::Message() << parts << " parts, " << (kernels == Kernels::Gpu ? "gpu" : "cpu") << " kernels");
      const AttentionResult got = gpu_merge(gpu_kernels(kernels), mp, parts_out, parts_lse);
      test::expect_nan_rows_match(got.out, want.out, D, kTolF32, "out");
      EXPECT_EQ(test::expect_nan_rows_match(got.lse, want.lse, 1, kTolF32, "lse"), (std::vector<bool>{true, true, false}));
    }
  }
}

// The merge loops over the parts in each invocation: up to RELPOS_MAX_LOOP_ITERATIONS / 2 = 16384
// parts merge correctly (parts with lse = -inf among them), one more is refused by name.
TEST_F(AttentionGpu, MergeOfTheMostPartsAndTooMany) {
  std::mt19937 rng(29);
  const std::uint32_t parts = 16384, rows = 2, D = 4;
  const auto parts_out = random_floats(rng, std::size_t{parts} * rows * D, -1.0f, 1.0f);
  auto parts_lse = random_floats(rng, std::size_t{parts} * rows, -20.0f, 5.0f);
  for (std::size_t n = 0; n < parts_lse.size(); n += 7) parts_lse[n] = -std::numeric_limits<float>::infinity();
  const AttentionMergeParams mp{parts, rows, D, DType::F32};
  const AttentionResult want = attention_merge_reference(mp, parts_out, parts_lse);
  for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
    const AttentionResult got = gpu_merge(gpu_kernels(kernels), mp, parts_out, parts_lse);
    EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
    EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
  }

  const AttentionMergeParams too_many{parts + 1, 1, D, DType::F32};
  Buffer po2(gpu(), std::uint64_t{parts + 1} * D * 4), pl2(gpu(), std::uint64_t{parts + 1} * 4), out2(gpu(), D * 4);
  Recorder r(gpu());
  relpos::test::expect_invalid([&] { attention_merge(r, too_many, po2, pl2, out2); }, "parts = 16385");
  r.submit_and_wait();  // nothing was recorded
}

// A 4 KiB binding range and 3 workgroups per dispatch: (batch, head) chunks, bias head ranges,
// grouped dispatches and the merge's row chunks all take their split paths.
TEST_F(AttentionGpu, SplitPathsUnderLoweredLimits) {
  Context& ctx = gpu_small_limits();
  std::mt19937 rng(17);
  for (AttentionBias mode : kModes) {
    const bool split = mode == AttentionBias::Shaw || mode == AttentionBias::T5;
    const AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 9, .keys = 13, .head_dim = 8, .query_offset = 3,
                            .causal = mode == AttentionBias::Alibi, .memory_prefix = 2, .bias = mode, .max_relative_position = 2,
                            .key_splits = split ? 3u : 0u};
    expect_matches(ctx, p, random_inputs(rng, p));
  }
  // Decoding: partial results over many bindings; 18 dispatches (one per (batch, head) slab), more
  // than the CPU class's item counters, which are zeroed again after every 16.
  const AttentionParams p{.batch = 9, .heads = 2, .kv_heads = 2, .queries = 1, .keys = 100, .head_dim = 8, .key_splits = 7};
  expect_matches(ctx, p, random_inputs(rng, p));
}

// bf16 is a storage of fused attention and its merge only: the ops that take f32 or f16 refuse it by
// name rather than reading its halves as floats.
TEST_F(AttentionGpu, Bf16IsRefusedByTheOpsThatDoNotTakeIt) {
  Context& ctx = gpu();
  Buffer out(ctx, 4096);
  Recorder r(ctx);
  const AlibiParams ap{.heads = 2, .queries = 4, .keys = 4};
  relpos::test::expect_invalid([&] { alibi_bias(r, ap, out, DType::BF16); }, "out_dtype = bf16: must be f32 or f16");
  relpos::test::expect_invalid([&] { alibi_bias_add(r, ap, out, DType::BF16); }, "bf16: must be f32 or f16");
  const RopeParams rp{.batch = 1, .seq = 2, .heads = 1, .head_dim = 8};
  relpos::test::expect_invalid([&] { rope(r, rp, out, DType::BF16); }, "dtype = bf16: must be f32 or f16");
  RingParams ring;
  ring.ranks = 2;
  ring.attention = AttentionParams{.queries = 4, .keys = 4, .head_dim = 8, .dtype = DType::BF16};
  relpos::test::expect_invalid([&] { ring.validate(); }, "dtype = bf16: must be f32 or f16");
  AttentionParams fused{.queries = 4, .keys = 4, .head_dim = 8, .dtype = DType::I32};
  relpos::test::expect_invalid([&] { fused.validate(); }, "f32, f16 or bf16");
}

TEST_F(AttentionGpu, InvalidInputIsRejectedBeforeDispatch) {
  Context& ctx = gpu();
  const AttentionParams p{.heads = 4, .kv_heads = 2, .queries = 3, .keys = 5, .head_dim = 8};
  Buffer q(ctx, 4 * 3 * 8 * 4), kv(ctx, 2 * 5 * 8 * 4), out(ctx, 4 * 3 * 8 * 4), small(ctx, 12);
  AttentionBuffers ok{&q, &kv, &kv, &out};
  Recorder r(ctx);
  auto expect_invalid = [](auto&& f, const std::string& word) {
    try {
      f();
      ADD_FAILURE() << "expected InvalidArgument mentioning " << word;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  auto with = [&](auto change, AttentionParams pp = {}) {
    AttentionBuffers b = ok;
    change(b);
    return [=, &r] { attention(r, pp, b); };
  };
  const auto same = [](AttentionBuffers&) {};
  auto bad = p;
  bad.kv_heads = 3;
  expect_invalid(with(same, bad), "kv_heads");
  bad = p;
  bad.head_dim = 264;
  expect_invalid(with(same, bad), "head_dim");
  bad.head_dim = 10;
  expect_invalid(with(same, bad), "head_dim");
  expect_invalid(with([&](AttentionBuffers& b) { b.q = &small; }, p), "q buffer");
  expect_invalid(with([&](AttentionBuffers& b) { b.v = &small; }, p), "v buffer");
  expect_invalid(with([&](AttentionBuffers& b) { b.out = &small; }, p), "out buffer");
  expect_invalid(with([&](AttentionBuffers& b) { b.lse = &small; }, p), "lse buffer");
  expect_invalid(with([&](AttentionBuffers& b) { b.key_lengths = &small; }, p), "key_lengths");
  bad = p;
  bad.dtype = DType::F16;  // the f32 buffers are twice the f16 size
  expect_invalid(with(same, bad), "q buffer");
  bad = p;
  bad.bias = AttentionBias::Alibi;
  expect_invalid(with(same, bad), "bias buffer");
  bad.bias = AttentionBias::Shaw;
  bad.max_relative_position = 1;
  expect_invalid(with(same, bad), "rel_keys");
  bad = p;
  bad.key_splits = 6;
  expect_invalid(with(same, bad), "key_splits");
  // A single (batch, head) slab larger than the binding range names the buffer and the limit.
  Context& tiny = gpu_small_limits();
  AttentionParams big = p;
  big.kv_heads = 4;
  big.keys = 200;  // 200 * 8 * 4 = 6400 bytes per head of k
  Buffer bq(tiny, 4 * 3 * 8 * 4), bkv(tiny, 4 * 200 * 8 * 4), bout(tiny, 4 * 3 * 8 * 4);
  Recorder rt(tiny);
  expect_invalid([&] { attention(rt, big, {&bq, &bkv, &bkv, &bout}); }, "maxStorageBufferRange");
  // The T5 row of every head (16 * 102 values) larger than the binding range, every slab within it.
  AttentionParams t5{.heads = 16, .kv_heads = 16, .queries = 3, .keys = 100, .head_dim = 4, .bias = AttentionBias::T5};
  Buffer tq(tiny, 16 * 3 * 4 * 4), tkv(tiny, 16 * 100 * 4 * 4), tout(tiny, 16 * 3 * 4 * 4), table(tiny, 32 * 16 * 4);
  AttentionBuffers tb{&tq, &tkv, &tkv, &tout};
  tb.bias = &table;
  expect_invalid([&] { attention(rt, t5, tb); }, "heads * (queries + keys - 1)");
  AttentionMergeParams mp{2, 3, 8, DType::F32};
  Buffer po(ctx, 2 * 3 * 8 * 4), pl(ctx, 2 * 3 * 4), mo(ctx, 3 * 8 * 4);
  expect_invalid([&] { attention_merge(r, mp, po, small, mo); }, "partial_lse");
  expect_invalid([&] { attention_merge(r, mp, small, pl, mo); }, "partial_out");
  mp.head_dim = 6;
  expect_invalid([&] { attention_merge(r, mp, po, pl, mo); }, "head_dim");
  r.submit_and_wait();  // nothing was recorded
  rt.submit_and_wait();
}

// The fused op against the library's unfused GPU pipeline (the T5 bias materialised into the
// logits, softmax, weights·v) on the same device, f32 and f16, with and without causal masks.
TEST_F(AttentionGpu, MatchesTheUnfusedGpuPipeline) {
  std::mt19937 rng(404);
  for (auto [bias, causal, dtype] : {std::tuple{AttentionBias::T5, false, DType::F32}, {AttentionBias::T5, true, DType::F32},
                                     {AttentionBias::T5, true, DType::F16}, {AttentionBias::None, true, DType::F32}}) {
    AttentionParams p{.batch = 2, .heads = 3, .kv_heads = 3, .queries = 19, .keys = 37, .head_dim = 16, .dtype = dtype,
                      .scale = 1.0f, .query_offset = 11, .causal = causal, .bias = bias};
    p.t5.num_buckets = 12;
    p.t5.max_distance = 20;
    p.t5.bidirectional = !causal;
    SCOPED_TRACE(describe(p));
    const Inputs in = random_inputs(rng, p);
    const std::size_t n = p.rows() * p.head_dim;
    Buffer q = make_float_buffer(gpu(), in.q, p.dtype), k = make_float_buffer(gpu(), in.k, p.dtype), v = make_float_buffer(gpu(), in.v, p.dtype);
    Buffer fused(gpu(), n * dtype_size(dtype)), unfused(gpu(), n * dtype_size(dtype)), lse(gpu(), p.rows() * 4);
    Buffer table = make_buffer(gpu(), in.bias.empty() ? std::vector<float>(4) : in.bias);
    Buffer logits(gpu(), attention_unfused_logits_bytes(p));
    AttentionBuffers bf{&q, &k, &v, &fused, &lse}, bu{&q, &k, &v, &unfused};
    if (bias == AttentionBias::T5) bf.bias = bu.bias = &table;
    run(gpu(), [&](Recorder& r) {
      attention(r, p, bf);
      attention_unfused(r, p, bu, logits);
    });
    EXPECT_LE(normalised_error(download_floats(fused, n, dtype), download_floats(unfused, n, dtype)), dtype == DType::F16 ? kTolF16 : kTolF32);
  }
}

TEST_F(AttentionGpu, UnfusedPipelineRejectsWhatItCannotDoBeforeRecording) {
  AttentionParams p{.heads = 4, .kv_heads = 2, .queries = 3, .keys = 5, .head_dim = 8};
  Buffer q(gpu(), 4 * 3 * 8 * 4), kv(gpu(), 2 * 5 * 8 * 4), out(gpu(), 4 * 3 * 8 * 4), logits(gpu(), 4 * 3 * 5 * 4);
  Recorder r(gpu());
  relpos::test::expect_invalid([&] { attention_unfused(r, p, {&q, &kv, &kv, &out}, logits); }, "kv_heads");
  p.kv_heads = 4;
  Buffer kv4(gpu(), 4 * 5 * 8 * 4), small(gpu(), 16);
  relpos::test::expect_invalid([&] { attention_unfused(r, p, {&q, &kv4, &kv4, &out}, small); }, "logits buffer");
  relpos::test::expect_invalid([&] { attention_unfused(r, p, {&q, &kv4, &kv4, &small}, logits); }, "out buffer");
  p.bias = AttentionBias::Alibi;
  relpos::test::expect_invalid([&] { attention_unfused(r, p, {&q, &kv4, &kv4, &out}, logits); }, "bias");
  EXPECT_EQ(r.dispatch_count(), 0u);
}

// A (batch, head) slab that no binding of the device can hold is refused before anything is
// recorded (not after the T5 row was already written).
TEST_F(AttentionGpu, SlabLargerThanABindingIsRefusedBeforeRecording) {
  Context& ctx = gpu_small_limits();  // 4 KiB bindings: one slab of q is 8 KiB
  const AttentionParams p{.heads = 1, .kv_heads = 1, .queries = 64, .keys = 1, .head_dim = 32, .bias = AttentionBias::T5};
  Buffer q(ctx, 64 * 32 * 4), k(ctx, 32 * 4), v(ctx, 32 * 4), out(ctx, 64 * 32 * 4), table(ctx, p.bias_elements() * 4);
  Recorder r(ctx);
  try {
    attention(r, p, {&q, &k, &v, &out, nullptr, &table});
    ADD_FAILURE() << "a q slab of 8 KiB was accepted with 4 KiB bindings";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("q buffer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(r.dispatch_count(), 0u);
}

// ALiBi for a query far from its keys: slope·|rp| near 2^31 would swallow q·k in a float32 score,
// so the kernel scores relative to the split's nearest key and moves that part into the lse.
TEST_F(AttentionGpu, AlibiFarFromTheKeysKeepsQK) {
  std::mt19937 rng(31);
  for (std::int64_t offset : {std::int64_t{1} << 30, -(std::int64_t{1} << 30)}) {
    AttentionParams p{.heads = 2, .kv_heads = 1, .queries = 3, .keys = 300, .head_dim = 8, .bias = AttentionBias::Alibi};
    p.query_offset = offset;
    Inputs in = random_inputs(rng, p);
    in.bias = {1.0f, 0.5f};
    expect_matches(gpu(), p, in);
  }
}

// The same where the keys are split (decoding, a CPU device's calls of a few queries, forced
// splits), with slopes that are not powers of two: each part's lse, taken relative to its split's
// nearest key, was rounded at the bias's magnitude (2^-24·slope·|rp|: 0.5 at slope·|rp| = 8e6) and
// the merge weighed the parts by those roundings (out errors of 2e-3 at an offset of 1e8, 0.5 for
// one query over 20,000 keys near 2^31). The parts' lse are now relative to the row's nearest key.
TEST_F(AttentionGpu, AlibiFarFromTheKeysWithSplitKeys) {
  std::mt19937 rng(37);
  constexpr std::int64_t kTop = std::int64_t{1} << 31;
  struct Case {
    std::uint32_t queries, keys, key_splits, memory_prefix;
    std::int64_t offset;
    bool causal;
  };
  const Case cases[] = {
      {3, 300, 0, 0, 100'000'000, true}, {3, 300, 5, 0, 100'000'000, true}, {3, 300, 0, 0, kTop - 303, true},
      {3, 300, 7, 0, kTop - 303, false}, {3, 300, 5, 0, -(kTop / 2), false}, {3, 300, 5, 2, 100'000'000, true},
      {1, 20'000, 0, 0, kTop - 20'001, true},
  };
  for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu})
    for (const Case& c : cases) {
      AttentionParams p{.heads = 3, .kv_heads = 1, .queries = c.queries, .keys = c.keys, .head_dim = 8, .query_offset = c.offset,
                        .causal = c.causal, .memory_prefix = c.memory_prefix, .bias = AttentionBias::Alibi, .key_splits = c.key_splits};
      SCOPED_TRACE(testing::Message() << (kernels == Kernels::Gpu ? "gpu" : "cpu") << " kernels");
      Inputs in = random_inputs(rng, p);
      in.bias = {0.5f, 0.0039f, 0.0032f};
      SCOPED_TRACE(describe(p));
      const AttentionResult want = attention_reference(p, in.host());
      const AttentionResult got = gpu_attention(gpu_kernels(kernels), p, in);
      EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
      // The lse, rounded once at its size: normalised by the largest |lse| (up to 1e9 here), an
      // error of a whole unit in a row of the small slopes' heads would pass.
      for (std::size_t r = 0; r < want.lse.size(); ++r)
        EXPECT_NEAR(got.lse[r], want.lse[r], std::ldexp(std::abs(want.lse[r]), -22) + kTolF32) << "lse row " << r;
    }
}

// The attention building blocks on the GPU against the CPU reference: matmul (every layout,
// dtype and split path), masked softmax, the unfused pipeline.
#include <relpos/relpos.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/storage.hpp"
#include "support/test_data.hpp"
#include "support/tolerance.hpp"

using namespace relpos;
using namespace relpos::test;

namespace {

class AttentionGpu : public GpuTest {};




DType any_storage(std::mt19937& rng) { return std::uniform_int_distribution<int>(0, 1)(rng) ? DType::F16 : DType::F32; }

MatmulParams random_matmul(std::mt19937& rng) {
  std::uniform_int_distribution<std::uint32_t> dim(1, 40), pad(0, 5);
  const bool nt = std::uniform_int_distribution<int>(0, 1)(rng);
  MatmulParams p = dense_matmul(std::uniform_int_distribution<std::uint32_t>(1, 4)(rng), dim(rng), dim(rng), dim(rng), nt);
  if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) p.k = 4 * std::uniform_int_distribution<std::uint32_t>(1, 16)(rng);
  // Padded rows and batches (strided views), or the plain dense layout (the quad-load path).
  if (std::uniform_int_distribution<int>(0, 1)(rng)) {
    p.a_row_stride = p.k + pad(rng);
    p.a_batch_stride = p.a_row_stride * p.m + pad(rng);
    p.b_row_stride = (nt ? p.k : p.n) + pad(rng);
    p.b_batch_stride = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? 0 : p.b_row_stride * (nt ? p.n : p.k) + pad(rng);
  } else {
    p.a_row_stride = p.k;
    p.a_batch_stride = std::uint64_t{p.m} * p.k;
    p.b_row_stride = nt ? p.k : p.n;
    p.b_batch_stride = std::uint64_t{p.n} * p.k;
  }
  p.c_row_stride = p.n;
  p.c_batch_stride = std::uint64_t{p.m} * p.n;
  p.accumulate = std::uniform_int_distribution<int>(0, 1)(rng);
  p.alpha = std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng);
  p.a_dtype = any_storage(rng);
  p.b_dtype = any_storage(rng);
  p.c_dtype = any_storage(rng);
  return p;
}

void check_matmul(Context& ctx, const MatmulParams& p, std::mt19937& rng) {
  const auto a = rounded_to_storage(random_floats(rng, p.a_elements()), p.a_dtype);
  const auto b = rounded_to_storage(random_floats(rng, p.b_elements()), p.b_dtype);
  const auto c = rounded_to_storage(random_floats(rng, p.c_elements()), p.c_dtype);
  const auto want = matmul_reference(p, a, b, c);
  Buffer ba = make_float_buffer(ctx, a, p.a_dtype), bb = make_float_buffer(ctx, b, p.b_dtype), bc = make_float_buffer(ctx, c, p.c_dtype);
  run(ctx, [&](Recorder& r) { matmul(r, p, ba, bb, bc); });
  MatmulParams abs_p = p;
  abs_p.alpha = std::abs(p.alpha);
  const auto abs_sum = matmul_reference(abs_p, abs_of(a), abs_of(b), abs_of(c));
  const double tol = normalised(sum_error(p.k + 1, max_abs(abs_sum)), want) + (p.c_dtype == DType::F16 ? kHalfRounding : 0.0);
  EXPECT_LE(normalised_error(download_floats(bc, c.size(), p.c_dtype), want), tol);
}

std::string describe(const MatmulParams& p) {
  return "batch=" + std::to_string(p.batch) + " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" +
         std::to_string(p.k) + (p.b_transposed ? " NT" : " NN") + (p.accumulate ? " +=" : " =") + " a_rs=" +
         std::to_string(p.a_row_stride) + " b_bs=" + std::to_string(p.b_batch_stride) + " " +
         std::string(dtype_name(p.a_dtype)) + std::string(dtype_name(p.b_dtype)) + std::string(dtype_name(p.c_dtype));
}

UnfusedAttentionParams random_attention(std::mt19937& rng, std::uint32_t max_len) {
  std::uniform_int_distribution<std::uint32_t> len(1, max_len);
  UnfusedAttentionParams p;
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 2)(rng);
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  p.queries = len(rng);
  p.keys = len(rng);
  p.head_dim = std::uniform_int_distribution<std::uint32_t>(0, 1)(rng) ? 16 : std::uniform_int_distribution<std::uint32_t>(1, 19)(rng);
  p.scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  p.causal = std::uniform_int_distribution<int>(0, 1)(rng);
  switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
    case 0: p.query_offset = 0; break;
    case 1: p.query_offset = std::int64_t{p.keys} - p.queries; break;
    default: p.query_offset = std::uniform_int_distribution<std::int64_t>(-4, 4)(rng); break;
  }
  if (std::uniform_int_distribution<int>(0, 1)(rng))
    for (std::uint32_t b = 0; b < p.batch; ++b) p.key_lengths.push_back(std::uniform_int_distribution<std::uint32_t>(0, p.keys)(rng));
  p.dtype = any_storage(rng);
  return p;
}

std::string describe(const UnfusedAttentionParams& p) {
  std::string s = "B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) + " Q=" + std::to_string(p.queries) +
                  " K=" + std::to_string(p.keys) + " D=" + std::to_string(p.head_dim) + (p.causal ? " causal" : "") +
                  " off=" + std::to_string(p.query_offset) + " " + std::string(dtype_name(p.dtype)) + " lengths=";
  for (auto l : p.key_lengths) s += std::to_string(l) + ",";
  return s;
}

void check_attention(Context& ctx, const UnfusedAttentionParams& p, std::mt19937& rng) {
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  const auto q = rounded_to_storage(random_floats(rng, bh * p.queries * p.head_dim), p.dtype);
  const auto k = rounded_to_storage(random_floats(rng, bh * p.keys * p.head_dim), p.dtype);
  const auto v = rounded_to_storage(random_floats(rng, bh * p.keys * p.head_dim), p.dtype);
  const auto want = unfused_attention_reference(p, q, k, v);
  Buffer bq = make_float_buffer(ctx, q, p.dtype), bk = make_float_buffer(ctx, k, p.dtype), bv = make_float_buffer(ctx, v, p.dtype);
  Buffer out(ctx, want.size() * dtype_size(p.dtype));
  run(ctx, [&](Recorder& r) { unfused_attention(r, p, bq, bk, bv, out); });
  const double logit_error = sum_error(p.head_dim, p.head_dim * max_abs(q) * max_abs(k)) * p.scale;
  const double tol = normalised(attention_error(logit_error, p.keys, max_abs(v)), want) + (p.dtype == DType::F16 ? kHalfRounding : 0.0);
  EXPECT_LE(normalised_error(download_floats(out, want.size(), p.dtype), want), tol);
}

}  // namespace

TEST_F(AttentionGpu, MatmulRandomLayoutsAndDtypes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const MatmulParams p = random_matmul(rng);
    SCOPED_TRACE(describe(p));
    check_matmul(gpu(), p, rng);
  }
}

// Quad-aligned products over every row count in `ms` and column count in `ns`, A·Bᵀ and A·B: A·Bᵀ
// also with columns that are not whole quads, depths 4 to 4·depth_steps, every other trial strided
// (still quad-aligned) and batched, every storage and C mode; then at most 3 workgroups per
// dimension (column and row tiles take several dispatches, each starting at its own tile) on `few`.
static void check_quad_matmuls(Context& ctx, Context& few, std::initializer_list<std::uint32_t> ms, std::initializer_list<std::uint32_t> ns,
                               std::uint32_t depth_steps, std::mt19937& rng) {
  int trial = 0;
  for (bool nt : {true, false})
    for (std::uint32_t m : ms)
      for (std::uint32_t n : ns) {
        MatmulParams p = dense_matmul(1 + trial % 3, m, nt && trial % 2 ? n - 3 : n, 4 * (1 + trial % depth_steps), nt);
        if (trial % 2) {
          p.a_row_stride = p.k + 4;
          p.a_batch_stride = p.a_row_stride * p.m + 8;
          p.b_row_stride = (nt ? p.k : p.n) + 8;
          p.b_batch_stride = trial % 4 == 1 ? 0 : p.b_row_stride * (nt ? p.n : p.k) + 4;
        }
        p.accumulate = trial % 3 == 1;
        p.alpha = 0.75f;
        p.a_dtype = trial % 4 == 2 ? DType::F16 : DType::F32;
        p.b_dtype = trial % 5 == 3 ? DType::F16 : DType::F32;
        p.c_dtype = trial % 6 >= 4 ? DType::F16 : DType::F32;
        ++trial;
        SCOPED_TRACE(describe(p));
        check_matmul(ctx, p, rng);
      }
  for (bool nt : {true, false}) {
    MatmulParams p = dense_matmul(2, 600, nt ? 130 : 136, 40, nt);
    p.accumulate = nt;
    SCOPED_TRACE("few workgroups " + describe(p));
    check_matmul(few, p, rng);
  }
}

// On lavapipe (subgroups of 8 that shuffle) quad-aligned products of at least 32 rows take
// matmul_shared.comp, whose column tiles are 8, 16 or 32 wide by the column count and whose
// workgroups hold 2 to 8 subgroups by the row count: every tile width, partial tiles.
TEST_F(AttentionGpu, MatmulSharedTiles) {
  std::mt19937 rng(13);
  check_quad_matmuls(gpu(), gpu_few_workgroups(), {32u, 47u, 129u, 600u}, {4u, 8u, 36u, 64u, 132u}, 5, rng);
}

// The GPU kernel class's matmul (matmul_tiled.comp: 32×32 tiles of C staged through shared memory
// in steps of 16): one row to several tiles, partial tiles, depths that are not a multiple of 16.
TEST_F(AttentionGpu, MatmulGpuTiles) {
  std::mt19937 rng(14);
  Context few = relpos::test::gpu_kernels_tiles(0, 0, 3);
  check_quad_matmuls(relpos::test::gpu_kernels(Kernels::Gpu), few, {1u, 31u, 33u, 100u}, {4u, 32u, 36u, 132u}, 9, rng);
}

// A 4 KiB binding limit and 3 workgroups per dimension: batches, rows and column tiles all split.
TEST_F(AttentionGpu, MatmulSplitPathsUnderLoweredLimits) {
  std::mt19937 rng(12);
  for (auto [batch, m, n, k, nt] : {std::tuple{5u, 70u, 45u, 16u, true}, {2u, 130u, 9u, 33u, false}, {7u, 3u, 200u, 8u, true},
                                    {1u, 300u, 64u, 12u, false}}) {
    MatmulParams p = dense_matmul(batch, m, n, k, nt);
    for (DType c : {DType::F32, DType::F16}) {
      p.c_dtype = c;
      p.accumulate = c == DType::F16;
      SCOPED_TRACE(describe(p));
      check_matmul(gpu_small_limits(), p, rng);
    }
  }
}

TEST_F(AttentionGpu, SoftmaxMasksAndEmptyRows) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 12; ++trial) {
    UnfusedAttentionParams p = random_attention(rng, 40);
    if (trial == 0) {  // every row of batch 0 empty, and the first rows of batch 1 (causal)
      p.batch = 2;
      p.causal = true;
      p.query_offset = -2;
      p.key_lengths = {0, p.keys};
    }
    SCOPED_TRACE(describe(p));
    const auto logits = random_floats(rng, std::size_t{p.batch} * p.heads * p.queries * p.keys, -30.0f, 30.0f);
    auto want = logits;
    masked_softmax_reference(p, want);
    Buffer b = make_buffer(gpu(), logits);
    run(gpu(), [&](Recorder& r) { masked_softmax(r, p, b); });
    const auto got = b.download<float>(want.size());
    // Weights <= 1: the sum over keys, the exp (64 ulp covers GLSL's 3 + 2|x| at |x| <= 30) and the division.
    EXPECT_LE(normalised_error(got, want), sum_error(p.keys + 64, 1.0));
    for (std::size_t e = 0; e < got.size(); ++e)
      if (want[e] == 0.0f) ASSERT_EQ(got[e], 0.0f) << "masked entry " << e;  // exact zeros, never NaN
  }
}

// A NaN logit makes its row NaN (masked entries stay 0), as the reference gives, also where the
// row is longer than a chunk and the chunks' sums are combined: an ordered `sum > 0` there once
// dropped the chunk holding the NaN.
TEST_F(AttentionGpu, SoftmaxOfARowWithANaNIsNaN) {
  std::mt19937 rng(15);
  for (const std::uint32_t keys : {100u, 10000u}) {  // one chunk, and two (8192 keys a chunk)
    const UnfusedAttentionParams p{.queries = 2, .keys = keys, .head_dim = 4, .causal = true, .query_offset = std::int64_t{keys} - 3};
    SCOPED_TRACE(describe(p));
    auto logits = random_floats(rng, std::size_t{p.queries} * p.keys, -30.0f, 30.0f);
    logits[keys - 5] = std::numeric_limits<float>::quiet_NaN();  // row 0, in the last chunk
    logits[keys + keys - 1] = std::numeric_limits<float>::quiet_NaN();  // row 1, masked (key K-1 > K-2)
    auto want = logits;
    masked_softmax_reference(p, want);
    Buffer b = make_buffer(gpu(), logits);
    run(gpu(), [&](Recorder& r) { masked_softmax(r, p, b); });
    const auto got = b.download<float>(want.size());
    const std::vector<bool> nan_rows = expect_nan_rows_match(got, want, keys, sum_error(p.keys + 64, 1.0), "softmax");
    EXPECT_EQ(nan_rows, (std::vector<bool>{true, false}));
  }
}

TEST_F(AttentionGpu, UnfusedAttentionMatchesReference) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 16; ++trial) {
    const UnfusedAttentionParams p = random_attention(rng, 48);
    SCOPED_TRACE(describe(p));
    check_attention(gpu(), p, rng);
    check_attention(relpos::test::gpu_kernels(trial % 2 ? Kernels::Gpu : Kernels::Cpu), p, rng);  // both classes
  }
}

TEST_F(AttentionGpu, UnfusedAttentionSplitPaths) {
  std::mt19937 rng(15);
  for (int trial = 0; trial < 4; ++trial) {
    UnfusedAttentionParams p = random_attention(rng, 48);
    p.queries = 37 + trial;
    p.keys = trial % 2 ? 45 : 44;  // 44: the quad path of the softmax, with windows at any row
    SCOPED_TRACE(describe(p));
    check_attention(gpu_small_limits(), p, rng);
  }
}

TEST_F(AttentionGpu, InvalidInputIsRejectedBeforeDispatch) {
  Context& ctx = gpu();
  UnfusedAttentionParams p;
  p.queries = p.keys = 4;
  p.head_dim = 8;
  Buffer x(ctx, 4 * 8 * 4), small(ctx, 16), logits(ctx, 16 * 4);
  Recorder r(ctx);
  expect_invalid([&] { unfused_attention(r, p, small, x, x, x); }, "q buffer");
  expect_invalid([&] { unfused_attention(r, p, x, x, small, x); }, "v buffer");
  expect_invalid([&] { unfused_attention(r, p, x, x, x, small); }, "out buffer");
  expect_invalid([&] { masked_softmax(r, p, small); }, "logits");
  UnfusedAttentionParams bad = p;
  bad.head_dim = 0;
  expect_invalid([&] { unfused_attention(r, bad, x, x, x, x); }, "head_dim");
  bad = p;
  bad.key_lengths = {4, 4};
  expect_invalid([&] { masked_softmax(r, bad, logits); }, "key_lengths");
  bad.key_lengths = {5};
  expect_invalid([&] { masked_softmax(r, bad, logits); }, "key_lengths");
  bad = p;
  bad.dtype = DType::I32;
  expect_invalid([&] { unfused_attention(r, bad, x, x, x, x); }, "dtype");
  bad = p;
  bad.batch = 2;  // the buffers hold one batch
  expect_invalid([&] { unfused_attention(r, bad, x, x, x, x); }, "q buffer");
  MatmulParams m = dense_matmul(1, 4, 4, 8, true);
  m.a_row_stride = 3;
  expect_invalid([&] { matmul(r, m, x, x, logits); }, "a_row_stride");
  m = dense_matmul(1, 4, 4, 8, true);
  expect_invalid([&] { matmul(r, m, x, small, logits); }, "matmul B");
  r.submit_and_wait();
}

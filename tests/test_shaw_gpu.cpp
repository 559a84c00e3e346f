// Shaw's relative keys and values on the GPU against the CPU reference: the cheap form's
// gather and buckets, tensor2tensor's materialised form, and the whole pipeline.
#include <relpos/relpos.hpp>

#include <cmath>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/shaw_seed.hpp"
#include "support/storage.hpp"
#include "support/test_data.hpp"
#include "support/tolerance.hpp"

using namespace relpos;
using namespace relpos::test;

namespace {

class ShawGpu : public GpuTest {};


// k from 1 to beyond the sequence, both alignments, cache mode, any offset.
ShawParams random_params(std::mt19937& rng, std::uint32_t max_len) {
  std::uniform_int_distribution<std::uint32_t> len(1, max_len);
  ShawParams p;
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 2)(rng);
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  p.queries = len(rng);
  p.keys = len(rng);
  p.head_dim = std::uniform_int_distribution<int>(0, 1)(rng) ? 8 : std::uniform_int_distribution<std::uint32_t>(1, 13)(rng);
  p.max_relative_position = std::uniform_int_distribution<std::uint32_t>(1, max_len + 8)(rng);
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0: p.query_offset = 0; break;
    case 1: p.query_offset = t2t_query_offset(p.queries, p.keys); break;
    case 2: p.queries = 1; p.query_offset = p.keys - 1; break;  // tensor2tensor's cache mode
    default: p.query_offset = std::uniform_int_distribution<std::int64_t>(-50, 50)(rng); break;
  }
  p.scale = std::uniform_real_distribution<float>(0.2f, 1.5f)(rng);
  return p;
}

std::string describe(const ShawParams& p) {
  return "k=" + std::to_string(p.max_relative_position) + " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) +
         " Q=" + std::to_string(p.queries) + " K=" + std::to_string(p.keys) + " D=" + std::to_string(p.head_dim) +
         " off=" + std::to_string(p.query_offset) + " scale=" + std::to_string(p.scale);
}

std::size_t rows(const ShawParams& p) { return std::size_t{p.batch} * p.heads * p.queries; }

// The relative-key term written (add = false: whatever the buffer held is replaced) or added into
// random logits.
void check_logits(Context& ctx, const ShawParams& p, DType q_dtype, bool materialised, bool add, std::mt19937& rng) {
  const auto q = rounded_to_storage(random_floats(rng, rows(p) * p.head_dim), q_dtype);
  const auto table = random_floats(rng, std::size_t{p.table_rows()} * p.head_dim);
  const auto logits = random_floats(rng, rows(p) * p.keys, -5.0f, 5.0f);
  const auto term = shaw_logits_direct_reference(p, q, table);
  auto want = term;
  if (add)
    for (std::size_t e = 0; e < want.size(); ++e) want[e] += logits[e];
  Buffer bq = make_float_buffer(ctx, q, q_dtype), bt = make_buffer(ctx, table), bl = make_buffer(ctx, logits);
  run(ctx, [&](Recorder& r) {
    if (materialised && add) shaw_logits_materialised_add(r, p, bq, bt, bl);
    else if (materialised) shaw_logits_materialised(r, p, bq, bt, bl);
    else if (add) shaw_logits_add(r, p, bq, bt, bl, q_dtype);
    else shaw_logits(r, p, bq, bt, bl, q_dtype);
  });
  ShawParams abs_p = p;
  abs_p.scale = std::abs(p.scale);
  const auto abs_term = shaw_logits_direct_reference(abs_p, abs_of(q), abs_of(table));
  // head_dim products, then the addition into the logits.
  const double tol = normalised(sum_error(p.head_dim + 1, max_abs(abs_term) + (add ? max_abs(logits) : 0.0)), want);
  EXPECT_LE(normalised_error(bl.download<float>(want.size()), want), tol);
}

void check_values(Context& ctx, const ShawParams& p, DType out_dtype, std::mt19937& rng) {
  const auto w = random_floats(rng, rows(p) * p.keys, 0.0f, 1.0f);
  const auto table = random_floats(rng, std::size_t{p.table_rows()} * p.head_dim);
  const auto out = rounded_to_storage(random_floats(rng, rows(p) * p.head_dim), out_dtype);
  const auto term = shaw_values_direct_reference(p, w, table);
  auto want = out;
  for (std::size_t e = 0; e < want.size(); ++e) want[e] += term[e];
  Buffer bw = make_buffer(ctx, w), bt = make_buffer(ctx, table), bo = make_float_buffer(ctx, out, out_dtype);
  run(ctx, [&](Recorder& r) { shaw_values_add(r, p, bw, bt, bo, out_dtype); });
  // The bucket sums (up to `keys` weights), then 2k+1 products, then the addition into out.
  const auto abs_term = shaw_values_direct_reference(p, w, abs_of(table));
  const double tol = normalised(sum_error(p.keys + p.table_rows() + 1, max_abs(abs_term) + max_abs(out)), want) +
                     (out_dtype == DType::F16 ? kHalfRounding : 0.0);
  EXPECT_LE(normalised_error(download_floats(bo, want.size(), out_dtype), want), tol);
}

void check_attention(Context& ctx, const ShawAttentionParams& sp, std::mt19937& rng) {
  const UnfusedAttentionParams& a = sp.attention;
  const std::size_t bh = std::size_t{a.batch} * a.heads, t = (2 * sp.max_relative_position + 1) * a.head_dim;
  const auto q = rounded_to_storage(random_floats(rng, bh * a.queries * a.head_dim), a.dtype);
  const auto k = rounded_to_storage(random_floats(rng, bh * a.keys * a.head_dim), a.dtype);
  const auto v = rounded_to_storage(random_floats(rng, bh * a.keys * a.head_dim), a.dtype);
  const auto ek = random_floats(rng, t), ev = random_floats(rng, t);
  const auto want = shaw_attention_reference(sp, q, k, v, ek, ev);
  Buffer bq = make_float_buffer(ctx, q, a.dtype), bk = make_float_buffer(ctx, k, a.dtype), bv = make_float_buffer(ctx, v, a.dtype);
  Buffer bek = make_buffer(ctx, ek), bev = make_buffer(ctx, ev), out(ctx, want.size() * dtype_size(a.dtype));
  run(ctx, [&](Recorder& r) { shaw_attention(r, sp, bq, bk, bv, bek, bev, out); });
  // Each logit is a 2·head_dim-long sum of q·(k + e) products; the output sums over keys and buckets.
  const double logit_error = sum_error(2 * a.head_dim, a.head_dim * max_abs(q) * (max_abs(k) + max_abs(ek))) * a.scale;
  const double tol = normalised(attention_error(logit_error, a.keys + t / a.head_dim, max_abs(v) + max_abs(ev)), want) +
                     (a.dtype == DType::F16 ? kHalfRounding : 0.0);
  EXPECT_LE(normalised_error(download_floats(out, want.size(), a.dtype), want), tol);
}

ShawAttentionParams random_attention(std::mt19937& rng, std::uint32_t max_len) {
  const ShawParams s = random_params(rng, max_len);
  ShawAttentionParams p;
  p.max_relative_position = s.max_relative_position;
  UnfusedAttentionParams& a = p.attention;
  a.batch = s.batch;
  a.heads = s.heads;
  a.queries = s.queries;
  a.keys = s.keys;
  a.head_dim = s.head_dim;
  a.query_offset = s.query_offset;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.causal = std::uniform_int_distribution<int>(0, 1)(rng);
  if (std::uniform_int_distribution<int>(0, 2)(rng) == 0)
    for (std::uint32_t b = 0; b < a.batch; ++b) a.key_lengths.push_back(std::uniform_int_distribution<std::uint32_t>(0, a.keys)(rng));
  a.dtype = std::uniform_int_distribution<int>(0, 1)(rng) ? DType::F16 : DType::F32;
  return p;
}

std::string describe(const ShawAttentionParams& p) {
  std::string s = describe(p.shaw()) + (p.attention.causal ? " causal " : " ") + std::string(dtype_name(p.attention.dtype)) + " lengths=";
  for (auto l : p.attention.key_lengths) s += std::to_string(l) + ",";
  return s;
}

}  // namespace

// tensor2tensor's worked example: integer inputs, so every product and sum is exact in float.
TEST_F(ShawGpu, SeedExactInBothForms) {
  const ShawSeed seed = shaw_seed();
  const ShawParams& p = seed.params;
  for (bool materialised : {false, true}) {
    // Written over a buffer of sevens, and added to zeros.
    Buffer bq = make_buffer(gpu(), seed.q), bt = make_buffer(gpu(), seed.table), bl = make_buffer(gpu(), std::vector<float>(96, 7.0f));
    Buffer bz = make_buffer(gpu(), std::vector<float>(96, 0.0f));
    run(gpu(), [&](Recorder& r) {
      if (materialised) shaw_logits_materialised(r, p, bq, bt, bl);
      else shaw_logits(r, p, bq, bt, bl);
      if (materialised) shaw_logits_materialised_add(r, p, bq, bt, bz);
      else shaw_logits_add(r, p, bq, bt, bz);
    });
    EXPECT_EQ(bl.download<float>(96), seed.expected) << (materialised ? "materialised" : "cheap");
    EXPECT_EQ(bz.download<float>(96), seed.expected) << (materialised ? "materialised add" : "cheap add");
  }
}

TEST_F(ShawGpu, RelativeKeysMatchReference) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 24; ++trial) {
    const ShawParams p = random_params(rng, 40);
    SCOPED_TRACE(describe(p));
    check_logits(gpu(), p, trial % 3 == 0 ? DType::F16 : DType::F32, false, trial % 2 == 0, rng);
    if (trial % 4 == 0) check_logits(gpu(), p, DType::F32, true, trial % 8 == 0, rng);
  }
}

TEST_F(ShawGpu, RelativeValuesMatchReference) {
  std::mt19937 rng(32);
  for (int trial = 0; trial < 24; ++trial) {
    const ShawParams p = random_params(rng, 40);
    SCOPED_TRACE(describe(p));
    check_values(gpu(), p, trial % 3 == 0 ? DType::F16 : DType::F32, rng);
  }
}

TEST_F(ShawGpu, AttentionMatchesReference) {
  std::mt19937 rng(33);
  for (int trial = 0; trial < 16; ++trial) {
    const ShawAttentionParams p = random_attention(rng, 40);
    SCOPED_TRACE(describe(p));
    check_attention(gpu(), p, rng);
  }
}

TEST_F(ShawGpu, SplitPathsUnderLoweredLimits) {
  std::mt19937 rng(34);
  Context& ctx = gpu_small_limits();
  for (int trial = 0; trial < 3; ++trial) {
    ShawParams p = random_params(rng, 40);
    p.batch = 2;
    p.queries = 33 + trial;
    p.keys = trial == 0 ? 48 : 50;  // 48: the quad paths, with windows at any row
    p.query_offset = t2t_query_offset(p.queries, p.keys);
    SCOPED_TRACE(describe(p));
    check_logits(ctx, p, DType::F32, false, true, rng);
    check_logits(ctx, p, DType::F16, false, false, rng);
    check_values(ctx, p, trial == 1 ? DType::F16 : DType::F32, rng);
    ShawAttentionParams a = random_attention(rng, 40);
    a.attention.queries = 30 + trial;
    a.attention.keys = 41;
    a.attention.key_lengths.clear();
    SCOPED_TRACE(describe(a));
    check_attention(ctx, a, rng);
  }
  // Rows longer than 3 workgroups of the gather's broadcast pass (256 quads each): the columns
  // take several dispatches, each starting at its own quad.
  Context& few = gpu_few_workgroups();
  ShawParams wide;
  wide.max_relative_position = 5;
  wide.queries = 3;
  wide.keys = 3 * 1024 + 40;
  wide.head_dim = 4;
  wide.query_offset = 1500;
  SCOPED_TRACE("wide " + describe(wide));
  check_logits(few, wide, DType::F32, false, true, rng);
  check_logits(few, wide, DType::F32, false, false, rng);
  ShawParams p;
  p.max_relative_position = 3;
  p.queries = p.keys = 12;
  p.head_dim = 8;
  p.heads = 2;
  SCOPED_TRACE("materialised " + describe(p));
  check_logits(ctx, p, DType::F32, true, true, rng);
  check_logits(ctx, p, DType::F32, true, false, rng);
}

TEST_F(ShawGpu, InvalidInputIsRejectedBeforeDispatch) {
  Context& ctx = gpu();
  ShawParams p;
  p.max_relative_position = 2;
  p.queries = p.keys = 4;
  p.head_dim = 8;
  p.heads = 2;
  Buffer q(ctx, 2 * 4 * 8 * 4), table(ctx, 5 * 8 * 4), logits(ctx, 2 * 16 * 4), small(ctx, 16);
  Recorder r(ctx);
  ShawParams bad = p;
  bad.max_relative_position = 0;
  expect_invalid([&] { shaw_logits_add(r, bad, q, table, logits); }, "max_relative_position");
  bad = p;
  bad.max_relative_position = 3;  // the table has 2·2 + 1 rows
  expect_invalid([&] { shaw_logits_add(r, bad, q, table, logits); }, "rel_keys");
  expect_invalid([&] { shaw_values_add(r, bad, logits, table, q); }, "rel_values");
  expect_invalid([&] { shaw_logits_materialised_add(r, bad, q, table, logits); }, "rel_keys");
  bad = p;
  bad.head_dim = 4;  // the table is [5, 8]
  expect_invalid([&] { shaw_logits_add(r, bad, q, table, logits); }, "rel_keys");
  bad = p;
  bad.heads = 3;  // q and logits hold two heads
  expect_invalid([&] { shaw_logits_add(r, bad, q, table, logits); }, "q buffer");
  bad = p;
  bad.batch = 2;
  expect_invalid([&] { shaw_values_add(r, bad, logits, table, q); }, "weights buffer");
  expect_invalid([&] { shaw_logits_add(r, p, q, table, small); }, "logits buffer");
  expect_invalid([&] { shaw_values_add(r, p, logits, table, small); }, "out buffer");
  expect_invalid([&] { shaw_logits_add(r, p, q, table, logits, DType::I32); }, "q_dtype");
  ShawAttentionParams a;
  a.attention.queries = a.attention.keys = 4;
  a.attention.head_dim = 8;
  a.attention.heads = 2;
  a.max_relative_position = 0;
  expect_invalid([&] { shaw_attention(r, a, q, q, q, table, table, q); }, "max_relative_position");
  a.max_relative_position = 2;
  expect_invalid([&] { shaw_attention(r, a, q, small, q, table, table, q); }, "k buffer");
  expect_invalid([&] { shaw_attention(r, a, q, q, q, table, small, q); }, "rel_values");
  r.submit_and_wait();
}

// The attention reference against tensor2tensor's worked Shaw logits, hand-computed masks, the T5 bias
// reference, and the log-sum-exp merge against attention over the whole key range.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "support/expect.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::data_lines;
using relpos::test::expect_invalid;
using relpos::test::random_floats;

namespace {

AttentionParams shape(std::uint32_t b, std::uint32_t h, std::uint32_t hkv, std::uint32_t q, std::uint32_t k, std::uint32_t d) {
  return {.batch = b, .heads = h, .kv_heads = hkv, .queries = q, .keys = k, .head_dim = d};
}

float parse(const std::string& s) { return s == "-inf" ? -std::numeric_limits<float>::infinity() : std::stof(s); }

}  // namespace

// tensor2tensor's relative-key logits of the worked example (D = 5, zero-padded to 8: the dots are unchanged).
TEST(AttentionReference, ShawLogitsMatchSeed) {
  auto p = shape(2, 3, 3, 4, 4, 8);
  p.bias = AttentionBias::Shaw;
  p.max_relative_position = 2;
  p.scale = 1.0f;
  std::vector<float> q(2 * 3 * 4 * 8, 0.0f), kv(q.size(), 0.0f), rel_keys(5 * 8, 0.0f), rel_values(5 * 8, 0.0f);
  for (std::size_t row = 0; row < 24; ++row)
    for (std::size_t d = 0; d < 5; ++d) q[row * 8 + d] = static_cast<float>(row * 5 + d);  // arange(120)
  std::vector<std::vector<std::string>> e_rows;
  std::size_t r = 0;
  for (const auto& w : data_lines("attention_shaw_seed.txt")) {
    if (w[0] == "rel_key") {
      for (std::size_t d = 0; d < 5; ++d) rel_keys[r * 8 + d] = std::stof(w[1 + d]);
      ++r;
    } else {
      e_rows.push_back(w);
    }
  }
  ASSERT_EQ(r, 5u);
  ASSERT_EQ(e_rows.size(), 24u);
  const auto logits = attention_logits_reference(p, {q, kv, kv, {}, rel_keys, rel_values, {}});
  for (const auto& w : e_rows) {
    const std::size_t row = (std::stoul(w[1]) * 3 + std::stoul(w[2])) * 4 + std::stoul(w[3]);
    for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(logits[row * 4 + j], std::stod(w[4 + j])) << "row " << row << " j " << j;
  }
}

// ALiBi with causal mask and query offset, key padding and a memory prefix, by hand.
TEST(AttentionReference, MasksAndMemoryPrefixByHand) {
  auto p = shape(1, 1, 1, 2, 5, 4);
  p.bias = AttentionBias::Alibi;
  p.causal = true;
  p.query_offset = 1;
  p.memory_prefix = 2;
  const std::vector<float> q(8, 0.0f), slopes = {0.5f};
  std::vector<float> v;
  for (int j = 0; j < 5; ++j) v.insert(v.end(), {float(j), 1.0f, 0.0f, -float(j)});
  const std::vector<std::uint32_t> lengths = {4};
  const AttentionHostInputs in{q, v, v, slopes, {}, {}, lengths};
  const auto logits = attention_logits_reference(p, in);
  const auto res = attention_reference(p, in);
  int checked = 0;
  for (const auto& w : data_lines("attention_masks.txt")) {
    const std::size_t i = std::stoul(w[1]);
    if (w[0] == "logits")
      for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(logits[i * 5 + j], parse(w[2 + j])) << "i " << i << " j " << j;
    if (w[0] == "out")
      for (std::size_t d = 0; d < 4; ++d) EXPECT_NEAR(res.out[i * 4 + d], std::stof(w[2 + d]), 1e-6) << "i " << i;
    if (w[0] == "lse") EXPECT_NEAR(res.lse[i], std::stof(w[2]), 1e-6);
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(AttentionReference, FullyMaskedRowsGiveZeros) {
  auto p = shape(2, 1, 1, 3, 4, 4);
  p.causal = true;
  p.query_offset = -2;  // query 0 and 1 sit before every key
  std::mt19937 rng(1);
  auto q = random_floats(rng, 2 * 3 * 4), kv = random_floats(rng, 2 * 4 * 4);
  const std::vector<std::uint32_t> lengths = {4, 0};  // batch 1 has no keys at all
  const auto res = attention_reference(p, {q, kv, kv, {}, {}, {}, lengths});
  for (std::size_t row = 0; row < 6; ++row) {
    const bool masked = row >= 3 || row < 2;
    EXPECT_EQ(std::isinf(res.lse[row]) && res.lse[row] < 0, masked) << row;
    for (std::size_t d = 0; d < 4; ++d) {
      EXPECT_FALSE(std::isnan(res.out[row * 4 + d]));
      if (masked) EXPECT_EQ(res.out[row * 4 + d], 0.0f);
    }
  }
}

// The T5 mode's bias is t5_bias_reference's, shifted past the memory keys; a distance row built
// from the same buckets gives the same bias.
TEST(AttentionReference, T5AndDistanceRowAgreeWithT5Reference) {
  auto p = shape(1, 3, 1, 7, 12, 4);
  p.query_offset = 4;
  p.memory_prefix = 3;
  p.bias = AttentionBias::T5;
  p.t5.num_buckets = 8;
  p.t5.max_distance = 10;
  p.t5.scale = 0.5f;
  std::mt19937 rng(2);
  const auto table = random_floats(rng, 8 * 3);
  const std::vector<float> none;
  const auto got = attention_bias_reference(p, {none, none, none, table, none, none, {}});
  T5Params t = p.t5_row_params();
  t.keys = p.keys - p.memory_prefix;
  const auto want = t5_bias_reference(t, table);
  std::vector<float> row(3 * (7 + 12 - 1), 0.0f);
  for (std::uint32_t h = 0; h < 3; ++h)
    for (std::uint32_t i = 0; i < 7; ++i)
      for (std::uint32_t j = 0; j < 12; ++j) {
        const float g = got[(h * 7 + i) * 12 + j];
        if (j < 3) {
          EXPECT_EQ(g, 0.0f);
          continue;
        }
        EXPECT_EQ(g, want[(h * 7 + i) * 9 + (j - 3)]) << h << " " << i << " " << j;
        row[h * 18 + (j - 3) + 6 - i] = g;
      }
  p.bias = AttentionBias::Distance;
  EXPECT_EQ(attention_bias_reference(p, {none, none, none, row, none, none, {}}), got);
}

// Attention over two key blocks merged by log-sum-exp equals attention over all keys.
TEST(AttentionReference, MergeOfKeyBlocksEqualsWholeRange) {
  std::mt19937 rng(3);
  const std::uint32_t K = 11, K1 = 4, Q = 3, D = 8, H = 2;
  auto p = shape(1, H, 1, Q, K, D);
  p.bias = AttentionBias::Dense;
  auto q = random_floats(rng, H * Q * D), k = random_floats(rng, K * D), v = random_floats(rng, K * D);
  auto bias = random_floats(rng, H * Q * K);
  for (std::uint32_t j = 0; j < K1; ++j) bias[(1 * Q + 2) * K + j] = -std::numeric_limits<float>::infinity();  // masked in block 0
  const auto whole = attention_reference(p, {q, k, v, bias, {}, {}, {}});
  AttentionMergeParams mp{2, std::uint64_t{H} * Q, D, DType::F32};
  std::vector<float> parts_out, parts_lse;
  for (auto [j0, j1] : {std::pair{0u, K1}, std::pair{K1, K}}) {
    auto pb = p;
    pb.keys = j1 - j0;
    std::vector<float> kb(k.begin() + j0 * D, k.begin() + j1 * D), vb(v.begin() + j0 * D, v.begin() + j1 * D), bb;
    for (std::uint32_t r = 0; r < H * Q; ++r) bb.insert(bb.end(), bias.begin() + r * K + j0, bias.begin() + r * K + j1);
    const auto part = attention_reference(pb, {q, kb, vb, bb, {}, {}, {}});
    parts_out.insert(parts_out.end(), part.out.begin(), part.out.end());
    parts_lse.insert(parts_lse.end(), part.lse.begin(), part.lse.end());
  }
  const auto merged = attention_merge_reference(mp, parts_out, parts_lse);
  EXPECT_LT(normalised_error(merged.out, whole.out), 1e-6);
  EXPECT_LT(normalised_error(merged.lse, whole.lse), 1e-6);
}

TEST(AttentionReference, InvalidParametersNameTheLimit) {
  auto ok = shape(1, 4, 2, 3, 5, 8);
  ok.validate();
  auto p = ok;
  p.kv_heads = 3;
  expect_invalid([&] { p.validate(); }, "kv_heads");
  p = ok;
  p.head_dim = 260;
  expect_invalid([&] { p.validate(); }, "head_dim");
  p.head_dim = 6;
  expect_invalid([&] { p.validate(); }, "head_dim");
  p = ok;
  p.memory_prefix = 6;
  expect_invalid([&] { p.validate(); }, "memory_prefix");
  p = ok;
  p.bias = AttentionBias::Shaw;
  expect_invalid([&] { p.validate(); }, "max_relative_position");
  p = ok;
  p.dtype = DType::I32;
  expect_invalid([&] { p.validate(); }, "dtype");
  p = ok;
  p.bias = AttentionBias::T5;
  p.t5.max_distance = 4;
  expect_invalid([&] { p.validate(); }, "max_distance");
  std::vector<float> q(4 * 3 * 8), kv(2 * 5 * 8), wrong(7);
  // Each size named with what it is made of (a packed call's q is total_queries rows, exactly).
  expect_invalid([&] { attention_reference(ok, {wrong, kv, kv, {}, {}, {}, {}}); },
                 "q = 7 values: must be exactly batch * heads * queries * head_dim = 96");
  expect_invalid([&] { attention_reference(ok, {q, wrong, kv, {}, {}, {}, {}}); }, "k = 7 values: must be exactly batch * kv_heads * keys * head_dim = 80");
  p = ok;
  p.bias = AttentionBias::Alibi;
  expect_invalid([&] { attention_reference(p, {q, kv, kv, wrong, {}, {}, {}}); }, "bias");
  // A slope is a parameter: inf or NaN has no meaning (at rp = 0 it gives inf * 0 = NaN).
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    const std::vector<float> slopes = {0.5f, 0.25f, bad, 0.125f};
    expect_invalid([&] { attention_reference(p, {q, kv, kv, slopes, {}, {}, {}}); }, "slopes");
  }
  AttentionMergeParams mp{0, 4, 8, DType::F32};
  expect_invalid([&] { mp.validate(); }, "parts");
}

// The CPU references of Shaw's relative keys and values: tensor2tensor's worked example, and
// tensor2tensor's literal form against the direct definition.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <random>

#include "support/shaw_seed.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using namespace relpos::test;

namespace {

ShawParams random_params(std::mt19937& rng) {
  std::uniform_int_distribution<std::uint32_t> size(1, 9), kdist(1, 12);
  ShawParams p;
  p.max_relative_position = kdist(rng);
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 2)(rng);
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  p.queries = size(rng);
  p.keys = size(rng);
  p.head_dim = std::uniform_int_distribution<std::uint32_t>(1, 7)(rng);
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0: p.query_offset = 0; break;
    case 1: p.query_offset = t2t_query_offset(p.queries, p.keys); break;
    case 2: p.queries = 1; p.query_offset = p.keys - 1; break;  // cache mode
    default: p.query_offset = std::uniform_int_distribution<std::int64_t>(-20, 20)(rng); break;
  }
  p.scale = std::uniform_real_distribution<float>(0.1f, 2.0f)(rng);
  return p;
}

}  // namespace

TEST(ShawReference, SeedIndexTable) {
  const ShawSeed s = shaw_seed();
  EXPECT_EQ(shaw_index_reference(s.params), s.index);
  EXPECT_EQ(t2t_relative_positions_matrix(4, 4, 2, false), s.index);
}

TEST(ShawReference, SeedLogitsExactInBothForms) {
  const ShawSeed s = shaw_seed();
  EXPECT_EQ(shaw_logits_t2t_reference(s.params, s.q, s.table), s.expected);
  EXPECT_EQ(shaw_logits_direct_reference(s.params, s.q, s.table), s.expected);
}

// tensor2tensor aligns the last query with the last key, and its cache mode is one query after
// keys - 1 cached ones: both are query offsets of the general index.
TEST(ShawReference, T2tAlignmentsAreQueryOffsets) {
  for (std::uint32_t k : {1u, 2u, 5u, 40u})
    for (std::uint32_t nk = 1; nk <= 9; ++nk) {
      ShawParams p;
      p.max_relative_position = k;
      p.keys = nk;
      p.head_dim = 1;
      for (std::uint32_t nq = 1; nq <= nk; ++nq) {
        p.queries = nq;
        p.query_offset = t2t_query_offset(nq, nk);
        EXPECT_EQ(t2t_relative_positions_matrix(nq, nk, k, false), shaw_index_reference(p)) << nq << "x" << nk << " k=" << k;
      }
      p.queries = 1;
      p.query_offset = nk - 1;
      EXPECT_EQ(t2t_relative_positions_matrix(1, nk, k, true), shaw_index_reference(p)) << "cache " << nk << " k=" << k;
    }
  // By hand: 2 queries, 5 keys, k = 1: query 0 sits at position 3.
  EXPECT_EQ(t2t_relative_positions_matrix(2, 5, 1, false), (std::vector<std::int32_t>{0, 0, 0, 1, 2, 0, 0, 0, 0, 1}));
  EXPECT_EQ(t2t_relative_positions_matrix(1, 4, 2, true), (std::vector<std::int32_t>{0, 0, 1, 2}));
}

TEST(ShawReference, LiteralAndDirectFormsAgree) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 60; ++trial) {
    const ShawParams p = random_params(rng);
    const std::size_t bhq = std::size_t{p.batch} * p.heads * p.queries;
    const auto table = random_floats(rng, std::size_t{p.table_rows()} * p.head_dim);
    const auto q = random_floats(rng, bhq * p.head_dim);
    const auto w = random_floats(rng, bhq * p.keys, 0.0f, 1.0f);
    // Same products summed in the same order in double: equal to the bit.
    EXPECT_EQ(shaw_logits_t2t_reference(p, q, table), shaw_logits_direct_reference(p, q, table)) << trial;
    EXPECT_EQ(shaw_values_t2t_reference(p, w, table), shaw_values_direct_reference(p, w, table)) << trial;
  }
}

// Hand values: with one-hot weights the value term is the selected table row; with k beyond the
// sequence no index clips and the rows are the plain distances.
TEST(ShawReference, ValuesByHand) {
  ShawParams p;
  p.max_relative_position = 1;
  p.queries = 2;
  p.keys = 4;
  p.head_dim = 2;
  p.query_offset = 0;
  const std::vector<float> table = {10, 11, 20, 21, 30, 31};  // rows for rp = -1, 0, +1
  // query 0 weighs keys 0 (rp 0) and 3 (rp 3 -> +1); query 1 weighs key 0 (rp -1) and 2 (rp 1).
  const std::vector<float> w = {0.5f, 0, 0, 0.5f, 0.25f, 0, 0.75f, 0};
  EXPECT_EQ(shaw_values_direct_reference(p, w, table), (std::vector<float>{25, 26, 25, 26}));
  EXPECT_EQ(shaw_values_t2t_reference(p, w, table), (std::vector<float>{25, 26, 25, 26}));
  p.max_relative_position = 9;
  p.query_offset = 2;
  const auto idx = shaw_index_reference(p);
  for (std::uint32_t i = 0; i < 2; ++i)
    for (std::uint32_t j = 0; j < 4; ++j) EXPECT_EQ(idx[i * 4 + j], 9 + static_cast<int>(j) - static_cast<int>(i) - 2);
}

TEST(ShawReference, AttentionReductions) {
  std::mt19937 rng(8);
  ShawAttentionParams p;
  UnfusedAttentionParams& a = p.attention;
  a.batch = 2;
  a.heads = 2;
  a.queries = 5;
  a.keys = 7;
  a.head_dim = 3;
  a.scale = 0.5f;
  a.causal = true;
  a.query_offset = -2;  // queries 0 and 1 see no key: zeros, not NaN
  a.key_lengths = {7, 4};
  p.max_relative_position = 2;
  const auto q = random_floats(rng, 2 * 2 * 5 * 3), k = random_floats(rng, 2 * 2 * 7 * 3), v = random_floats(rng, 2 * 2 * 7 * 3);
  const std::vector<float> zeros(5 * 3, 0.0f);
  const auto plain = unfused_attention_reference(a, q, k, v);
  const auto shaw = shaw_attention_reference(p, q, k, v, zeros, zeros);
  ASSERT_EQ(plain.size(), shaw.size());
  for (std::size_t e = 0; e < plain.size(); ++e) EXPECT_NEAR(plain[e], shaw[e], 1e-6) << e;
  for (std::size_t g = 0; g < 4; ++g)
    for (std::size_t c = 0; c < 6; ++c) EXPECT_EQ(shaw[g * 15 + c], 0.0f);
  auto w = unfused_logits_reference(a, q, k);
  masked_softmax_reference(a, w);
  for (std::uint32_t b = 0; b < 2; ++b)
    for (std::uint32_t i = 2; i < 5; ++i) {
      double sum = 0;
      for (std::uint32_t j = 0; j < 7; ++j) {
        const float x = w[((b * 2) * 5 + i) * 7 + j];
        if (a.masked(b, i, j)) EXPECT_EQ(x, 0.0f);
        sum += x;
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
}

TEST(ShawReference, InvalidParameters) {
  ShawParams p = shaw_seed().params;
  const std::vector<float> q(120), table(25);
  p.max_relative_position = 0;
  EXPECT_THROW(shaw_logits_direct_reference(p, q, table), InvalidArgument);
  p = shaw_seed().params;
  EXPECT_THROW(shaw_logits_t2t_reference(p, q, std::vector<float>(20)), InvalidArgument);
  EXPECT_THROW(shaw_values_direct_reference(p, std::vector<float>(95), table), InvalidArgument);
  EXPECT_THROW(t2t_relative_positions_matrix(5, 4, 2, false), InvalidArgument);
  EXPECT_THROW(t2t_relative_positions_matrix(2, 4, 0, false), InvalidArgument);
}

// CPU reference for Shaw et al. relative keys and values (docs/shaw.md, "Semantics"), in two forms that must
// agree: tensor2tensor's literal one (materialised [Q, K, D] embeddings, transpose / reshape /
// batched matmul over query position) and the direct definition. Sums in double, in the same
// order in both forms, so they agree to the bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "params/checks.hpp"
#include "relpos/error.hpp"
#include "relpos/shaw.hpp"

namespace relpos {

using detail::require;

std::vector<std::int32_t> t2t_relative_positions_matrix(std::uint32_t length_q, std::uint32_t length_k,
                                                        std::uint32_t max_relative_position, bool cache) {
  require(max_relative_position >= 1, "max_relative_position", std::to_string(max_relative_position), "must be >= 1");
  require(length_k >= 1, "length_k", std::to_string(length_k), "must be >= 1");
  const std::int64_t k = max_relative_position;
  auto clip = [k](std::int64_t d) { return static_cast<std::int32_t>(std::clamp(d, -k, k) + k); };
  std::vector<std::int32_t> out;
  if (cache) {
    // distance_mat = expand_dims(range(-length_k + 1, 1, 1), 0)
    for (std::int64_t d = -static_cast<std::int64_t>(length_k) + 1; d < 1; ++d) out.push_back(clip(d));
    return out;
  }
  require(length_q >= 1 && length_q <= length_k, "length_q", std::to_string(length_q),
          "must be in [1, length_k] (tensor2tensor takes range(length_k)[-length_q:])");
  std::vector<std::int64_t> range_k(length_k);
  for (std::uint32_t j = 0; j < length_k; ++j) range_k[j] = j;
  const std::vector<std::int64_t> range_q(range_k.end() - length_q, range_k.end());
  for (std::uint32_t i = 0; i < length_q; ++i)
    for (std::uint32_t j = 0; j < length_k; ++j) out.push_back(clip(range_k[j] - range_q[i]));
  return out;
}

std::vector<std::int32_t> shaw_index_reference(const ShawParams& p) {
  p.validate();
  std::vector<std::int32_t> out(std::size_t{p.queries} * p.keys);
  for (std::uint32_t i = 0; i < p.queries; ++i)
    for (std::uint32_t j = 0; j < p.keys; ++j) out[std::size_t{i} * p.keys + j] = p.index(i, j);
  return out;
}

namespace {

void check_inputs(const ShawParams& p, std::size_t x, std::size_t x_need, const char* x_name, std::size_t table) {
  p.validate();
  require(x == x_need, x_name, std::to_string(x) + " values", "must hold " + std::to_string(x_need));
  const std::size_t t = std::size_t{p.table_rows()} * p.head_dim;
  require(table == t, "relative table", std::to_string(table) + " values",
          "must be [2k + 1, head_dim] = " + std::to_string(t) + " values");
}

// The [Q, K, D] relative embeddings, materialised as tensor2tensor gathers them.
std::vector<float> materialise(const ShawParams& p, std::span<const float> table) {
  const std::vector<std::int32_t> idx = shaw_index_reference(p);
  std::vector<float> e(idx.size() * p.head_dim);
  for (std::size_t ij = 0; ij < idx.size(); ++ij)
    std::copy_n(table.begin() + static_cast<std::ptrdiff_t>(idx[ij]) * p.head_dim, p.head_dim, e.begin() + ij * p.head_dim);
  return e;
}

// x [B, H, Q, L] -> transpose [Q, B, H, L] -> reshape [Q, B*H, L].
std::vector<float> to_query_major(const ShawParams& p, std::span<const float> x, std::size_t len) {
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  std::vector<float> t(x.size());
  for (std::size_t g = 0; g < bh; ++g)
    for (std::size_t i = 0; i < p.queries; ++i)
      std::copy_n(x.begin() + static_cast<std::ptrdiff_t>((g * p.queries + i) * len), len, t.begin() + (i * bh + g) * len);
  return t;
}

// The inverse: [Q, B*H, L] -> reshape [Q, B, H, L] -> transpose [B, H, Q, L].
std::vector<float> from_query_major(const ShawParams& p, const std::vector<float>& t, std::size_t len) {
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  std::vector<float> x(t.size());
  for (std::size_t i = 0; i < p.queries; ++i)
    for (std::size_t g = 0; g < bh; ++g)
      std::copy_n(t.begin() + static_cast<std::ptrdiff_t>((i * bh + g) * len), len, x.begin() + (g * p.queries + i) * len);
  return x;
}

}  // namespace

std::vector<float> shaw_logits_t2t_reference(const ShawParams& p, std::span<const float> q, std::span<const float> rel_keys) {
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  check_inputs(p, q.size(), bh * p.queries * p.head_dim, "q", rel_keys.size());
  const std::vector<float> e = materialise(p, rel_keys);        // [Q, K, D]
  const std::vector<float> x = to_query_major(p, q, p.head_dim);   // [Q, BH, D]
  // matmul(x, transpose(e, [0, 2, 1])): [Q, BH, D] x [Q, D, K] -> [Q, BH, K]
  std::vector<float> y(std::size_t{p.queries} * bh * p.keys);
  for (std::size_t i = 0; i < p.queries; ++i)
    for (std::size_t g = 0; g < bh; ++g)
      for (std::size_t j = 0; j < p.keys; ++j) {
        double s = 0.0;
        for (std::size_t c = 0; c < p.head_dim; ++c)
          s += static_cast<double>(x[(i * bh + g) * p.head_dim + c]) * e[(i * p.keys + j) * p.head_dim + c];
        y[(i * bh + g) * p.keys + j] = static_cast<float>(p.scale * s);
      }
  return from_query_major(p, y, p.keys);
}

std::vector<float> shaw_logits_direct_reference(const ShawParams& p, std::span<const float> q, std::span<const float> rel_keys) {
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  check_inputs(p, q.size(), bh * p.queries * p.head_dim, "q", rel_keys.size());
  std::vector<float> out(bh * p.queries * p.keys);
  for (std::size_t g = 0; g < bh; ++g)
    for (std::uint32_t i = 0; i < p.queries; ++i)
      for (std::uint32_t j = 0; j < p.keys; ++j) {
        const float* qi = q.data() + (g * p.queries + i) * p.head_dim;
        const float* e = rel_keys.data() + static_cast<std::size_t>(p.index(i, j)) * p.head_dim;
        double s = 0.0;
        for (std::size_t c = 0; c < p.head_dim; ++c) s += static_cast<double>(qi[c]) * e[c];
        out[(g * p.queries + i) * p.keys + j] = static_cast<float>(p.scale * s);
      }
  return out;
}

std::vector<float> shaw_values_t2t_reference(const ShawParams& p, std::span<const float> weights,
                                             std::span<const float> rel_values) {
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  check_inputs(p, weights.size(), bh * p.queries * p.keys, "weights", rel_values.size());
  const std::vector<float> e = materialise(p, rel_values);         // [Q, K, D]
  const std::vector<float> x = to_query_major(p, weights, p.keys);  // [Q, BH, K]
  // matmul(x, e): [Q, BH, K] x [Q, K, D] -> [Q, BH, D]
  std::vector<float> y(std::size_t{p.queries} * bh * p.head_dim);
  for (std::size_t i = 0; i < p.queries; ++i)
    for (std::size_t g = 0; g < bh; ++g)
      for (std::size_t c = 0; c < p.head_dim; ++c) {
        double s = 0.0;
        for (std::size_t j = 0; j < p.keys; ++j)
          s += static_cast<double>(x[(i * bh + g) * p.keys + j]) * e[(i * p.keys + j) * p.head_dim + c];
        y[(i * bh + g) * p.head_dim + c] = static_cast<float>(s);
      }
  return from_query_major(p, y, p.head_dim);
}

std::vector<float> shaw_values_direct_reference(const ShawParams& p, std::span<const float> weights,
                                                std::span<const float> rel_values) {
  const std::size_t bh = std::size_t{p.batch} * p.heads;
  check_inputs(p, weights.size(), bh * p.queries * p.keys, "weights", rel_values.size());
  std::vector<float> out(bh * p.queries * p.head_dim);
  for (std::size_t g = 0; g < bh; ++g)
    for (std::uint32_t i = 0; i < p.queries; ++i)
      for (std::size_t c = 0; c < p.head_dim; ++c) {
        double s = 0.0;
        for (std::uint32_t j = 0; j < p.keys; ++j)
          s += static_cast<double>(weights[(g * p.queries + i) * p.keys + j]) *
               rel_values[static_cast<std::size_t>(p.index(i, j)) * p.head_dim + c];
        out[(g * p.queries + i) * p.head_dim + c] = static_cast<float>(s);
      }
  return out;
}

std::vector<float> shaw_attention_reference(const ShawAttentionParams& p, std::span<const float> q, std::span<const float> k,
                                            std::span<const float> v, std::span<const float> rel_keys,
                                            std::span<const float> rel_values) {
  p.validate();
  const UnfusedAttentionParams& a = p.attention;
  const ShawParams s = p.shaw();
  const std::size_t bh = std::size_t{a.batch} * a.heads, d = a.head_dim;
  check_inputs(s, q.size(), bh * a.queries * d, "q", rel_keys.size());
  check_inputs(s, k.size(), bh * a.keys * d, "k", rel_values.size());
  require(v.size() == k.size(), "v", std::to_string(v.size()) + " values", "must hold " + std::to_string(k.size()));
  std::vector<float> logits(bh * a.queries * a.keys);
  for (std::size_t g = 0; g < bh; ++g)
    for (std::uint32_t i = 0; i < a.queries; ++i)
      for (std::uint32_t j = 0; j < a.keys; ++j) {
        const float* qi = q.data() + (g * a.queries + i) * d;
        const float* kj = k.data() + (g * a.keys + j) * d;
        const float* e = rel_keys.data() + static_cast<std::size_t>(s.index(i, j)) * d;
        double sum = 0.0;
        for (std::size_t c = 0; c < d; ++c) sum += static_cast<double>(qi[c]) * (static_cast<double>(kj[c]) + e[c]);
        logits[(g * a.queries + i) * a.keys + j] = static_cast<float>(sum * a.scale);
      }
  masked_softmax_reference(a, logits);
  std::vector<float> out(bh * a.queries * d);
  for (std::size_t g = 0; g < bh; ++g)
    for (std::uint32_t i = 0; i < a.queries; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        double sum = 0.0;
        for (std::uint32_t j = 0; j < a.keys; ++j)
          sum += static_cast<double>(logits[(g * a.queries + i) * a.keys + j]) *
                 (static_cast<double>(v[(g * a.keys + j) * d + c]) + rel_values[static_cast<std::size_t>(s.index(i, j)) * d + c]);
        out[(g * a.queries + i) * d + c] = static_cast<float>(sum);
      }
  return out;
}

}  // namespace relpos

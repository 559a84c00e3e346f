#pragma once
// The CPU reference side of the per-distance bias kit (docs/ARCHITECTURE.md, "Adding a
// per-distance bias"): a family gives bias_at(h, rp); the kit owns the rows, the causal mask and
// the expansion (the window's shape and checks: params/distance_window.hpp).
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "params/distance_window.hpp"

namespace relpos::detail {

// float32 [heads, Q, K] from the per-distance rows [heads, Q + K - 1] (entry x holds rp_first + x).
inline std::vector<float> expand_distance_rows_reference(const DistanceWindow& w, std::span<const float> rows) {
  const std::size_t Q = w.queries, K = w.keys, L = w.row_len();
  require(rows.size() == L * w.heads, "rows", std::to_string(rows.size()) + " values",
          "must hold heads * (queries + keys - 1) = " + std::to_string(L * w.heads));
  std::vector<float> out(w.heads * Q * K);
  for (std::size_t h = 0; h < w.heads; ++h)
    for (std::size_t i = 0; i < Q; ++i)
      for (std::size_t j = 0; j < K; ++j) out[(h * Q + i) * K + j] = rows[h * L + j + (Q - 1 - i)];
  return out;
}

// The rows of bias_at(h, rp) (-inf for rp > 0 under causal), then their expansion [heads, Q, K].
template <class BiasAt>
std::vector<float> distance_bias_reference(const DistanceWindow& w, BiasAt&& bias_at) {
  w.validate();
  const std::uint64_t L = w.row_len();
  std::vector<float> rows(L * w.heads);
  for (std::uint32_t h = 0; h < w.heads; ++h)
    for (std::uint64_t x = 0; x < L; ++x) {
      const std::int64_t rp = w.rp_first() + static_cast<std::int64_t>(x);
      rows[h * L + x] = w.causal && rp > 0 ? -std::numeric_limits<float>::infinity() : bias_at(h, rp);
    }
  return expand_distance_rows_reference(w, rows);
}

// logits [batch, heads, Q, K] += bias [heads, Q, K], one float32 add per value.
inline void distance_bias_add_reference(const DistanceWindow& w, std::span<const float> bias, std::span<float> logits) {
  require(logits.size() == bias.size() * w.batch, "logits", std::to_string(logits.size()) + " values",
          "must hold batch * heads * queries * keys = " + std::to_string(bias.size() * w.batch));
  for (std::size_t b = 0; b < w.batch; ++b)
    for (std::size_t e = 0; e < bias.size(); ++e) logits[b * bias.size() + e] += bias[e];
}

}  // namespace relpos::detail

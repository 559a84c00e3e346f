#pragma once
// The CPU side of the per-distance bias kit (docs/ARCHITECTURE.md, "Adding a per-distance bias"):
// a bias that depends only on (head, rp), rp = j - (i + query_offset), is one row of Q + K - 1
// values per head, and output row (b, h, i) is that row's window starting at Q - 1 - i. A family
// gives bias_at(h, rp); the kit owns the shape checks, the rows, the causal mask and the expansion.
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "reference/checks.hpp"

namespace relpos::detail {

// The window of relative positions a per-distance bias is evaluated on, and its outputs.
struct DistanceWindow {
  std::uint32_t heads = 1;
  std::uint32_t queries = 1;
  std::uint32_t keys = 1;
  std::int64_t query_offset = 0;  // query i sits at absolute position i + query_offset
  std::uint32_t batch = 1;        // leading dimension of the logits of an in-place add
  bool causal = false;            // -inf for rp > 0

  std::uint64_t row_len() const { return std::uint64_t{queries} + keys - 1; }
  // Relative position of row entry 0: -(Q - 1) - query_offset.
  std::int64_t rp_first() const { return -(static_cast<std::int64_t>(queries) - 1) - query_offset; }

  // Relative positions, the rows and the output rows must fit the 32-bit indices the shaders use.
  void validate() const {
    require(queries >= 1, "queries", std::to_string(queries), "must be >= 1");
    require(keys >= 1, "keys", std::to_string(keys), "must be >= 1");
    require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
    require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
    constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
    const std::int64_t rp_last = static_cast<std::int64_t>(keys) - 1 - query_offset;
    require(query_offset > -kMax && query_offset < kMax && rp_first() > -kMax && rp_last < kMax, "query_offset",
            std::to_string(query_offset), "puts relative positions outside +-(2^31 - 1)");
    require(row_len() * heads <= 0xffffffffull, "heads * (queries + keys - 1)", std::to_string(row_len() * heads), "must be < 2^32");
    const std::uint64_t rows = static_cast<std::uint64_t>(batch) * heads * queries;
    require(rows <= 0xffffffffull, "batch * heads * queries", std::to_string(rows), "must be < 2^32");
    checked_elements({batch, heads, queries, keys}, "batch * heads * queries * keys");
  }
};

// The window of a family's parameters (ALiBi's, KERPLE's: the fields every masked per-distance
// bias has).
template <class Params>
DistanceWindow distance_window(const Params& p) {
  return {p.heads, p.queries, p.keys, p.query_offset, p.batch, p.causal};
}

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

#pragma once
// The window of relative positions a per-distance bias is evaluated on: a bias that depends only
// on (head, rp), rp = j - (i + query_offset), is one row of Q + K - 1 values per head, and output
// row (b, h, i) is that row's window starting at Q - 1 - i. Its shape and the checks every
// per-distance family's parameters share.
#include <cstdint>
#include <limits>
#include <string>

#include "params/checks.hpp"

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
    // Named by what reaches past the range: the offset, the first query or the last key.
    require(query_offset > -kMax && query_offset < kMax, "query_offset", std::to_string(query_offset), "puts positions outside +-(2^31 - 2)");
    const std::string with_offset = " (query_offset = " + std::to_string(query_offset) + ")";
    require(rp_first() > -kMax, "queries", std::to_string(queries) + with_offset, "puts relative positions below -(2^31 - 2)");
    require(rp_last < kMax, "keys", std::to_string(keys) + with_offset, "puts relative positions above 2^31 - 2");
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

}  // namespace relpos::detail

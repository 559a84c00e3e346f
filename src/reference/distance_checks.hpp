#pragma once
// The shape checks of every bias that depends on rp = j - (i + query_offset) only and is expanded
// by detail::expand_distance(): relative positions, the per-distance rows and the output rows must
// fit the 32-bit indices the shaders use.
#include <cstdint>
#include <limits>
#include <string>

#include "reference/checks.hpp"

namespace relpos::detail {

inline void require_distance_shape(std::uint32_t queries, std::uint32_t keys, std::int64_t query_offset, std::uint32_t heads,
                                   std::uint32_t batch) {
  require(queries >= 1, "queries", std::to_string(queries), "must be >= 1");
  require(keys >= 1, "keys", std::to_string(keys), "must be >= 1");
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::int64_t rp_min = -(static_cast<std::int64_t>(queries) - 1) - query_offset;
  const std::int64_t rp_max = static_cast<std::int64_t>(keys) - 1 - query_offset;
  require(query_offset > -kMax && query_offset < kMax && rp_min > -kMax && rp_max < kMax, "query_offset",
          std::to_string(query_offset), "puts relative positions outside +-(2^31 - 1)");
  const std::uint64_t row_len = static_cast<std::uint64_t>(queries) + keys - 1;
  require(row_len * heads <= 0xffffffffull, "heads * (queries + keys - 1)", std::to_string(row_len * heads), "must be < 2^32");
  const std::uint64_t rows = static_cast<std::uint64_t>(batch) * heads * queries;
  require(rows <= 0xffffffffull, "batch * heads * queries", std::to_string(rows), "must be < 2^32");
  checked_elements({batch, heads, queries, keys}, "batch * heads * queries * keys");
}

}  // namespace relpos::detail

// T5Params: the checks of a configuration and its window of distances.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "params/checks.hpp"
#include "relpos/t5.hpp"

namespace relpos {

void T5Params::validate() const {
  using detail::require;
  require(num_buckets >= (bidirectional ? 4u : 2u), "num_buckets", std::to_string(num_buckets),
          bidirectional ? "must be >= 4 for bidirectional buckets (max_exact = num_buckets / 4 must be >= 1)"
                        : "must be >= 2 for causal buckets (max_exact = num_buckets / 2 must be >= 1)");
  // Buckets are int32 (the output of t5_buckets, the rows of the table).
  require(num_buckets <= (std::uint32_t{1} << 31), "num_buckets", std::to_string(num_buckets), "must be <= 2^31 (buckets are int32)");
  require(max_distance > max_exact(), "max_distance", std::to_string(max_distance),
          "must be > max_exact = " + std::to_string(max_exact()));
  require(queries >= 1, "queries", std::to_string(queries), "must be >= 1");
  require(keys >= 1, "keys", std::to_string(keys), "must be >= 1");
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
  require(std::isfinite(scale), "scale", detail::number_text(scale), "must be finite");
  detail::require_one_of(log, {T5Log::HuggingFace, T5Log::FlaxEps}, "log", "must be HuggingFace or FlaxEps");
  // Relative positions, the per-distance row and flat row indices are 32-bit on the GPU.
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  std::int64_t rp_min = -(static_cast<std::int64_t>(queries) - 1) - query_offset;
  std::int64_t rp_max = static_cast<std::int64_t>(keys) - 1 - query_offset;
  require(query_offset > -kMax && query_offset < kMax && rp_min > -kMax && rp_max < kMax, "query_offset",
          std::to_string(query_offset), "puts relative positions outside +-(2^31 - 2)");
  std::uint64_t row_len = static_cast<std::uint64_t>(queries) + keys - 1;
  require(row_len * heads <= 0xffffffffull, "heads * (queries + keys - 1)", std::to_string(row_len * heads),
          "must be < 2^32");
  std::uint64_t rows = static_cast<std::uint64_t>(batch) * heads * queries;
  require(rows <= 0xffffffffull, "batch * heads * queries", std::to_string(rows), "must be < 2^32");
  detail::checked_elements({batch, heads, queries, keys}, "batch * heads * queries * keys");
}

T5Params::Distances T5Params::distances() const {
  const std::int64_t rp_first = -(static_cast<std::int64_t>(queries) - 1) - query_offset;
  const std::int64_t rp_last = static_cast<std::int64_t>(keys) - 1 - query_offset;
  if (!bidirectional) return {static_cast<std::uint64_t>(std::max<std::int64_t>(-rp_last, 0)), static_cast<std::uint64_t>(std::max<std::int64_t>(-rp_first, 0))};
  if (rp_first <= 0 && rp_last >= 0) return {0, static_cast<std::uint64_t>(std::max(-rp_first, rp_last))};
  const std::uint64_t a = static_cast<std::uint64_t>(std::llabs(rp_first)), b = static_cast<std::uint64_t>(std::llabs(rp_last));
  return {std::min(a, b), std::max(a, b)};
}
}  // namespace relpos

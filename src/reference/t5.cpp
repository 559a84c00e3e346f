// CPU reference for T5 bucketing and bias, straight from SPEC.md §1-2.
#include <cmath>
#include <limits>
#include <string>

#include "reference/checks.hpp"
#include "relpos/error.hpp"
#include "relpos/t5.hpp"

namespace relpos {

void T5Params::validate() const {
  using detail::require;
  require(num_buckets >= (bidirectional ? 4u : 2u), "num_buckets", std::to_string(num_buckets),
          bidirectional ? "must be >= 4 for bidirectional buckets (max_exact = num_buckets / 4 must be >= 1)"
                        : "must be >= 2 for causal buckets (max_exact = num_buckets / 2 must be >= 1)");
  require(max_distance > max_exact(), "max_distance", std::to_string(max_distance),
          "must be > max_exact = " + std::to_string(max_exact()));
  require(queries >= 1, "queries", std::to_string(queries), "must be >= 1");
  require(keys >= 1, "keys", std::to_string(keys), "must be >= 1");
  require(heads >= 1, "heads", std::to_string(heads), "must be >= 1");
  require(batch >= 1, "batch", std::to_string(batch), "must be >= 1");
  require(std::isfinite(scale), "scale", std::to_string(scale), "must be finite");
  // Relative positions, the per-distance row and flat row indices are 32-bit on the GPU.
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  std::int64_t rp_min = -(static_cast<std::int64_t>(queries) - 1) - query_offset;
  std::int64_t rp_max = static_cast<std::int64_t>(keys) - 1 - query_offset;
  require(query_offset > -kMax && query_offset < kMax && rp_min > -kMax && rp_max < kMax, "query_offset",
          std::to_string(query_offset), "puts relative positions outside +-(2^31 - 1)");
  std::uint64_t row_len = static_cast<std::uint64_t>(queries) + keys - 1;
  require(row_len * heads <= 0xffffffffull, "heads * (queries + keys - 1)", std::to_string(row_len * heads),
          "must be < 2^32");
  std::uint64_t rows = static_cast<std::uint64_t>(batch) * heads * queries;
  require(rows <= 0xffffffffull, "batch * heads * queries", std::to_string(rows), "must be < 2^32");
  detail::checked_elements({batch, heads, queries, keys}, "batch * heads * queries * keys");
}

std::int32_t t5_bucket(std::int64_t rp, const T5Params& p) {
  std::int64_t nb = p.num_buckets;
  std::int64_t ret = 0;
  std::int64_t n;
  if (p.bidirectional) {
    nb /= 2;
    if (rp > 0) ret = nb;
    n = rp < 0 ? -rp : rp;
  } else {
    n = rp < 0 ? -rp : 0;
  }
  const std::int64_t me = nb / 2;
  if (n < me) return static_cast<std::int32_t>(ret + n);
  // PyTorch CPU, float32: log of the float32 quotient (correctly rounded: the double log rounded
  // to float32), divided by log(max_distance / me) rounded to float32, times (nb - me), truncated.
  float quotient = static_cast<float>(n) / static_cast<float>(me);
  if (p.log == T5Log::FlaxEps) quotient = quotient + std::numeric_limits<float>::epsilon();
  const float log_q = static_cast<float>(std::log(static_cast<double>(quotient)));
  const float log_ratio = static_cast<float>(std::log(static_cast<double>(p.max_distance) / static_cast<double>(me)));
  const float scaled = log_q / log_ratio * static_cast<float>(nb - me);
  const std::int64_t large = me + static_cast<std::int64_t>(scaled);  // truncation toward zero
  return static_cast<std::int32_t>(ret + std::min(large, nb - 1));
}

std::vector<std::uint32_t> t5_bucket_thresholds(const T5Params& p) {
  T5Params one_sided = p;
  one_sided.bidirectional = false;  // n >= 0 maps the same way on both sides; work on the causal half
  one_sided.num_buckets = p.bidirectional ? p.num_buckets / 2 : p.num_buckets;
  const std::uint32_t me = one_sided.max_exact();
  const std::uint32_t levels = one_sided.num_buckets - 1 - me;  // bucket - me ranges over [0, levels]
  auto level = [&](std::int64_t n) { return static_cast<std::uint32_t>(t5_bucket(-n, one_sided)) - me; };
  std::vector<std::uint32_t> thresholds;
  thresholds.reserve(levels);
  // The level is non-decreasing in n (every step of the float arithmetic is monotone), so the
  // smallest n of each level is found by bisection. It saturates by n = max_distance; the upper
  // bound of the search is generous anyway.
  const std::int64_t hi_bound = std::numeric_limits<std::int32_t>::max();
  for (std::uint32_t k = 1; k <= levels; ++k) {
    std::int64_t lo = me, hi = hi_bound;
    if (level(hi) < k) {
      hi = hi_bound + 1;  // never reached: no threshold
    }
    while (lo < hi) {
      std::int64_t mid = lo + (hi - lo) / 2;
      if (level(mid) >= k) hi = mid; else lo = mid + 1;
    }
    thresholds.push_back(static_cast<std::uint32_t>(std::min<std::int64_t>(lo, 0xffffffffll)));
  }
  return thresholds;
}

std::vector<std::int32_t> t5_buckets_reference(const T5Params& p) {
  p.validate();
  std::vector<std::int32_t> out(static_cast<std::size_t>(p.queries) * p.keys);
  for (std::uint32_t i = 0; i < p.queries; ++i)
    for (std::uint32_t j = 0; j < p.keys; ++j)
      out[static_cast<std::size_t>(i) * p.keys + j] = t5_bucket(static_cast<std::int64_t>(j) - i - p.query_offset, p);
  return out;
}

namespace {
void check_table(const T5Params& p, std::size_t size) {
  detail::require(size == static_cast<std::size_t>(p.num_buckets) * p.heads, "table", std::to_string(size) + " values",
                  "must hold num_buckets * heads = " + std::to_string(static_cast<std::size_t>(p.num_buckets) * p.heads));
}
}  // namespace

std::vector<float> t5_bias_reference(const T5Params& p, std::span<const float> table) {
  p.validate();
  check_table(p, table.size());
  const std::size_t qk = static_cast<std::size_t>(p.queries) * p.keys;
  std::vector<float> out(qk * p.heads);
  for (std::uint32_t i = 0; i < p.queries; ++i)
    for (std::uint32_t j = 0; j < p.keys; ++j) {
      const std::int32_t b = t5_bucket(static_cast<std::int64_t>(j) - i - p.query_offset, p);
      for (std::uint32_t h = 0; h < p.heads; ++h)
        out[h * qk + static_cast<std::size_t>(i) * p.keys + j] = p.scale * table[static_cast<std::size_t>(b) * p.heads + h];
    }
  return out;
}

void t5_bias_add_reference(const T5Params& p, std::span<const float> table, std::span<float> logits) {
  const std::vector<float> bias = t5_bias_reference(p, table);
  detail::require(logits.size() == bias.size() * p.batch, "logits", std::to_string(logits.size()) + " values",
                  "must hold batch * heads * queries * keys = " + std::to_string(bias.size() * p.batch));
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t e = 0; e < bias.size(); ++e) logits[b * bias.size() + e] += bias[e];
}

}  // namespace relpos

// CPU reference for T5 bucketing and bias, straight from docs/t5.md, "Semantics".
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "reference/checks.hpp"
#include "reference/distance_bias.hpp"
#include "relpos/error.hpp"
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

T5Params::Distances T5Params::distances() const {
  const std::int64_t rp_first = -(static_cast<std::int64_t>(queries) - 1) - query_offset;
  const std::int64_t rp_last = static_cast<std::int64_t>(keys) - 1 - query_offset;
  if (!bidirectional) return {static_cast<std::uint64_t>(std::max<std::int64_t>(-rp_last, 0)), static_cast<std::uint64_t>(std::max<std::int64_t>(-rp_first, 0))};
  if (rp_first <= 0 && rp_last >= 0) return {0, static_cast<std::uint64_t>(std::max(-rp_first, rp_last))};
  const std::uint64_t a = static_cast<std::uint64_t>(std::llabs(rp_first)), b = static_cast<std::uint64_t>(std::llabs(rp_last));
  return {std::min(a, b), std::max(a, b)};
}

namespace {

// The causal half of p's buckets: n >= 0 maps the same way on both sides of a bidirectional
// configuration. level(n) = bucket(n) - max_exact for n >= max_exact.
struct OneSided {
  T5Params p;
  explicit OneSided(const T5Params& full) : p(full) {
    p.bidirectional = false;
    p.num_buckets = full.bidirectional ? full.num_buckets / 2 : full.num_buckets;
  }
  std::int64_t max_exact() const { return p.max_exact(); }
  std::uint32_t level(std::int64_t n) const { return static_cast<std::uint32_t>(t5_bucket(-n, p) - max_exact()); }
};

// The smallest n in (lo, hi] of each level in (level(lo), level(hi)], ascending. The level is
// non-decreasing in n (every step of the float arithmetic is monotone), so each is found by
// bisection; there are at most hi - lo of them, whatever the bucket count.
std::vector<std::uint32_t> level_starts(const OneSided& s, std::int64_t lo, std::int64_t hi) {
  const std::uint32_t first = s.level(lo), last = s.level(hi);
  std::vector<std::uint32_t> starts;
  starts.reserve(last - first);
  for (std::uint32_t k = first + 1; k <= last; ++k) {
    std::int64_t a = starts.empty() ? lo + 1 : starts.back(), b = hi;
    while (a < b) {
      const std::int64_t mid = a + (b - a) / 2;
      if (s.level(mid) >= k) b = mid; else a = mid + 1;
    }
    starts.push_back(static_cast<std::uint32_t>(a));
  }
  return starts;
}

}  // namespace

std::vector<std::uint32_t> t5_bucket_thresholds(const T5Params& p) {
  const OneSided s(p);
  const std::int64_t me = s.max_exact(), hi = std::numeric_limits<std::int32_t>::max();
  // The levels max_exact itself reaches (with the flax eps, possibly more than 0) start there; a
  // level no n below 2^31 reaches gets the threshold 2^31.
  std::vector<std::uint32_t> thresholds(s.level(me), static_cast<std::uint32_t>(me));
  const std::vector<std::uint32_t> later = level_starts(s, me, hi);
  thresholds.insert(thresholds.end(), later.begin(), later.end());
  const std::uint32_t levels = s.p.num_buckets - 1 - static_cast<std::uint32_t>(me);
  thresholds.resize(levels, static_cast<std::uint32_t>(hi) + 1);
  return thresholds;
}

T5WindowThresholds t5_window_thresholds(const T5Params& p) {
  const OneSided s(p);
  const std::int64_t me = s.max_exact();
  const T5Params::Distances d = p.distances();
  T5WindowThresholds w;
  if (static_cast<std::int64_t>(d.last) < me) return w;  // every distance of the window is exact
  const std::int64_t lo = std::max(static_cast<std::int64_t>(d.first), me), hi = static_cast<std::int64_t>(d.last);
  w.base = s.level(lo);
  w.thresholds = level_starts(s, lo, hi);
  return w;
}

// bucket(n) = max_exact + #{t in levels : t <= n} for n >= max_exact, so the window's base is
// that count at its first distance and its thresholds are the levels' in (first, last].
T5WindowThresholds t5_window_thresholds(const T5Params& p, std::span<const std::uint32_t> levels) {
  T5WindowThresholds w;
  const std::uint64_t me = static_cast<std::uint64_t>(OneSided(p).max_exact());
  const T5Params::Distances d = p.distances();
  if (d.last < me) return w;
  const std::uint64_t lo = std::max<std::uint64_t>(d.first, me);
  const auto above = [](std::uint64_t n, std::uint32_t t) { return n < t; };
  const auto first = std::upper_bound(levels.begin(), levels.end(), lo, above);
  const auto last = std::upper_bound(first, levels.end(), d.last, above);
  w.base = static_cast<std::uint32_t>(first - levels.begin());
  w.thresholds.assign(first, last);
  return w;
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
// A T5 bias has no mask of its own (a decoder's buckets are one-sided instead).
detail::DistanceWindow t5_window(const T5Params& p) { return {p.heads, p.queries, p.keys, p.query_offset, p.batch, false}; }
void check_table(const T5Params& p, std::size_t size) {
  detail::require(size == static_cast<std::size_t>(p.num_buckets) * p.heads, "table", std::to_string(size) + " values",
                  "must hold num_buckets * heads = " + std::to_string(static_cast<std::size_t>(p.num_buckets) * p.heads));
}
}  // namespace

std::vector<float> t5_bias_reference(const T5Params& p, std::span<const float> table) {
  p.validate();
  check_table(p, table.size());
  return detail::distance_bias_reference(t5_window(p), [&](std::uint32_t h, std::int64_t rp) {
    return p.scale * table[static_cast<std::size_t>(t5_bucket(rp, p)) * p.heads + h];
  });
}

void t5_bias_add_reference(const T5Params& p, std::span<const float> table, std::span<float> logits) {
  detail::distance_bias_add_reference(t5_window(p), t5_bias_reference(p, table), logits);
}

}  // namespace relpos

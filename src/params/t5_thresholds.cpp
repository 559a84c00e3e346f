// The T5 bucket thresholds: the distances where each logarithmic bucket level starts, found on the
// host from t5_bucket itself (docs/t5.md), so that the GPU decides buckets by integer comparisons.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "relpos/t5.hpp"

namespace relpos {

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

}  // namespace relpos

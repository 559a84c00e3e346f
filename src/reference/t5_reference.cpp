// CPU reference for T5 bucketing and bias, straight from docs/t5.md, "Semantics".
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "params/checks.hpp"
#include "reference/distance_bias_reference.hpp"
#include "relpos/error.hpp"
#include "relpos/t5.hpp"

namespace relpos {

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

// AttentionParams and AttentionMergeParams: the checks, the bias input's size and the layout of
// the per-distance rows; the host check of a paged cache's block table.
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "bias/bias_family.hpp"
#include "params/checks.hpp"
#include "params/paged_table.hpp"
#include "relpos/attention.hpp"

namespace relpos {
namespace {

using detail::require;

std::string str(std::uint64_t v) { return std::to_string(v); }

void require_head_dim(std::uint32_t d) {
  require(d >= 4 && d <= AttentionParams::kMaxHeadDim && d % 4 == 0, "head_dim", str(d),
          "must be a multiple of 4 in [4, " + str(AttentionParams::kMaxHeadDim) + "] (the kernel keeps a row in registers)");
}

}  // namespace

float AttentionParams::effective_scale() const {
  return scale ? *scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

std::uint64_t AttentionParams::rows() const {
  return packed() ? detail::saturated_product({total_queries, heads}) : detail::saturated_product({batch, heads, queries});
}

std::uint64_t AttentionParams::kv_bytes() const {
  return paged.enabled() ? detail::saturated_product({paged.num_blocks, paged.block_size, kv_heads, cache_row_bytes(cache(), head_dim)})
                         : detail::saturated_product({batch, kv_heads, keys, cache_row_bytes(cache(), head_dim)});
}

std::vector<std::uint64_t> AttentionParams::bias_shape() const {
  const auto shape = detail::bias_family(bias).input_shape;
  return shape ? shape(*this) : std::vector<std::uint64_t>{};
}

std::uint64_t AttentionParams::bias_elements() const {
  const std::vector<std::uint64_t> shape = bias_shape();
  std::uint64_t n = shape.empty() ? 0 : 1;
  for (std::uint64_t d : shape) n = detail::saturated_product({n, d});
  return n;
}

T5Params AttentionParams::t5_row_params() const {
  T5Params r = t5;
  r.queries = queries;
  r.keys = keys;
  r.heads = heads;
  r.batch = 1;
  r.query_offset = row_query_offset();
  return r;
}

void check_block_table(const AttentionParams& p, std::span<const std::int32_t> block_table, std::span<const std::int32_t> cache_lengths) {
  p.validate();
  require(p.paged.enabled(), "paged.block_size", "0", "must be set for a block table");
  detail::check_paged_table(p.paged, p.batch, block_table, cache_lengths);
}

void check_query_lengths(const AttentionParams& p, std::span<const std::int32_t> query_lengths, std::span<const std::int32_t> cache_lengths) {
  p.validate();
  require(p.packed(), "total_queries", "0", "must be set for query lengths (packed queries)");
  require(query_lengths.size() == p.batch, "query_lengths", str(query_lengths.size()) + " values", "must hold batch = " + str(p.batch));
  require(cache_lengths.size() == p.batch, "cache_lengths", str(cache_lengths.size()) + " values", "must hold batch = " + str(p.batch));
  std::uint64_t sum = 0;
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    const std::int64_t n = query_lengths[b], limit = std::min<std::int64_t>(p.queries, cache_lengths[b]);
    require(n >= 0 && n <= limit, "query_lengths[" + str(b) + "]", std::to_string(n),
            "must be in [0, min(queries = " + str(p.queries) + ", cache_lengths[" + str(b) + "] = " + std::to_string(cache_lengths[b]) +
                ")] (a sequence's queries are the last positions of its cache)");
    sum += static_cast<std::uint64_t>(n);
  }
  require(sum == p.total_queries, "query_lengths", "sum " + str(sum), "must sum to total_queries = " + str(p.total_queries));
}

void AttentionParams::validate() const {
  require(batch >= 1, "batch", str(batch), "must be >= 1");
  require(heads >= 1, "heads", str(heads), "must be >= 1");
  require(kv_heads >= 1 && heads % kv_heads == 0, "kv_heads", str(kv_heads),
          "must divide heads = " + str(heads) + " (grouped-query attention)");
  require(queries >= 1, "queries", str(queries), "must be >= 1");
  require(keys >= 1, "keys", str(keys), "must be >= 1");
  require_head_dim(head_dim);
  detail::require_float_dtype(dtype, "dtype");
  detail::require_float_dtype(output_dtype(), "out_dtype");
  require(std::isfinite(effective_scale()), "scale", detail::number_text(effective_scale()), "must be finite");
  check_cache_head_dim(cache(), head_dim, "head_dim");
  check_cache_scales(cache(), k_scales, kv_heads, "k_scales");
  check_cache_scales(cache(), v_scales, kv_heads, "v_scales");
  require(memory_prefix <= keys, "memory_prefix", str(memory_prefix), "must be <= keys = " + str(keys));
  if (paged.enabled()) {
    require(paged.block_size % 16 == 0, "paged.block_size", str(paged.block_size), "must be a multiple of 16");
    require(paged.num_blocks >= 1, "paged.num_blocks", str(paged.num_blocks), "must be >= 1");
    require(paged.max_blocks >= 1, "paged.max_blocks", str(paged.max_blocks), "must be >= 1");
    require(std::uint64_t{paged.max_blocks} * paged.block_size == keys, "keys", str(keys),
            "must be max_blocks * block_size = " + str(std::uint64_t{paged.max_blocks} * paged.block_size) + " with a paged cache");
    require(memory_prefix == 0, "memory_prefix", str(memory_prefix), "must be 0 with a paged cache");
    require(std::uint64_t{batch} * paged.max_blocks <= 0xffffffffull, "batch * max_blocks", str(std::uint64_t{batch} * paged.max_blocks),
            "must be < 2^32");
  }
  if (packed()) {
    require(paged.enabled(), "total_queries", str(total_queries), "needs a paged cache (paged.block_size): packed queries are paged attention's");
    require(total_queries <= std::uint64_t{batch} * queries, "total_queries", str(total_queries),
            "must be <= batch * queries = " + str(std::uint64_t{batch} * queries) + " (queries: the most any sequence has)");
    require(total_queries <= 0x7fffffffu, "total_queries", str(total_queries), "must be < 2^31 (int32 prefix sums)");
    // Each workgroup sums the earlier sequences' lengths: a loop over the batch.
    require(batch <= kMaxPackedBatch, "batch", str(batch), "must be <= " + str(kMaxPackedBatch) + " with packed queries");
  }
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::int64_t off = row_query_offset();
  const std::int64_t first = -(static_cast<std::int64_t>(queries) - 1) - off;
  const std::int64_t last = static_cast<std::int64_t>(keys) - 1 - off;
  // Named by what reaches past the range: the offset itself, the first query's distance to key 0,
  // or the last key's distance to query 0.
  require(off > -kMax && off < kMax, "query_offset", std::to_string(off), "puts positions outside +-(2^31 - 2)");
  require(first > -kMax, "queries", str(queries) + " (query_offset = " + std::to_string(off) + ")",
          "puts relative positions below -(2^31 - 2)");
  require(last < kMax, "keys", str(keys) + " (query_offset = " + std::to_string(off) + ")", "puts relative positions above 2^31 - 2");
  // The GPU indexes 4-element words and bias values with 32-bit integers.
  constexpr std::uint64_t k32 = 0xffffffffull;
  using detail::saturated_product;
  // Products of up to four 32-bit fields (saturated), indexed in 4-element words.
  using detail::words_text;
  const std::uint64_t q_elements = saturated_product({rows(), head_dim});
  require(q_elements / 4 <= k32, packed() ? "total_queries * heads * head_dim / 4" : "batch * heads * queries * head_dim / 4",
          words_text(q_elements), "must be < 2^32");
  require(kv_bytes() / 4 <= k32, "k and v bytes / 4", words_text(kv_bytes()), "must be < 2^32 (the kernels index them in 32-bit words)");
  if (paged.enabled()) {
    const std::uint64_t n = saturated_product({paged.num_blocks, paged.block_size, kv_heads, head_dim});
    require(n / 4 <= k32, "num_blocks * block_size * kv_heads * head_dim / 4", words_text(n), "must be < 2^32");
  } else {
    const std::uint64_t n = saturated_product({batch, kv_heads, keys, head_dim});
    require(n / 4 <= k32, "batch * kv_heads * keys * head_dim / 4", words_text(n), "must be < 2^32");
  }
  if (const auto family_checks = detail::bias_family(bias).validate) family_checks(*this);
  require(bias_elements() <= k32, "bias elements", detail::product_text(bias_elements()), "must be < 2^32");
  require(key_splits <= keys, "key_splits", str(key_splits), "must be <= keys = " + str(keys));
  require(key_splits <= AttentionMergeParams::kMaxParts, "key_splits", str(key_splits),
          "must be <= " + str(AttentionMergeParams::kMaxParts) + " (the splits' merge)");
  if (key_splits != 0) {
    const std::uint64_t min_splits = (std::uint64_t{keys} + kMaxKeysPerSplit - 1) / kMaxKeysPerSplit;
    require(key_splits >= min_splits, "key_splits", str(key_splits),
            "must be >= " + str(min_splits) + " for keys = " + str(keys) + " (at most " + str(kMaxKeysPerSplit) + " keys per split)");
  }
}

void AttentionMergeParams::validate() const {
  require(parts >= 1, "parts", str(parts), "must be >= 1");
  require(rows >= 1, "rows", str(rows), "must be >= 1");
  require_head_dim(head_dim);
  detail::require_float_dtype(dtype, "dtype");
  const std::uint64_t elements = detail::saturated_product({parts, rows, head_dim});
  require(elements / 4 <= 0xffffffffull, "parts * rows * head_dim / 4", detail::words_text(elements), "must be < 2^32");
}

}  // namespace relpos

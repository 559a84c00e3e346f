// The inputs of fused attention's check and bench cases: random values, paged caches and
// encoded cache formats.
#include "attention_data.hpp"

#include <algorithm>
#include <random>

namespace relpos::tool {

AttentionData random_data(const AttentionBiasTool& family, const AttentionParams& p, unsigned seed) {
  std::mt19937 rng(seed);
  auto fill = [&](std::size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> x(n);
    for (auto& e : x) e = u(rng);
    return rounded_to_storage(x, p.dtype);
  };
  AttentionData d;
  d.p = p;
  const std::size_t D = p.head_dim;
  d.q = fill(p.rows() * D, -2.0f, 2.0f);
  if (!p.paged.enabled()) {  // make_paged fills a paged cache
    d.k = fill(std::size_t{p.batch} * p.kv_heads * p.keys * D, -2.0f, 2.0f);
    d.v = fill(d.k.size(), -2.0f, 2.0f);
  }
  d.in = family.random_input(p, fill);
  return d;
}

void make_paged(AttentionData& d, const std::vector<std::uint32_t>& lengths, unsigned seed) {
  AttentionParams& p = d.p;
  const std::uint32_t bs = p.paged.block_size;
  std::uint32_t used = 0;
  for (std::uint32_t L : lengths) used += (L + bs - 1) / bs;
  p.paged.num_blocks = used + 2;
  std::mt19937 rng(seed);
  std::vector<std::int32_t> order(p.paged.num_blocks);
  for (std::size_t n = 0; n < order.size(); ++n) order[n] = static_cast<std::int32_t>(n);
  std::shuffle(order.begin(), order.end(), rng);
  d.block_table.assign(std::size_t{p.batch} * p.paged.max_blocks, -1);
  std::size_t next = 0;
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    d.cache_lengths.push_back(static_cast<std::int32_t>(lengths[b]));
    for (std::uint32_t n = 0; n * bs < lengths[b]; ++n) d.block_table[std::size_t{b} * p.paged.max_blocks + n] = order[next++];
  }
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  d.k.resize(p.paged.cache_elements(p.kv_heads, p.head_dim));
  d.v.resize(d.k.size());
  for (auto* x : {&d.k, &d.v}) {
    for (float& e : *x) e = u(rng);
    *x = rounded_to_storage(*x, p.dtype);
  }
}

void encode_caches(AttentionData& d) {
  const AttentionParams& p = d.p;
  const CacheFormat f = p.cache();
  const std::size_t D = p.head_dim, row_bytes = cache_row_bytes(f, p.head_dim), rows = d.k.size() / D;
  d.k_bytes.resize(rows * row_bytes);
  d.v_bytes.resize(rows * row_bytes);
  for (std::size_t row = 0; row < rows; ++row) {
    const std::uint32_t hk = p.cache_row_kv_head(row);
    const bool scaled = cache_format_scaled(f);
    encode_cache_row(f, std::span<const float>(d.k).subspan(row * D, D), std::span<std::uint8_t>(d.k_bytes).subspan(row * row_bytes, row_bytes),
                     scaled ? p.k_scales[hk] : 1.0f);
    encode_cache_row(f, std::span<const float>(d.v).subspan(row * D, D), std::span<std::uint8_t>(d.v_bytes).subspan(row * row_bytes, row_bytes),
                     scaled ? p.v_scales[hk] : 1.0f);
  }
  d.k.clear();
  d.v.clear();
}

}  // namespace relpos::tool

// CPU reference of kv_append: rope_reference on copies of the new keys (and the queries) at the
// positions cache_lengths[b] + t, then each row copied into its block of the cache.
#include <algorithm>
#include <string>
#include <vector>

#include "params/checks.hpp"
#include "params/paged_table.hpp"
#include "relpos/kv_cache.hpp"

namespace relpos {
namespace {

using detail::require;

std::string str(std::uint64_t v) { return std::to_string(v); }

void require_size(std::size_t got, std::uint64_t want, const std::string& name) {
  require(got == want, name, str(got) + " values", "must hold " + str(want));
}

}  // namespace

void kv_append_reference(const KvAppendParams& p, const KvAppendHostData& d) {
  p.validate();
  const std::uint64_t D = p.head_dim, T = p.new_tokens, cache = p.paged.cache_elements(p.kv_heads, p.head_dim);
  require_size(d.k_cache.size(), cache, "k_cache");
  require_size(d.v_cache.size(), cache, "v_cache");
  require_size(d.k.size(), std::uint64_t{p.batch} * p.kv_heads * T * D, "k");
  require_size(d.v.size(), std::uint64_t{p.batch} * p.kv_heads * T * D, "v");
  require(d.q.empty() || d.q.size() == std::uint64_t{p.batch} * p.heads * T * D, "q", str(d.q.size()) + " values",
          "must be empty or hold batch * heads * new_tokens * head_dim = " + str(std::uint64_t{p.batch} * p.heads * T * D));
  check_append_table(p, d.block_table, d.cache_lengths);
  std::vector<float> k(d.k.begin(), d.k.end());
  if (p.apply_rope) {
    std::vector<std::int32_t> positions;
    for (std::uint32_t b = 0; b < p.batch; ++b)
      for (std::uint32_t t = 0; t < T; ++t) positions.push_back(d.cache_lengths[b] + static_cast<std::int32_t>(t));
    rope_reference(p.rope_params(p.kv_heads), k, positions);
    if (!d.q.empty()) rope_reference(p.rope_params(p.heads), d.q, positions);
  }
  const std::uint32_t bs = p.paged.block_size;
  for (std::uint32_t b = 0; b < p.batch; ++b)
    for (std::uint32_t hk = 0; hk < p.kv_heads; ++hk)
      for (std::uint32_t t = 0; t < T; ++t) {
        const std::uint32_t j = static_cast<std::uint32_t>(d.cache_lengths[b]) + t;
        const std::size_t block = static_cast<std::size_t>(d.block_table[std::size_t{b} * p.paged.max_blocks + j / bs]);
        const std::size_t to = ((block * bs + j % bs) * p.kv_heads + hk) * D, from = ((std::size_t{b} * p.kv_heads + hk) * T + t) * D;
        std::copy_n(k.begin() + from, D, d.k_cache.begin() + to);
        std::copy_n(d.v.begin() + from, D, d.v_cache.begin() + to);
      }
}

}  // namespace relpos

// CPU reference of kv_append: rope_reference on copies of the new keys (and the queries) at the
// positions cache_lengths[b] + t, then each row copied into its block of the cache.
#include <algorithm>
#include <string>
#include <vector>

#include "reference/checks.hpp"
#include "reference/paged_table.hpp"
#include "relpos/kv_cache.hpp"

namespace relpos {
namespace {

using detail::require;

std::string str(std::uint64_t v) { return std::to_string(v); }

void require_size(std::size_t got, std::uint64_t want, const std::string& name) {
  require(got == want, name, str(got) + " values", "must hold " + str(want));
}

}  // namespace

RopeParams KvAppendParams::rope_params(std::uint32_t x_heads) const {
  RopeParams r = rope;
  r.batch = batch;
  r.seq = new_tokens;
  r.heads = x_heads;
  r.head_dim = head_dim;
  r.layout = RopeLayout::BHSD;
  r.position_offset = 0;
  r.inverse = false;
  return r;
}

void KvAppendParams::validate() const {
  require(batch >= 1, "batch", str(batch), "must be >= 1");
  require(kv_heads >= 1 && heads % kv_heads == 0, "heads", str(heads), "must be a multiple of kv_heads = " + str(kv_heads));
  require(new_tokens >= 1, "new_tokens", str(new_tokens), "must be >= 1");
  require(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= AttentionParams::kMaxHeadDim, "head_dim", str(head_dim),
          "must be even, in [2, " + str(AttentionParams::kMaxHeadDim) + "]");
  require(dtype == DType::F32 || dtype == DType::F16, "dtype", std::string(dtype_name(dtype)), "must be f32 or f16");
  require(paged.block_size >= 16 && paged.block_size % 16 == 0, "paged.block_size", str(paged.block_size), "must be a multiple of 16 (>= 16)");
  require(paged.num_blocks >= 1, "paged.num_blocks", str(paged.num_blocks), "must be >= 1");
  require(paged.max_blocks >= 1, "paged.max_blocks", str(paged.max_blocks), "must be >= 1");
  require(std::uint64_t{paged.max_blocks} * paged.block_size <= 0x7fffffffull, "max_blocks * block_size",
          str(std::uint64_t{paged.max_blocks} * paged.block_size), "must be < 2^31");
  require(new_tokens <= capacity(), "new_tokens", str(new_tokens), "must be <= max_blocks * block_size = " + str(capacity()));
  require(paged.cache_elements(kv_heads, head_dim) <= 0xffffffffull, "num_blocks * block_size * kv_heads * head_dim",
          str(paged.cache_elements(kv_heads, head_dim)), "must be < 2^32");
  require(std::uint64_t{batch} * heads * new_tokens * head_dim <= 0xffffffffull, "batch * heads * new_tokens * head_dim",
          str(std::uint64_t{batch} * heads * new_tokens * head_dim), "must be < 2^32");
  require(std::uint64_t{batch} * paged.max_blocks <= 0xffffffffull, "batch * max_blocks", str(std::uint64_t{batch} * paged.max_blocks),
          "must be < 2^32");
  if (apply_rope) rope_params(heads).validate();
}

void check_append_table(const KvAppendParams& p, std::span<const std::int32_t> block_table, std::span<const std::int32_t> cache_lengths) {
  detail::check_paged_table(p.paged, p.batch, block_table, cache_lengths, p.new_tokens);
}

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

// KvAppendParams: the checks, RoPE's parameters of the appended rows and the block table's check.
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

std::uint64_t KvAppendParams::cache_bytes() const {
  return detail::saturated_product({paged.num_blocks, paged.block_size, kv_heads, cache_row_bytes(cache(), head_dim)});
}

std::uint64_t KvAppendParams::input_rows() const { return ragged ? std::uint64_t{packed_tokens} : std::uint64_t{batch} * new_tokens; }

void KvAppendParams::validate() const {
  require(batch >= 1, "batch", str(batch), "must be >= 1");
  require(kv_heads >= 1 && heads % kv_heads == 0, "heads", str(heads), "must be a multiple of kv_heads = " + str(kv_heads));
  require(new_tokens >= 1, "new_tokens", str(new_tokens), ragged ? "must be >= 1 (ragged: the most any sequence gains)" : "must be >= 1");
  require(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= AttentionParams::kMaxHeadDim, "head_dim", str(head_dim),
          "must be even, in [2, " + str(AttentionParams::kMaxHeadDim) + "]");
  detail::require_f32_or_f16(dtype, "dtype");
  require(paged.block_size >= 16 && paged.block_size % 16 == 0, "paged.block_size", str(paged.block_size), "must be a multiple of 16 (>= 16)");
  require(paged.num_blocks >= 1, "paged.num_blocks", str(paged.num_blocks), "must be >= 1");
  require(paged.max_blocks >= 1, "paged.max_blocks", str(paged.max_blocks), "must be >= 1");
  require(std::uint64_t{paged.max_blocks} * paged.block_size <= 0x7fffffffull, "max_blocks * block_size",
          str(std::uint64_t{paged.max_blocks} * paged.block_size), "must be < 2^31");
  require(new_tokens <= capacity(), "new_tokens", str(new_tokens), "must be <= max_blocks * block_size = " + str(capacity()));
  check_cache_head_dim(cache(), head_dim);
  check_cache_scales(cache(), k_scales, kv_heads, "k_scales");
  check_cache_scales(cache(), v_scales, kv_heads, "v_scales");
  require(cache_bytes() <= 0xffffffffull, "k_cache bytes (num_blocks * block_size * kv_heads * row bytes)", detail::product_text(cache_bytes()),
          "must be < 2^32");
  const std::uint64_t cache_elements = detail::saturated_product({paged.num_blocks, paged.block_size, kv_heads, head_dim});
  require(cache_elements <= 0xffffffffull, "num_blocks * block_size * kv_heads * head_dim", detail::product_text(cache_elements), "must be < 2^32");
  require(!(advance_lengths && lengths_include_new), "lengths_include_new", "true",
          "is not taken with advance_lengths (lengths that already count the new keys are not advanced again)");
  // Each workgroup of a ragged append sums the counts of the sequences before its own, as a packed
  // attention call does: the same bound on the batch keeps that loop within an invocation's.
  if (ragged)
    require(batch <= AttentionParams::kMaxPackedBatch, "batch", str(batch),
            "must be <= " + str(AttentionParams::kMaxPackedBatch) + " with ragged new_tokens (AttentionParams::kMaxPackedBatch)");
  if (ragged)
    require(packed_tokens >= 1 && packed_tokens <= std::uint64_t{batch} * new_tokens, "packed_tokens", str(packed_tokens),
            "must be in [1, batch * new_tokens = " + str(std::uint64_t{batch} * new_tokens) + "] (the rows of the packed k and v)");
  const std::uint64_t input_elements = detail::saturated_product({batch, heads, new_tokens, head_dim});
  require(input_elements <= 0xffffffffull, "batch * heads * new_tokens * head_dim", detail::product_text(input_elements), "must be < 2^32");
  require(std::uint64_t{batch} * paged.max_blocks <= 0xffffffffull, "batch * max_blocks", str(std::uint64_t{batch} * paged.max_blocks),
          "must be < 2^32");
  if (apply_rope) rope_params(heads).validate();
}

void check_append_table(const KvAppendParams& p, std::span<const std::int32_t> block_table, std::span<const std::int32_t> cache_lengths,
                        std::span<const std::int32_t> new_tokens) {
  p.validate();  // the counts below are the params' (new_tokens past int32 wrapped)
  if (p.lengths_include_new) {  // the lengths before the append: checked as such
    require(cache_lengths.size() == p.batch, "cache_lengths", str(cache_lengths.size()) + " values", "must hold batch = " + str(p.batch));
    require(!p.ragged || new_tokens.size() == p.batch, "new_tokens", str(new_tokens.size()) + " values", "must hold batch = " + str(p.batch));
    std::vector<std::int32_t> before(cache_lengths.begin(), cache_lengths.end());
    for (std::uint32_t b = 0; b < p.batch; ++b) {
      const std::int64_t n = p.ragged ? std::clamp<std::int64_t>(new_tokens[b], 0, p.new_tokens) : p.new_tokens;
      require(before[b] >= n, "cache_lengths[" + str(b) + "]", std::to_string(before[b]),
              "must be >= the " + std::to_string(n) + " new keys it already counts (lengths_include_new)");
      before[b] -= static_cast<std::int32_t>(n);
    }
    KvAppendParams q = p;
    q.lengths_include_new = false;
    check_append_table(q, block_table, before, new_tokens);
    return;
  }
  if (!p.ragged) {
    require(new_tokens.empty(), "new_tokens", str(new_tokens.size()) + " values", "are only given with ragged");
    const std::vector<std::int32_t> appended(p.batch, static_cast<std::int32_t>(p.new_tokens));
    detail::check_paged_table(p.paged, p.batch, block_table, cache_lengths, appended);
    return;
  }
  require(new_tokens.size() == p.batch, "new_tokens", str(new_tokens.size()) + " values", "must hold batch = " + str(p.batch));
  std::uint64_t sum = 0;
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    require(new_tokens[b] >= 0 && static_cast<std::uint32_t>(new_tokens[b]) <= p.new_tokens, "new_tokens[" + str(b) + "]",
            std::to_string(new_tokens[b]), "must be in [0, new_tokens = " + str(p.new_tokens) + "] (the most a sequence gains)");
    sum += static_cast<std::uint64_t>(new_tokens[b]);
  }
  require(sum <= p.packed_tokens, "sum of new_tokens", str(sum), "must be <= packed_tokens = " + str(p.packed_tokens));
  detail::check_paged_table(p.paged, p.batch, block_table, cache_lengths, new_tokens);
}

}  // namespace relpos

// KvAppendParams: the checks, RoPE's parameters of the appended rows and the block table's check.
#include <string>

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

}  // namespace relpos

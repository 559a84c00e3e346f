// kv_append on the GPU: checks, the frequency table in a host buffer, then one dispatch of
// kv_append.comp over the key rows and the query rows (every buffer bound whole).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "ops/planner.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/kv_cache.hpp"
#include "relpos_push/kv_append.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

using detail::require;

constexpr std::uint32_t kGroup = 64;

// Every buffer is bound whole, at its exact size.
void require_bytes(const DeviceLimits& lim, const Buffer* b, std::uint64_t want, const char* name, const std::string& what) {
  detail::require_bound_whole(lim, b, want, false, name, [&] { return what; });
}

}  // namespace

void kv_append(Recorder& r, const KvAppendParams& p, const KvAppendBuffers& b) {
  p.validate();
  const DeviceLimits& lim = r.context().limits();
  const std::uint64_t es = dtype_size(p.dtype), D = p.head_dim, T = p.new_tokens;
  const std::string dt(dtype_name(p.dtype));
  const std::uint64_t cache = p.paged.cache_elements(p.kv_heads, p.head_dim) * es;
  require_bytes(lim, b.k_cache, cache, "k_cache buffer", dt + " [num_blocks, block_size, kv_heads, head_dim]");
  require_bytes(lim, b.v_cache, cache, "v_cache buffer", dt + " [num_blocks, block_size, kv_heads, head_dim]");
  const std::uint64_t kv = std::uint64_t{p.batch} * p.kv_heads * T * D * es;
  require_bytes(lim, b.k, kv, "k buffer", dt + " [batch, kv_heads, new_tokens, head_dim]");
  require_bytes(lim, b.v, kv, "v buffer", dt + " [batch, kv_heads, new_tokens, head_dim]");
  require_bytes(lim, b.block_table, std::uint64_t{p.batch} * p.paged.max_blocks * 4, "block_table buffer", "int32 [batch, max_blocks]");
  require_bytes(lim, b.cache_lengths, std::uint64_t{p.batch} * 4, "cache_lengths buffer", "int32 [batch]");
  if (b.q) {
    require(p.apply_rope, "q buffer", "given", "is only rotated with apply_rope");
    require_bytes(lim, b.q, std::uint64_t{p.batch} * p.heads * T * D * es, "q buffer", dt + " [batch, heads, new_tokens, head_dim]");
  }
  const RopeFrequencies fr = p.apply_rope ? rope_frequencies(p.rope_params(p.kv_heads), true) : RopeFrequencies{{0.0f}, 1.0f};

  push::KvAppendPush pc{};
  pc.kv_rows = static_cast<std::uint32_t>(std::uint64_t{p.batch} * p.kv_heads * T);
  pc.q_rows = b.q ? static_cast<std::uint32_t>(std::uint64_t{p.batch} * p.heads * T) : 0;
  pc.heads = p.heads;
  pc.kv_heads = p.kv_heads;
  pc.tokens = p.new_tokens;
  pc.head_dim = p.head_dim;
  pc.half_rot = p.apply_rope ? p.rope_params(p.kv_heads).rot_dim() / 2 : 0;
  pc.block_size = p.paged.block_size;
  pc.num_blocks = p.paged.num_blocks;
  pc.max_blocks = p.paged.max_blocks;
  pc.scale = fr.attention_factor;
  const std::vector<std::uint32_t> spec = {kGroup, p.dtype == DType::F16 ? 1u : 0u, p.apply_rope ? 1u : 0u,
                                           p.rope.style == RopeStyle::GptJ ? 1u : 0u};

  const auto op = detail::begin_op(r);
  Buffer& freq = detail::scratch(r, fr.inv_freq.size() * 4, MemoryUse::Host);
  if (freq.host_pointer()) std::memcpy(freq.host_pointer(), fr.inv_freq.data(), fr.inv_freq.size() * 4);
  // Bound, never touched, without queries: its own buffer, since the binding is writable.
  const Buffer& q = b.q ? *b.q : detail::scratch(r, 16, MemoryUse::Device);
  bool later = false;
  detail::for_each_group_range(lim, detail::div_up(std::uint64_t{pc.kv_rows} + pc.q_rows, kGroup), [&](std::uint64_t first, std::uint32_t groups) {
    // Dispatches past the device's group count write other rows of the same bindings: ordered, so
    // that no write hazard is left for a validator (or a driver) to guess about.
    if (std::exchange(later, true)) detail::barrier(r);
    pc.first_row = static_cast<std::uint32_t>(first * kGroup);
    detail::dispatch(r, detail::ShaderId::kv_append, spec,
                     {{b.k_cache}, {b.v_cache}, {b.k}, {b.v}, {b.block_table}, {b.cache_lengths}, {&q}, {&freq}}, pc, groups);
  });
}

}  // namespace relpos

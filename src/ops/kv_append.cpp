// kv_append on the GPU: the checks, the constants table (RoPE's frequencies, fp8's inverse
// scales), then one dispatch of kv_append.comp per chunk of rows (a row of workgroups per
// sequence) and, for advance_lengths, one more after a barrier. Every buffer is bound whole.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "ops/kv_append_record.hpp"
#include "ops/planner.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/kv_cache.hpp"
#include "vk/access.hpp"
#include "relpos_contract/kv_append.h"
#include "relpos_push/kv_append.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace detail {
namespace {

constexpr std::uint32_t kGroup = 64;

// Every buffer is bound whole, at its exact size.
void require_bytes(const DeviceLimits& lim, const Buffer* b, std::uint64_t want, const char* name, const std::string& what) {
  require_bound_whole(lim, b, want, false, name, [&] { return what; });
}

}  // namespace

KvAppendConstants kv_append_constants(const KvAppendParams& p) {
  KvAppendConstants c;
  const RopeFrequencies fr = p.apply_rope ? rope_frequencies(p.rope_params(p.kv_heads), true) : RopeFrequencies{{0.0f}, 1.0f};
  c.values = fr.inv_freq;
  c.attention_factor = fr.attention_factor;
  c.scales_at = static_cast<std::uint32_t>(c.values.size());
  for (float s : p.k_scales) c.values.push_back(1.0f / s);
  for (float s : p.v_scales) c.values.push_back(1.0f / s);
  return c;
}

void check_kv_append_buffers(Recorder& r, const KvAppendParams& p, const KvAppendBuffers& b) {
  const DeviceLimits& lim = r.context().limits();
  // q is rotated in place, and the lengths advanced in place where asked.
  require_own_buffers(r, {{b.k_cache, "k_cache buffer", true}, {b.v_cache, "v_cache buffer", true}, {b.k, "k buffer"}, {b.v, "v buffer"},
                         {b.block_table, "block_table buffer"}, {b.cache_lengths, "cache_lengths buffer", p.advance_lengths},
                         {b.q, "q buffer", true}, {b.new_tokens, "new_tokens buffer"}});
  const std::uint64_t es = dtype_size(p.dtype), D = p.head_dim, rows = p.input_rows();
  const std::string dt(dtype_name(p.dtype)), fmt(cache_format_name(p.cache()));
  if (p.ragged) require_bytes(lim, b.new_tokens, std::uint64_t{p.batch} * 4, "new_tokens buffer", "int32 [batch] (ragged)");
  else require(b.new_tokens == nullptr, "new_tokens buffer", "given", "is only read with ragged");
  require_bytes(lim, b.k_cache, p.cache_bytes(), "k_cache buffer", fmt + " [num_blocks, block_size, kv_heads, head_dim]");
  require_bytes(lim, b.v_cache, p.cache_bytes(), "v_cache buffer", fmt + " [num_blocks, block_size, kv_heads, head_dim]");
  const std::string kv_shape = p.ragged ? " [packed_tokens, kv_heads, head_dim]" : " [batch, kv_heads, new_tokens, head_dim]";
  require_bytes(lim, b.k, rows * p.kv_heads * D * es, "k buffer", dt + kv_shape);
  require_bytes(lim, b.v, rows * p.kv_heads * D * es, "v buffer", dt + kv_shape);
  require_bytes(lim, b.block_table, std::uint64_t{p.batch} * p.paged.max_blocks * 4, "block_table buffer", "int32 [batch, max_blocks]");
  require_bytes(lim, b.cache_lengths, std::uint64_t{p.batch} * 4, "cache_lengths buffer", "int32 [batch]");
  if (b.q) {
    require(p.apply_rope, "q buffer", "given", "is only rotated with apply_rope");
    require_bytes(lim, b.q, rows * p.heads * D * es, "q buffer",
                  dt + (p.ragged ? " [packed_tokens, heads, head_dim]" : " [batch, heads, new_tokens, head_dim]"));
  }
}

void record_kv_append(Recorder& r, const KvAppendParams& p, const KvAppendConstants& c, const KvAppendBuffers& b,
                      const KvAppendResources& res) {
  const DeviceLimits& lim = r.context().limits();
  push::KvAppendPush pc{};
  pc.with_q = b.q ? 1 : 0;
  pc.batch = p.batch;
  pc.heads = p.heads;
  pc.kv_heads = p.kv_heads;
  pc.tokens = p.new_tokens;
  pc.packed_rows = p.ragged ? p.packed_tokens : 0;
  pc.head_dim = p.head_dim;
  pc.half_rot = p.apply_rope ? p.rope_params(p.kv_heads).rot_dim() / 2 : 0;
  pc.block_size = p.paged.block_size;
  pc.num_blocks = p.paged.num_blocks;
  pc.max_blocks = p.paged.max_blocks;
  pc.scales_at = c.scales_at;
  pc.scale = c.attention_factor;
  pc.lengths_include_new = p.lengths_include_new ? 1 : 0;
  contract::KvAppendSpec spec{.WG_X = kGroup,
                              .F16 = p.dtype == DType::F16 ? 1u : 0u,
                              .ROPE = p.apply_rope ? 1u : 0u,
                              .GPTJ = p.rope.style == RopeStyle::GptJ ? 1u : 0u,
                              .FORMAT = static_cast<std::uint32_t>(p.cache()),
                              .RAGGED = p.ragged ? 1u : 0u,
                              .ADVANCE = 0u};
  contract::KvAppendSpec advance = spec;
  advance.ADVANCE = 1u;
  if (res.prepare_only) {
    const auto dev = device_of(r.context());
    dev->pipeline(ShaderId::kv_append, spec);
    if (p.advance_lengths) dev->pipeline(ShaderId::kv_append, advance);
    return;
  }
  const Buffer& q = b.q ? *b.q : *res.no_q;
  const Buffer& new_tokens = b.new_tokens ? *b.new_tokens : *res.constants;  // read only when ragged
  const contract::KvAppendBindings bindings{.K_CACHE = {b.k_cache},
                                            .V_CACHE = {b.v_cache},
                                            .K = {b.k},
                                            .V = {b.v},
                                            .BLOCK_TABLE = {b.block_table},
                                            .CACHE_LENGTHS = {b.cache_lengths},
                                            .Q = {&q},
                                            .CONSTANTS = {res.constants},
                                            .NEW_TOKENS = {&new_tokens}};
  const std::uint64_t rows = (std::uint64_t{p.kv_heads} + (b.q ? p.heads : 0u)) * p.new_tokens;  // per sequence, at most
  bool later = false;
  // Workgroup rows are sequences, as many a dispatch as the device's group count allows.
  const std::uint32_t per_dispatch = std::max<std::uint32_t>(1, lim.max_workgroup_count[1]);
  for (std::uint32_t first_sequence = 0; first_sequence < p.batch; first_sequence += per_dispatch)
    for_each_group_range(lim, div_up(rows, kGroup), [&](std::uint64_t first, std::uint32_t groups) {
      // Dispatches past the device's group count write other rows of the same bindings: ordered, so
      // that no write hazard is left for a validator (or a driver) to guess about.
      if (std::exchange(later, true)) barrier(r);
      pc.first_row = static_cast<std::uint32_t>(first * kGroup);
      pc.first_sequence = first_sequence;
      dispatch(r, res.sets, ShaderId::kv_append, spec, bindings, pc, groups, std::min(per_dispatch, p.batch - first_sequence));
    });
  if (p.advance_lengths) {
    pc.first_row = 0;
    for_each_group_range(lim, div_up(p.batch, kGroup), [&](std::uint64_t first, std::uint32_t groups) {
      barrier(r);  // every row has read its sequence's length (and the dispatch before wrote others)
      pc.first_sequence = static_cast<std::uint32_t>(first * kGroup);
      dispatch(r, res.sets, ShaderId::kv_append, advance, bindings, pc, groups);
    });
  }
}

}  // namespace detail

void kv_append(Recorder& r, const KvAppendParams& p, const KvAppendBuffers& b) {
  p.validate();
  detail::check_kv_append_buffers(r, p, b);
  const detail::KvAppendConstants c = detail::kv_append_constants(p);
  const auto op = detail::begin_op(r);
  Buffer& constants = detail::scratch(r, c.values.size() * 4, MemoryUse::Host);
  if (constants.host_pointer()) std::memcpy(constants.host_pointer(), c.values.data(), c.values.size() * 4);
  // Bound, never touched, without queries: its own buffer, since the binding is writable.
  const Buffer& no_q = b.q ? *b.q : detail::scratch(r, 16, MemoryUse::Device);
  detail::record_kv_append(r, p, c, b, {&constants, &no_q, nullptr, false});
}

}  // namespace relpos

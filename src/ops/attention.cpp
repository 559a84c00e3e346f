// Fused attention on the GPU: checks, then one dispatch per chunk of (batch, head) slabs whose
// buffer ranges the device can bind. Decoding shapes split the keys across workgroups and merge the
// float32 partial results by their log-sum-exp (attention_merge.comp), which is also public.
#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <string>
#include <vector>

#include "ops/attention_kernel.hpp"
#include "ops/kerple_row.hpp"
#include "ops/planner.hpp"
#include "ops/t5_row.hpp"
#include "params/checks.hpp"
#include "relpos/attention.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos_push/attention.h"
#include "relpos_push/attention_merge.h"
#include "relpos_push/loop_bound.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

using detail::require;

// At least this many keys per split, so that the merge stays small beside the attention itself.
constexpr std::uint32_t kMinSplitKeys = 128;

// Per key the kernel runs one iteration of each of its two key loops, plus one of the block loop
// per key block: at most 3 per key, with room left for its fixed-size loops.
static_assert(3 * AttentionParams::kMaxKeysPerSplit <= RELPOS_MAX_LOOP_ITERATIONS, "a split's keys must fit the loop bound");

std::uint32_t kernel_mode(AttentionBias bias) {
  switch (bias) {
    case AttentionBias::None: return RELPOS_ATTN_NONE;
    case AttentionBias::T5:
    case AttentionBias::Kerple:
    case AttentionBias::Distance: return RELPOS_ATTN_ROW;
    case AttentionBias::Alibi: return RELPOS_ATTN_ALIBI;
    case AttentionBias::Shaw: return RELPOS_ATTN_SHAW;
    case AttentionBias::Dense: return RELPOS_ATTN_DENSE;
  }
  return RELPOS_ATTN_NONE;
}

// What to do when one unit of a chunked dispatch needs a larger binding than the device has.
constexpr const char* kSplitHint = "split the keys and merge the parts with attention_merge";

void require_bytes(const Buffer* b, std::uint64_t want, const std::string& name, const std::string& what) {
  require(b != nullptr, name, "null", "is required (" + what + ")");
  require(b->size() == want, name, std::to_string(b->size()) + " bytes", "must be " + what + " = " + std::to_string(want) + " bytes");
}

void check_buffers(const AttentionParams& p, const AttentionBuffers& b) {
  const std::uint64_t es = dtype_size(p.dtype), D = p.head_dim;
  const std::string dt(dtype_name(p.dtype));
  require_bytes(b.q, p.rows() * D * es, "q buffer", dt + " [batch, heads, queries, head_dim]");
  if (p.paged.enabled()) {
    const std::uint64_t cache = p.paged.cache_elements(p.kv_heads, p.head_dim) * es;
    require_bytes(b.k, cache, "k buffer", dt + " [num_blocks, block_size, kv_heads, head_dim] (a paged cache)");
    require_bytes(b.v, cache, "v buffer", dt + " [num_blocks, block_size, kv_heads, head_dim] (a paged cache)");
    require_bytes(b.block_table, std::uint64_t{p.batch} * p.paged.max_blocks * 4, "block_table buffer", "int32 [batch, max_blocks]");
    require_bytes(b.cache_lengths, std::uint64_t{p.batch} * 4, "cache_lengths buffer", "int32 [batch]");
  } else {
    const std::uint64_t kv = std::uint64_t{p.batch} * p.kv_heads * p.keys * D * es;
    require_bytes(b.k, kv, "k buffer", dt + " [batch, kv_heads, keys, head_dim]");
    require_bytes(b.v, kv, "v buffer", dt + " [batch, kv_heads, keys, head_dim]");
  }
  detail::require_kv_kind(p, b);
  require_bytes(b.out, p.rows() * D * dtype_size(p.output_dtype()), "out buffer",
                std::string(dtype_name(p.output_dtype())) + " [batch, heads, queries, head_dim]");
  if (b.lse) require_bytes(b.lse, p.rows() * 4, "lse buffer", "float32 [batch, heads, queries]");
  if (p.bias == AttentionBias::Shaw) {
    const std::uint64_t rel = (2ull * p.max_relative_position + 1) * D * 4;
    require_bytes(b.rel_keys, rel, "rel_keys buffer", "float32 [2 * max_relative_position + 1, head_dim]");
    require_bytes(b.rel_values, rel, "rel_values buffer", "float32 [2 * max_relative_position + 1, head_dim]");
  } else if (p.bias != AttentionBias::None) {
    require_bytes(b.bias, p.bias_elements() * 4, "bias buffer", detail::attention_bias_layout(p.bias));
  }
  if (b.key_lengths) require_bytes(b.key_lengths, std::uint64_t{p.batch} * 4, "key_lengths buffer", "uint32 [batch]");
}

}  // namespace

namespace detail {

const char* attention_bias_layout(AttentionBias bias) {
  switch (bias) {
    case AttentionBias::T5: return "float32 [num_buckets, heads]";
    case AttentionBias::Distance: return "float32 [heads, queries + keys - 1]";
    case AttentionBias::Alibi: return "float32 [heads] slopes";
    case AttentionBias::Kerple: return "float32 [2, heads]: r1 then r2";
    case AttentionBias::Dense: return "float32 [heads, queries, keys]";
    case AttentionBias::None:
    case AttentionBias::Shaw: break;
  }
  return "no bias buffer";
}

void require_kv_kind(const AttentionParams& p, const AttentionBuffers& b) {
  if (p.paged.enabled())
    require(b.key_lengths == nullptr, "key_lengths buffer", "given", "must be null with a paged cache (cache_lengths replace it)");
  else
    require(b.block_table == nullptr && b.cache_lengths == nullptr, "block_table buffer", "given", "needs a paged cache (paged.block_size)");
}

bool attention_computes_rows(AttentionBias bias) { return bias == AttentionBias::T5 || bias == AttentionBias::Kerple; }

const Buffer& attention_distance_rows(Recorder& r, const AttentionParams& p, const Buffer& params, const Buffer* rows,
                                      DescriptorSource* sets) {
  if (p.bias == AttentionBias::T5) return t5_distance_row(r, p.t5_row_params(), &params);
  const DistanceWindow w{p.heads, p.queries, p.keys, p.row_query_offset(), 1, false};
  if (!rows) return kerple_distance_rows(r, w, p.kerple_variant, params);
  kerple_distance_rows_into(r, w, p.kerple_variant, params, *rows, sets);
  return *rows;
}

// attention_fused (the CPU class): a few subgroups per workgroup. A CPU device (lavapipe) gathers
// every key and value load lane by lane and has no register file to run out of, so each lane takes
// 4 rows to share those loads. attention_tiled (the GPU class): 64 lanes, tiles from the head size.
AttentionTiles attention_tiles(const Context& ctx) {
  const DeviceLimits& lim = ctx.limits();
  const std::uint32_t sub = std::max<std::uint32_t>(lim.subgroup_size, 1);
  const std::uint32_t cap = std::min<std::uint32_t>(lim.max_workgroup_invocations, lim.max_workgroup_size[0]);
  if (ctx.tuning().kernels == Kernels::Gpu) {
    AttentionTiles t{};
    t.tiled = true;
    const std::uint32_t forced = detail::device_of(ctx)->gpu_attention_lanes;
    t.lanes = forced ? forced : std::min<std::uint32_t>(cap, 64);
    t.rows = 1;
    t.target_items = 1024;
    t.shared_budget = std::min<std::uint32_t>(lim.max_shared_memory_bytes, 32 * 1024);
    t.shuffle_subgroup = lim.subgroup_shuffle && std::has_single_bit(sub) && t.lanes % sub == 0 ? sub : 0;
    return t;
  }
  const bool cpu = ctx.device_info().type == DeviceType::Cpu;
  const std::uint32_t lanes = std::clamp<std::uint32_t>(sub * 4, 1, std::min<std::uint32_t>(cap, 64));
  // A CPU device runs each storage load as a loop over its SIMD lanes (the subgroup): there the
  // lanes of a subgroup load one key each and shuffle them, so a key block is one subgroup. Not with
  // 64-lane subgroups (the CPU kernels forced onto an AMD GPU): a key block of 64 crashes RADV's
  // compiler (Mesa 22.3 and 25.0) and would take 64 unrolled shuffles of a whole key anyway.
  const bool share = detail::load_sharing_subgroup(ctx, lanes) != 0 && sub <= 32;
  return {false, lanes, cpu ? 4u : 1u, share ? sub : 8u, cpu ? 64u : 1024u, share, 0, 0};
}

AttentionTiledShape attention_tiled_shape(const AttentionTiles& tiles, std::uint32_t head_dim, bool one_query, bool paged) {
  const std::uint32_t D4 = head_dim / 4;
  // Query rows per workgroup: 16 share each staged key, or 1 when decoding; lanes a multiple of it.
  const std::uint32_t rows = one_query ? 1 : std::min<std::uint32_t>(16, tiles.lanes);
  const std::uint32_t lanes = tiles.lanes / rows * rows, lanes_per_row = lanes / rows;
  // Decoding, the row maxima of the largest power of two of lanes dividing the row and the subgroup
  // meet by shuffles (tiles.lanes is a whole number of subgroups where shuffle_subgroup is set):
  // through shared memory every lane would read all 64. With 16 rows of 4 lanes, 4 shared reads
  // cost what 2 shuffles do, and the lane numbering by subgroups that shuffles need costs the
  // compiler more (ACO estimates, navi21 and navi31: docs/fused_attention.md).
  std::uint32_t shuffle = 1;
  if (tiles.shuffle_subgroup && one_query && lanes == tiles.lanes)
    while (shuffle * 2 <= tiles.shuffle_subgroup && lanes_per_row % (shuffle * 2) == 0) shuffle *= 2;
  // attention_tiled.glsl's shared arrays: q_tile, kv_tile (rows padded by a word), p_tile, row_max, row_tile, key_words.
  auto bytes = [&](std::uint32_t bc) {
    return 16 * (rows + bc) * (D4 + 1) + 4 * (rows * (bc + 1) + rows * (lanes_per_row / shuffle) + rows + bc - 1 + (paged ? 2 * bc : 1));
  };
  for (std::uint32_t bc : {64u, 32u, 16u, 8u, 4u})
    if (bytes(bc) <= tiles.shared_budget) return {lanes, rows, bc, bytes(bc), shuffle};
  detail::require(false, "head_dim", std::to_string(head_dim),
                  "needs " + std::to_string(bytes(4)) + " bytes of shared memory for the GPU attention kernel; the device allows " +
                      std::to_string(tiles.shared_budget) + " (use the CPU kernels: Kernels::Cpu)");
  return {};
}

std::uint32_t attention_tiled_loop_iterations(const AttentionTiledShape& t, std::uint32_t head_dim, AttentionBias bias) {
  const std::uint32_t lanes_per_row = t.lanes / t.rows, scores = div_up(t.key_tile, lanes_per_row);
  const std::uint32_t dot = div_up(head_dim / 4, 4);
  if (bias == AttentionBias::Shaw) return 1 + dot + 2 * scores + scores * dot + t.key_tile;
  return 1 + dot + 2 * scores + t.key_tile / 4;
}

std::uint32_t attention_tiled_max_split_keys(const AttentionTiles& tiles, const AttentionParams& p) {
  const AttentionTiledShape t = attention_tiled_shape(tiles, p.head_dim, p.queries == 1, p.paged.enabled());
  const std::uint32_t tiles_per_split = RELPOS_MAX_LOOP_ITERATIONS / attention_tiled_loop_iterations(t, p.head_dim, p.bias);
  return std::min(AttentionParams::kMaxKeysPerSplit, tiles_per_split * t.key_tile);
}

std::uint32_t attention_splits(const AttentionParams& p, const AttentionTiles& tiles) {
  const std::uint32_t max_keys = tiles.tiled ? attention_tiled_max_split_keys(tiles, p) : AttentionParams::kMaxKeysPerSplit;
  if (p.key_splits) {  // validate() checked it against kMaxKeysPerSplit
    require(div_up(p.keys, p.key_splits) <= max_keys, "key_splits", std::to_string(p.key_splits),
            "leaves " + std::to_string(div_up(p.keys, p.key_splits)) + " keys in a split; the GPU attention kernel takes at most " +
                std::to_string(max_keys) + " at head_dim " + std::to_string(p.head_dim) + " (its loops stay within RELPOS_MAX_LOOP_ITERATIONS)");
    return p.key_splits;
  }
  const std::uint64_t needed = div_up(p.keys, max_keys);
  std::uint64_t by_items = 1;
  if (p.rows() < tiles.target_items)
    by_items = std::min<std::uint64_t>((tiles.target_items + p.rows() - 1) / p.rows(), p.keys / kMinSplitKeys);
  return static_cast<std::uint32_t>(std::max<std::uint64_t>({1, needed, by_items}));
}

AttentionLaunch attention_launch(const AttentionParams& p, const AttentionTiles& tiles, std::uint32_t S, bool fixed_lanes) {
  AttentionLaunch l{};
  l.splits = S;
  l.split_len = detail::div_up(p.keys, S);
  const bool one_query = p.queries == 1;
  const std::uint32_t in_half = p.dtype == DType::F16 ? 1u : 0u, out_half = S == 1 && p.output_dtype() == DType::F16 ? 1u : 0u;
  // attention_bindings.glsl's PAGED: log2 of a power-of-two block size (shifts), else 1 (divisions).
  const std::uint32_t bs = p.paged.block_size;
  const std::uint32_t paged = bs == 0 ? 0u : std::has_single_bit(bs) ? static_cast<std::uint32_t>(std::countr_zero(bs)) : 1u;
  if (tiles.tiled) {
    const AttentionTiledShape t = attention_tiled_shape(tiles, p.head_dim, one_query, p.paged.enabled());
    l.lane_splits = false;
    l.lanes = t.lanes;
    l.rows_per_group = t.rows;
    l.split_groups = S;
    l.groups_per_bh = S * detail::div_up(p.queries, t.rows);
    l.spec = {t.lanes, p.head_dim / 4, t.key_tile, in_half, out_half, t.rows, kernel_mode(p.bias), t.shuffle_lanes, paged};
    // Only the variant that shuffles declares the subgroup-shuffle capability.
    l.shader = t.shuffle_lanes > 1 ? (paged ? ShaderId::attention_tiled_shuffle_paged : ShaderId::attention_tiled_shuffle)
                                   : (paged ? ShaderId::attention_tiled_paged : ShaderId::attention_tiled);
    return l;
  }
  l.lane_splits = one_query && (S > 1 || fixed_lanes);
  l.lanes = l.lane_splits ? (fixed_lanes ? tiles.lanes : std::min(tiles.lanes, S)) : one_query ? 1 : tiles.lanes;
  const std::uint32_t rows_per_lane = one_query ? 1 : tiles.rows;
  l.rows_per_group = l.lanes * rows_per_lane;
  l.split_groups = l.lane_splits ? detail::div_up(S, l.lanes) : S;
  l.groups_per_bh = l.split_groups * detail::div_up(p.queries, l.rows_per_group);
  l.spec = {l.lanes, p.head_dim / 4, tiles.key_block, in_half, out_half, rows_per_lane,
            // every lane of a subgroup must walk the same keys
            tiles.share_loads && !l.lane_splits && l.lanes % tiles.key_block == 0 ? 1u : 0u, kernel_mode(p.bias), paged};
  // Only the variant that shares loads declares the subgroup-shuffle capability.
  l.shader = l.spec[6] ? ShaderId::attention_fused_shuffle : ShaderId::attention_fused;
  return l;
}

push::AttentionPush attention_push(const AttentionParams& p, const AttentionLaunch& l, bool has_lengths, std::uint32_t kv_stride) {
  push::AttentionPush pc{};
  pc.groups_per_bh = l.groups_per_bh;
  pc.split_groups = l.split_groups;
  pc.lane_splits = l.lane_splits ? 1 : 0;
  pc.splits = l.splits;
  pc.split_len = l.split_len;
  pc.heads = p.heads;
  pc.kv_group = p.heads / p.kv_heads;
  pc.kv_heads = p.kv_heads;
  pc.queries = p.queries;
  pc.keys = p.keys;
  pc.memory_prefix = p.memory_prefix;
  pc.query_offset = static_cast<std::int32_t>(p.row_query_offset());
  pc.causal = p.causal ? 1 : 0;
  pc.scale = p.effective_scale();
  pc.shaw_k = p.max_relative_position;
  pc.has_lengths = has_lengths ? 1 : 0;  // (a paged kernel reads cache_lengths regardless)
  pc.kv_stride = kv_stride;
  pc.block_size = p.paged.block_size;
  pc.num_blocks = p.paged.num_blocks;
  pc.max_blocks = p.paged.max_blocks;
  return pc;
}

std::vector<std::uint32_t> attention_merge_spec(std::uint32_t head_dim, DType in_dtype, DType out_dtype) {
  return {64, head_dim / 4, in_dtype == DType::F16 ? 1u : 0u, out_dtype == DType::F16 ? 1u : 0u};
}

void record_attention_merge(Recorder& r, const AttentionMergeLayout& m, std::uint64_t rows, std::uint32_t head_dim, const Buffer& out,
                            DType out_dtype, const Buffer& lse, DescriptorSource* sets) {
  const DeviceLimits& lim = r.context().limits();
  const std::uint32_t D4 = head_dim / 4, group = 64;
  const std::uint32_t in_word = dtype_size(m.in_dtype) * 4, out_word = dtype_size(out_dtype) * 4;
  auto bounds = [&](std::uint64_t r0, std::uint64_t r1) {
    const std::uint64_t in_end = (r1 - 1) * m.row_stride + std::uint64_t{m.parts - 1} * m.part_stride + D4;
    const std::uint64_t lse_end = (r1 - 1) * m.lse_row_stride + std::uint64_t{m.parts - 1} * m.lse_part_stride + 1;
    if (sets) return std::array<detail::Bound, 4>{detail::Bound{{m.in}}, detail::Bound{{m.in_lse}}, detail::Bound{{&out}}, detail::Bound{{&lse}}};
    return std::array<detail::Bound, 4>{detail::bind_range(lim, *m.in, r0 * m.row_stride * in_word, in_end * in_word, in_word),
                                detail::bind_range(lim, *m.in_lse, r0 * m.lse_row_stride * 4, lse_end * 4, 4),
                                detail::bind_range(lim, out, r0 * D4 * out_word, r1 * D4 * out_word, out_word),
                                detail::bind_range(lim, lse, r0 * 4, r1 * 4, 4)};
  };
  static const char* names[] = {"partial out", "partial lse", "out", "lse"};
  auto misfit = [&](std::uint64_t r0, std::uint64_t r1) -> std::string {
    const auto b = bounds(r0, r1);
    for (int k = 0; k < 4; ++k)
      if (!b[k].fits) return names[k];
    return "";
  };
  for (std::uint64_t r0 = 0; r0 < rows;) {
    const std::uint64_t r1 = detail::largest_fitting_chunk(lim, r0, rows, "one row of the merge", kSplitHint, misfit);
    const auto b = bounds(r0, r1);
    push::AttentionMergePush pc{};
    pc.end = static_cast<std::uint32_t>(r1 * D4);
    pc.parts = m.parts;
    pc.part_stride = m.part_stride;
    pc.row_stride = m.row_stride;
    pc.in_shift = b[0].shift;
    pc.lse_part_stride = m.lse_part_stride;
    pc.lse_row_stride = m.lse_row_stride;
    pc.lse_shift = b[1].shift;
    pc.out_shift = b[2].shift;
    pc.lse_out_shift = b[3].shift;
    const std::vector<std::uint32_t> spec = attention_merge_spec(head_dim, m.in_dtype, out_dtype);
    detail::for_each_group_range(lim, detail::div_up((r1 - r0) * D4, group), [&](std::uint64_t first, std::uint32_t groups) {
      pc.first = static_cast<std::uint32_t>(r0 * D4 + first * group);
      detail::dispatch(r, sets, ShaderId::attention_merge, spec, {b[0].span, b[1].span, b[2].span, b[3].span}, pc, groups);
    });
    r0 = r1;
  }
}

}  // namespace detail

void attention(Recorder& r, const AttentionParams& p, const AttentionBuffers& bufs) {
  p.validate();
  check_buffers(p, bufs);
  const DeviceLimits& lim = r.context().limits();
  const detail::AttentionTiles tiles = detail::attention_tiles(r.context());
  const std::uint32_t S = detail::attention_splits(p, tiles);
  require(S <= AttentionMergeParams::kMaxParts, "keys", std::to_string(p.keys),
          "need " + std::to_string(S) + " key splits; at most " + std::to_string(AttentionMergeParams::kMaxParts) + " are merged");
  require(p.rows() * S * (p.head_dim / 4) <= 0xffffffffull, "key_splits", std::to_string(S),
          "makes batch * heads * queries * splits * head_dim / 4 partial words exceed 2^32");
  const std::uint64_t Q = p.queries, K = p.keys, D = p.head_dim, H = p.heads, rows = p.rows();
  const std::uint32_t es = dtype_size(p.dtype), word = es * 4;
  const std::uint32_t out_word = S > 1 ? 16 : dtype_size(p.output_dtype()) * 4;  // partial results are float32
  const detail::AttentionLaunch launch = detail::attention_launch(p, tiles, S, false);
  const std::uint32_t group = p.heads / p.kv_heads;
  const std::uint32_t mode = kernel_mode(p.bias);
  // All reads of the rel tables, key lengths and slopes are small and bound whole.
  const std::uint64_t rel_bytes = (2ull * p.max_relative_position + 1) * D * 4;
  require(mode != RELPOS_ATTN_SHAW || rel_bytes <= lim.max_storage_buffer_range, "rel_keys", std::to_string(rel_bytes) + " bytes",
          "must fit in maxStorageBufferRange = " + std::to_string(lim.max_storage_buffer_range));
  // A per-distance bias computed here (T5, KERPLE) writes the rows of every head through one binding.
  if (detail::attention_computes_rows(p.bias)) detail::require_binding(lim, (Q + K - 1) * H, "heads * (queries + keys - 1)", "the per-distance bias rows");
  if (p.bias == AttentionBias::T5) detail::require_t5_table_binding(lim, p.t5_row_params());
  // A paged cache is bound whole: any block may hold any sequence's keys.
  const bool paged = p.paged.enabled();
  if (paged) {
    detail::require_binding(lim, p.paged.cache_elements(p.kv_heads, p.head_dim) * es / 4, "num_blocks * block_size * kv_heads * head_dim",
                            "the paged k and v caches (" + std::string(dtype_name(p.dtype)) + ", in 4-byte words)");
    detail::require_binding(lim, std::uint64_t{p.batch} * p.paged.max_blocks, "batch * max_blocks", "the block table");
  }

  // The buffers a dispatch binds. Until the scratch buffers exist (after every check), the caller's
  // stand in: planning the bindings only needs their sizes and offsets.
  const Buffer* dummy = bufs.q;  // bound where a mode reads nothing
  const Buffer* bias = bufs.bias;
  const Buffer* out = bufs.out;
  const Buffer* lse = bufs.q;

  auto kv_slab = [&](std::uint64_t bh) { return (bh / H) * p.kv_heads + (bh % H) / group; };
  // Floats of the bias a chunk of (batch, head) slabs reads: per head for distance and dense biases.
  auto bias_range = [&](std::uint64_t bh0, std::uint64_t bh1) -> std::pair<std::uint64_t, std::uint64_t> {
    const std::uint64_t per_head = mode == RELPOS_ATTN_ROW ? Q + K - 1 : mode == RELPOS_ATTN_DENSE ? Q * K : 1;
    const bool one_batch = bh0 / H == (bh1 - 1) / H;
    const std::uint64_t h0 = one_batch ? bh0 % H : 0, h1 = one_batch ? (bh1 - 1) % H + 1 : H;
    return {h0 * per_head, h1 * per_head};
  };
  auto bounds = [&](std::uint64_t bh0, std::uint64_t bh1) {
    const auto [b0, b1] = bias_range(bh0, bh1);
    const Buffer& bias_buf = bias ? *bias : *dummy;
    return std::array<detail::Bound, 5>{
        detail::bind_range(lim, *bufs.q, bh0 * Q * D * es, bh1 * Q * D * es, word),
        paged ? detail::Bound{{bufs.k}, 0, true}
              : detail::bind_range(lim, *bufs.k, kv_slab(bh0) * K * D * es, (kv_slab(bh1 - 1) + 1) * K * D * es, word),
        detail::bind_range(lim, *out, bh0 * Q * S * D * out_word / 4, bh1 * Q * S * D * out_word / 4, out_word),
        detail::bind_range(lim, *lse, bh0 * Q * S * 4, bh1 * Q * S * 4, 4),
        bias ? detail::bind_range(lim, bias_buf, b0 * 4, b1 * 4, 4) : detail::Bound{{dummy, 0, 16}, 0, true}};
  };
  static const char* names[] = {"q", "k and v", "out", "lse", "bias"};
  auto misfit = [&](std::uint64_t bh0, std::uint64_t bh1) -> std::string {
    const auto b = bounds(bh0, bh1);
    for (int k = 0; k < 5; ++k)
      if (!b[k].fits) return names[k];
    return "";
  };

  // Chunks of (batch, head) slabs whose bindings fit, planned before anything is recorded.
  const std::uint64_t bh_total = std::uint64_t{p.batch} * p.heads;
  std::vector<std::uint64_t> cuts{0};
  while (cuts.back() < bh_total) cuts.push_back(detail::largest_fitting_chunk(lim, cuts.back(), bh_total, "one (batch, head) slab", kSplitHint, misfit));

  const auto op = detail::begin_op(r);
  dummy = &detail::scratch(r, 16, MemoryUse::Device);
  if (detail::attention_computes_rows(p.bias)) bias = &detail::attention_distance_rows(r, p, *bufs.bias);
  if (S > 1) out = &detail::scratch(r, rows * S * D * 4, MemoryUse::Device);
  lse = S > 1 ? &detail::scratch(r, rows * S * 4, MemoryUse::Device) : bufs.lse ? bufs.lse : &detail::scratch(r, rows * 4, MemoryUse::Device);

  push::AttentionPush pc = detail::attention_push(p, launch, bufs.key_lengths != nullptr, p.keys);
  const detail::BufferSpan block_table = paged ? detail::BufferSpan{bufs.block_table} : detail::BufferSpan{dummy};
  const detail::BufferSpan rel_keys = mode == RELPOS_ATTN_SHAW ? detail::BufferSpan{bufs.rel_keys} : detail::BufferSpan{dummy};
  const detail::BufferSpan rel_values = mode == RELPOS_ATTN_SHAW ? detail::BufferSpan{bufs.rel_values} : detail::BufferSpan{dummy};
  const Buffer* lengths_buffer = detail::attention_lengths(p, bufs);
  const detail::BufferSpan lengths = lengths_buffer ? detail::BufferSpan{lengths_buffer} : detail::BufferSpan{dummy};
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::uint64_t bh0 = cuts[c], bh1 = cuts[c + 1];
    const auto b = bounds(bh0, bh1);
    pc.bh_first = static_cast<std::uint32_t>(bh0);
    pc.q_shift = b[0].shift;
    pc.kv_shift = b[1].shift;
    pc.out_shift = b[2].shift;
    pc.lse_shift = b[3].shift;
    pc.bias_shift = b[4].shift;
    detail::BufferSpan v_span = b[1].span;
    v_span.buffer = bufs.v;  // v has k's layout: the same range
    detail::for_each_group_range(lim, (bh1 - bh0) * launch.groups_per_bh, [&](std::uint64_t first, std::uint32_t groups) {
      pc.first_group = static_cast<std::uint32_t>(first);
      detail::dispatch(r, launch.shader, launch.spec,
                       {b[0].span, b[1].span, v_span, b[2].span, b[3].span, mode == RELPOS_ATTN_SHAW ? rel_values : b[4].span,
                        rel_keys, lengths, block_table},
                       pc, groups);
    });
  }
  if (S > 1) {
    detail::barrier(r);
    const Buffer& lse_out = bufs.lse ? *bufs.lse : detail::scratch(r, rows * 4, MemoryUse::Device);
    const std::uint32_t D4 = p.head_dim / 4;
    detail::record_attention_merge(r, {out, lse, S, D4, S * D4, 1, S, DType::F32}, rows, p.head_dim, *bufs.out, p.output_dtype(), lse_out);
  }
}

void attention_merge(Recorder& r, const AttentionMergeParams& p, const Buffer& partial_out, const Buffer& partial_lse,
                     const Buffer& out, const Buffer* lse) {
  p.validate();
  // attention_merge.comp loops over the parts twice in each invocation (their largest lse, then
  // the weighted sum).
  constexpr std::uint32_t max_parts = AttentionMergeParams::kMaxParts;
  static_assert(2 * max_parts <= RELPOS_MAX_LOOP_ITERATIONS);
  require(p.parts <= max_parts, "parts", std::to_string(p.parts),
          "must be <= " + std::to_string(max_parts) + " (the merge's loops over the parts stay under RELPOS_MAX_LOOP_ITERATIONS = " +
              std::to_string(RELPOS_MAX_LOOP_ITERATIONS) + "); merge in several passes");
  const std::uint64_t es = dtype_size(p.dtype), D = p.head_dim;
  const std::string dt(dtype_name(p.dtype));
  require_bytes(&partial_out, p.parts * p.rows * D * es, "partial_out buffer", dt + " [parts, rows, head_dim]");
  require_bytes(&partial_lse, p.parts * p.rows * 4, "partial_lse buffer", "float32 [parts, rows]");
  require_bytes(&out, p.rows * D * es, "out buffer", dt + " [rows, head_dim]");
  if (lse) require_bytes(lse, p.rows * 4, "lse buffer", "float32 [rows]");
  require(p.rows * (D / 4) <= 0xffffffffull && p.parts * p.rows <= 0xffffffffull, "rows", std::to_string(p.rows), "too many words for 32-bit indices");
  const auto op = detail::begin_op(r);
  const Buffer& lse_out = lse ? *lse : detail::scratch(r, p.rows * 4, MemoryUse::Device);
  const std::uint32_t D4 = p.head_dim / 4;
  detail::record_attention_merge(r, {&partial_out, &partial_lse, p.parts, static_cast<std::uint32_t>(p.rows * D4), D4, static_cast<std::uint32_t>(p.rows), 1, p.dtype},
               p.rows, p.head_dim, out, p.dtype, lse_out);
}

}  // namespace relpos

// Fused attention's launch (attention_launch.hpp): the device's tiles, the key splits, how one
// recording covers rows and splits, its push constants, and the merge of split results.
#include "ops/attention_launch.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <string>

#include "bias/bias_family.hpp"
#include "ops/planner.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos_contract/attention.h"
#include "relpos_push/attention_merge.h"
#include "relpos_push/loop_bound.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos::detail {
namespace {

// What to do when one row of the merge needs a larger binding than the device has.
constexpr const char* kSplitHint = "split the keys and merge the parts with attention_merge";

constexpr std::uint32_t kMergeGroup = 64;

// At least this many keys per split, so that the merge stays small beside the attention itself.
constexpr std::uint32_t kMinSplitKeys = 128;

// attention_tiled's query rows per prefill workgroup (at most: a workgroup of fewer lanes takes a
// row a lane).
constexpr std::uint32_t kPrefillRows = 16;

// attention_decode: at most this many keys for each group of lanes a step (between two rescales).
constexpr std::uint32_t kDecodeKeysPerGroup = 8;

// Registers a word of 4 values of the cache takes as loaded (before decoding).
std::uint32_t loaded_registers(CacheFormat f) {
  switch (f) {
    case CacheFormat::F32: return 4;
    case CacheFormat::F16:
    case CacheFormat::BF16: return 2;
    case CacheFormat::Q8_0: return 3;  // the block's scale and the one or two words of the int8
    case CacheFormat::FP8_E4M3: return 1;
  }
  return 4;
}

// Per key the CPU kernel runs one iteration of each of its two key loops, plus one of the block
// loop per key block: at most 3 per key, with room left for its fixed-size loops.
// attention_decode: at most this many query heads per workgroup, holding at most kDecodeWords
// words of the head per lane in all (each head its query's and its output's: at 4 heads of 2
// words, head_dim 128, Intel's compiler spilled and AMD's took 120-152 VGPRs; with subgroups of 8,
// dg2 spilled at 8 words however they were split).
constexpr std::uint32_t kDecodeHeads = 4, kDecodeWords = 4;

// Shared memory of a decoding workgroup of 64 lanes that keeps a GPU full: navi21 4 waves64 per
// SIMD, dg2 8 threads per EU (issue 27's decoding target; attention_decode takes 2.5 KiB).
constexpr std::uint32_t kDecodeSharedBytes = 8 * 1024;

// Decoding grouped-query heads, the query heads read together each key and value they share: the
// kv head's group in the fewest slabs of at most `most` heads, as even as they go (a group of 6 in
// 2 of 3; of 7 in 4 and 3, the second slab's last row idle).
std::uint32_t decode_slab_heads(const AttentionParams& p, std::uint32_t most) {
  const std::uint32_t group = p.heads / p.kv_heads;
  return div_up(group, div_up(group, std::clamp<std::uint32_t>(most, 1, group)));
}

static_assert(3 * AttentionParams::kMaxKeysPerSplit + AttentionParams::kMaxPackedBatch <= RELPOS_MAX_LOOP_ITERATIONS,
              "a split's keys (and a packed call's loop over its sequences) must fit the loop bound");

// The kernels' IN_HALF / OUT_HALF for a storage of q, out or the merge's parts.
std::uint32_t storage_spec(DType t) { return t == DType::F16 ? RELPOS_STORE_F16 : t == DType::BF16 ? RELPOS_STORE_BF16 : RELPOS_STORE_F32; }

}  // namespace

AttentionTiles gpu_attention_tiles(const DeviceLimits& lim, std::uint32_t forced_lanes, std::uint32_t shuffle_lanes) {
  const std::uint32_t sub = std::max<std::uint32_t>(lim.subgroup_size, 1);
  const std::uint32_t cap = std::min<std::uint32_t>(lim.max_workgroup_invocations, lim.max_workgroup_size[0]);
  AttentionTiles t{};
  t.tiled = true;
  // Prefill: 256 lanes where the device allows (4 wave64s, 8 wave32s, 16 SIMD16 threads), so that
  // 16 rows of 16 lanes share each staged tile: a workgroup's shared memory then serves 4 times
  // the lanes it served at 64, and each lane holds a quarter of the scores and output words.
  // Decoding: 64 lanes.
  std::uint32_t prefill = 64;
  while (prefill * 2 <= std::min<std::uint32_t>(cap, 256) && prefill * 2 % sub == 0) prefill *= 2;
  t.lanes = forced_lanes ? forced_lanes : std::min<std::uint32_t>(cap, prefill);
  t.decode_lanes = forced_lanes ? forced_lanes : std::min<std::uint32_t>(cap, 64);
  t.rows = 1;
  // Enough decoding workgroups' worth of work to hold every lane the device keeps resident twice
  // over (a ragged batch leaves many of a split's workgroups with no keys): on an H100 (2026-11-27,
  // the paged decode bench) 128 splits ran 1.12-1.18x (8/2 heads) and 1.95x (28/4) faster than the
  // 64 and 16 of a fixed 1024 workgroups, which stays where the device does not say.
  t.target_items = lim.resident_invocations ? static_cast<std::uint32_t>(std::min<std::uint64_t>(2 * lim.resident_invocations / t.decode_lanes, 1u << 20))
                                            : 1024;
  t.shared_budget = std::min<std::uint32_t>(lim.max_shared_memory_bytes, 32 * 1024);
  // Shuffles within groups of at most shuffle_lanes (a test's narrower subgroups) still stay inside
  // a subgroup: the device's subgroup size is a multiple of any smaller power of two.
  const std::uint32_t shuffle = shuffle_lanes ? std::min(sub, shuffle_lanes) : sub;
  t.shuffle_subgroup = lim.subgroup_shuffle && std::has_single_bit(sub) && std::has_single_bit(shuffle) && t.lanes % sub == 0 &&
                               t.decode_lanes % sub == 0
                           ? shuffle
                           : 0;
  t.subgroup = sub;
  // Prefill tiles of 16 keys (1 score per lane of a row) where relpos pins the subgroup to 8 lanes
  // (Intel's Xe-LP and Xe-HPG: the compiler picks SIMD8 where a SIMD16 lane's half of the register
  // file would not hold a tile's work): with 32, dg2 compiled 19 of its 102 prefill pipelines at
  // head_dim 64-128 at SIMD8 (float16 and bf16 caches at 96-128, Shaw), with 16 only 4.
  if (sub == 8) t.prefill_keys = 16;
  // The merge: 8 lanes a word, each merging every 8th chunk of its parts, so that a decoding step's
  // merge (128 parts a row on an H100) waits on memory for 2 chunks a lane, not 16.
  t.merge_part_lanes = 8;
  // attention_decode's registers for a step's loads in flight and its scores (AttentionTiles).
  // NVIDIA's compiler has 255 a thread: on an H100 (2026-11-27, the paged decode bench at 8/2 heads,
  // 4 heads of a word a lane, clock held) 48 of loads and 32 scores (8 keys a step with their
  // values for f16, bf16, fp8 and q8_0 caches) took 0.94x the time of the default's 4 keys (f16),
  // 0.90x (q8_0) and 0.83x (fp8); 64 and 64 (16 keys) took 1.07x (f16). One head keeps 32 of
  // loads (not measured there).
  if (lim.vendor_id == kVendorNvidia) {
    t.decode_loads = 48;
    t.decode_scores = 32;
  }
  return t;
}

// attention_fused (the CPU class): a few subgroups per workgroup. A CPU device (lavapipe) gathers
// every key and value load lane by lane and has no register file to run out of, so each lane takes
// 4 rows to share those loads. attention_tiled (the GPU class): gpu_attention_tiles.
AttentionTiles attention_tiles(const Context& ctx) {
  const DeviceLimits& lim = ctx.limits();
  if (ctx.tuning().kernels == Kernels::Gpu) {
    const Device& d = *detail::device_of(ctx);
    return gpu_attention_tiles(lim, d.gpu_attention_lanes, d.gpu_shuffle_lanes);
  }
  const std::uint32_t sub = std::max<std::uint32_t>(lim.subgroup_size, 1);
  const std::uint32_t cap = std::min<std::uint32_t>(lim.max_workgroup_invocations, lim.max_workgroup_size[0]);
  const bool cpu = ctx.device_info().type == DeviceType::Cpu;
  const std::uint32_t lanes = std::clamp<std::uint32_t>(sub * 4, 1, std::min<std::uint32_t>(cap, 64));
  // A CPU device runs each storage load as a loop over its SIMD lanes (the subgroup): there the
  // lanes of a subgroup load one key each and shuffle them, so a key block is one subgroup. Not with
  // 64-lane subgroups (the CPU kernels forced onto an AMD GPU): a key block of 64 crashes RADV's
  // compiler (Mesa 22.3 and 25.0) and would take 64 unrolled shuffles of a whole key anyway.
  const bool share = detail::load_sharing_subgroup(ctx, lanes) != 0 && sub <= 32;
  AttentionTiles t{false, lanes, cpu ? 4u : 1u, share ? sub : 8u, cpu ? 64u : 1024u, share, 0, 0, sub, lanes};
  // Decoding, a lane of a CPU device takes up to 8 query heads of a kv head: lavapipe (2026-11-26)
  // ran the bench's paged step with 16/2 heads 1.0-1.6x and with 28/4 (a slab of 7 against 4 + 3)
  // 1.3-1.6x faster than with 4, as the loads of a key serve twice the heads.
  t.decode_rows = cpu ? 8u : 1u;
  return t;
}

std::uint32_t attention_paged_spec(const AttentionParams& p) {
  const std::uint32_t bs = p.paged.block_size;
  return bs == 0 ? 0u : std::has_single_bit(bs) ? static_cast<std::uint32_t>(std::countr_zero(bs)) : 1u;
}

namespace {
// attention_tiled_shape's tile, or none where not even 4 keys fit (the needed bytes in `needed`).
std::optional<AttentionTiledShape> tiled_shape_within(const AttentionTiles& tiles, const AttentionParams& p, std::uint32_t row_heads,
                                                      std::uint32_t* needed = nullptr) {
  const std::uint32_t D4 = p.head_dim / 4;
  const bool one_query = p.queries == 1, paged = p.paged.enabled();
  const bool kv_half = p.cache() == CacheFormat::F16 || p.cache() == CacheFormat::BF16;  // staged as stored
  const std::uint32_t paged_spec = attention_paged_spec(p);
  // Query rows per workgroup: 16 share each staged key, or 1 when decoding (row_heads: that many
  // heads of its query); lanes a multiple of it.
  const std::uint32_t group = one_query ? tiles.decode_lanes : tiles.lanes;
  // A row per head: a workgroup of fewer lanes than the slab's heads would leave some undone.
  if (one_query && row_heads > group) return std::nullopt;
  const std::uint32_t rows = std::min<std::uint32_t>(one_query ? std::max<std::uint32_t>(row_heads, 1) : kPrefillRows, group);
  const std::uint32_t lanes = group / rows * rows, lanes_per_row = lanes / rows;
  // Decoding, the row maxima of the largest power of two of lanes dividing the row and the subgroup
  // meet by shuffles (tiles.lanes is a whole number of subgroups where shuffle_subgroup is set):
  // through shared memory every lane would read all 64. With 16 rows of 4 lanes, 4 shared reads
  // cost what 2 shuffles do, and the lane numbering by subgroups that shuffles need costs the
  // compiler more (ACO estimates, navi21 and navi31: docs/fused_attention.md).
  std::uint32_t shuffle = 1;
  if (tiles.shuffle_subgroup && one_query && lanes == group)
    while (shuffle * 2 <= tiles.shuffle_subgroup && lanes_per_row % (shuffle * 2) == 0) shuffle *= 2;
  auto bytes = [&](std::uint32_t bc) {
    return RELPOS_ATTN_TILED_SHARED_BYTES(rows, bc, D4, lanes_per_row / shuffle, paged, kv_half, paged_spec);
  };
  // Prefill tiles of at most 32 keys: 2 scores per lane of 16, which Intel's compiler keeps at
  // SIMD16 (dg2: at 64 keys head_dim 64 f16 compiles SIMD8), and at head_dim 64 a workgroup
  // within 16.5 KiB (navi21: 7-10 waves64 per SIMD, not 4-6), for the same estimate per row and
  // key (ACO, navi21). Decoding's tiled fallback (one row of 64 lanes) keeps 64: a key per lane.
  // Decoding heads as rows: 32 keys where the workgroup stays within kDecodeSharedBytes, else 16
  // (a key per lane of a row of 16; on dg2 64 keys spilled at head_dim 128 over f16 caches and 32
  // at 256, and the 20 KiB of those tiles left 2 threads per EU where the decoding kernel runs 8).
  const bool heads_as_rows = one_query && rows > 1;
  for (std::uint32_t bc : {64u, 32u, 16u, 8u, 4u}) {
    const bool size_fits =
        heads_as_rows ? bc <= 32 && (bytes(bc) <= kDecodeSharedBytes || bc <= lanes_per_row) : one_query || bc <= tiles.prefill_keys;
    if (size_fits && bytes(bc) <= tiles.shared_budget) return AttentionTiledShape{lanes, rows, bc, bytes(bc), shuffle};
  }
  if (needed) *needed = bytes(4);
  return std::nullopt;
}
}  // namespace

AttentionTiledShape attention_tiled_shape(const AttentionTiles& tiles, const AttentionParams& p, std::uint32_t row_heads) {
  std::uint32_t needed = 0;
  const std::optional<AttentionTiledShape> t = tiled_shape_within(tiles, p, row_heads, &needed);
  detail::require(t.has_value(), "head_dim", std::to_string(p.head_dim),
                  "needs " + std::to_string(needed) + " bytes of shared memory for the GPU attention kernel; the device allows " +
                      std::to_string(tiles.shared_budget) + " (use the CPU kernels: Kernels::Cpu)");
  return *t;
}

AttentionDecodeShape attention_decode_shape(const AttentionTiles& tiles, const AttentionParams& p) {
  const std::uint32_t lanes = tiles.decode_lanes, D4 = p.head_dim / 4;
  // Only where subgroups shuffle in compute shaders and the workgroup is a whole number of them.
  if (!tiles.tiled || !tiles.shuffle_subgroup || lanes % tiles.shuffle_subgroup != 0) return {};
  // Lanes per key: the fewest (a power of two within the subgroup and the workgroup) that leave
  // each lane at most 2 words of the head, so that a lane's query, output and one key's loads stay
  // a few registers and every lane works (head_dim 128: 16 lanes per key, 4 keys at once in 64).
  std::uint32_t kg = 1;
  const std::uint32_t most = std::min(tiles.shuffle_subgroup, lanes);
  while (kg * 2 <= most && div_up(D4, kg) > 2) kg *= 2;
  // Grouped-query heads: a lane holds each head's query and output words, so the heads share the
  // registers that one head's 2 words took: more lanes per key (fewer words each) first, then
  // fewer heads (at head_dim 128, 4 heads of 1 word in groups of 32 lanes; every lane keeps a word).
  const std::uint32_t wanted = decode_slab_heads(p, kDecodeHeads);
  while (kg * 2 <= std::min(most, D4) && wanted * div_up(D4, kg) > kDecodeWords) kg *= 2;
  // A head too large for the lanes of a subgroup (head_dim 256 in subgroups of 8): attention_tiled.
  if (div_up(D4, kg) > kDecodeWords) return {};
  const std::uint32_t heads = decode_slab_heads(p, kDecodeWords / div_up(D4, kg));
  // Fewer groups where their parts would not fit the shared memory (attention_tiled where none do).
  while (kg * 2 <= most && RELPOS_ATTN_DECODE_SHARED_BYTES(lanes / kg, D4) > tiles.shared_budget) kg *= 2;
  if (RELPOS_ATTN_DECODE_SHARED_BYTES(lanes / kg, D4) > tiles.shared_budget) return {};
  // Keys per step and whether its values load with its keys: the fewest memory round trips per key
  // (values with the keys: one a step, else two) within the registers for loads in flight and for
  // scores; where two tie, the values with the keys (fewer registers of decoded words: 8 keys
  // after the weights took navi21 from 9 waves to 5 where 4 with their values keep 9). A decoding
  // step waits on memory: on an H100 (2026-11-27, the paged decode bench, 8/2 heads: 4 heads of a
  // word a lane) 4 keys a step with their values took 1.24-1.29x the share of the copy ceiling of 2
  // (f16, bf16 and q8_0 caches; fp8 1.0x); with the keys held, loading the values with them
  // measured the same there (its compiler hoists the loads itself; ACO does not).
  // Shaw's keys near the diagonal add a float32 row of rel_keys to each key's loads, and one of
  // rel_values to each value's.
  const std::uint32_t words = div_up(D4, kg);
  const std::uint32_t loaded = loaded_registers(p.cache()) + (bias_family(p.bias).kernel_mode == RELPOS_ATTN_SHAW ? 4 : 0);
  std::uint32_t keys = 1, with_values = 0;
  const std::uint32_t load_budget = heads == 1 ? tiles.decode_loads_one_head : tiles.decode_loads;
  for (std::uint32_t k = 1; k <= kDecodeKeysPerGroup && heads * k <= tiles.decode_scores; k *= 2)
    for (std::uint32_t v = 0; v <= 1; ++v)
      if (k * words * loaded * (1 + v) <= load_budget && (2 - v) * keys < (2 - with_values) * k) {
        keys = k;
        with_values = v;
      }
  return {lanes, kg, keys, RELPOS_ATTN_DECODE_SHARED_BYTES(lanes / kg, D4), heads, with_values};
}

std::uint32_t attention_tiled_row_heads(const AttentionTiles& tiles, const AttentionParams& p) {
  if (!tiles.tiled || p.queries != 1) return 1;
  const AttentionDecodeShape d = attention_decode_shape(tiles, p);
  const std::uint32_t held = d.lanes ? d.heads : 1;
  // The most heads whose rows' tiles fit the shared memory, where that is more than
  // attention_decode holds.
  for (std::uint32_t n = decode_slab_heads(p, kDecodeHeads); n > held; n = decode_slab_heads(p, n - 1))
    if (tiled_shape_within(tiles, p, n)) return n;
  return 1;
}

std::uint32_t attention_tiled_max_split_keys(const AttentionTiles& tiles, const AttentionParams& p) {
  // Packed queries: the loop over the earlier sequences' lengths comes first.
  const std::uint64_t loop = RELPOS_MAX_LOOP_ITERATIONS - (p.packed() ? p.batch : 0u);
  // Every kernel attention_launch may pick for this shape (with heads shared or not: a slab that a
  // chunk would cut goes a head at a time): the fewest keys any of them holds, in whole units of
  // the largest alignment, so that a split rounded up to its kernel's alignment still fits.
  std::uint64_t keys = AttentionParams::kMaxKeysPerSplit, align = 1;
  auto kernel = [&](std::uint64_t most, std::uint32_t unit) {
    keys = std::min(keys, most);
    if (std::has_single_bit(unit)) align = std::max<std::uint64_t>(align, unit);
  };
  auto tiled = [&](std::uint32_t row_heads) {
    const AttentionTiledShape t = attention_tiled_shape(tiles, p, row_heads);
    const bool shaw = bias_family(p.bias).kernel_mode == RELPOS_ATTN_SHAW;
    kernel(loop / RELPOS_ATTN_TILED_TILE_ITERATIONS(t.key_tile, t.lanes / t.rows, p.head_dim / 4, shaw) * t.key_tile, t.key_tile);
  };
  const AttentionDecodeShape d = p.queries == 1 ? attention_decode_shape(tiles, p) : AttentionDecodeShape{};
  if (d.lanes) {
    const std::uint32_t step = RELPOS_ATTN_DECODE_STEP_KEYS(d.lanes / d.lanes_per_key, d.keys);
    kernel(loop * step, step);
  } else {
    tiled(1);
  }
  if (const std::uint32_t row_heads = attention_tiled_row_heads(tiles, p); row_heads > 1) tiled(row_heads);
  return static_cast<std::uint32_t>(keys / align * align);
}

bool attention_slab_starts(const AttentionParams& p, std::uint32_t slab_heads, std::uint64_t bh) {
  const std::uint32_t group = p.heads / p.kv_heads;
  return group % slab_heads == 0 ? bh % slab_heads == 0 : bh % group == 0;
}

std::uint64_t attention_slabs(const AttentionParams& p, std::uint32_t slab_heads, std::uint64_t bh0, std::uint64_t bh1) {
  const std::uint32_t group = p.heads / p.kv_heads;
  return group % slab_heads == 0 ? (bh1 - bh0) / slab_heads : (bh1 - bh0) / group * div_up(group, slab_heads);
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
  // Items are what the workgroups (GPU class) or lanes (CPU class) take: decoding, a slab of a kv
  // head's query heads is one item.
  std::uint32_t slab = 1;
  if (p.queries == 1) {
    const AttentionDecodeShape d = tiles.tiled ? attention_decode_shape(tiles, p) : AttentionDecodeShape{};
    const std::uint32_t row_heads = attention_tiled_row_heads(tiles, p);
    slab = !tiles.tiled ? decode_slab_heads(p, tiles.decode_rows) : row_heads > 1 ? row_heads : d.lanes ? d.heads : 1;
  }
  // Rows per head: a packed call's most (batch * queries), not its tokens, so that a plan's steps
  // take the splits its envelope planned for whatever their tokens. The GPU class counts
  // workgroups in decoding workgroups' worth: a prefill workgroup takes kPrefillRows query rows
  // with its lanes (8 sequences of 8 queries over 1k-16k keys took 2 splits as 512 rows, and 5 ms
  // on an H100 where a step of one query each took 0.34).
  const bool gpu_prefill = tiles.tiled && p.queries > 1;
  const std::uint64_t row_groups = gpu_prefill ? div_up(p.queries, std::min(kPrefillRows, tiles.lanes)) : p.queries;
  const std::uint64_t weight = gpu_prefill ? std::max<std::uint32_t>(tiles.lanes / tiles.decode_lanes, 1) : 1;
  const std::uint64_t items = std::uint64_t{p.batch} * row_groups * attention_slabs(p, slab, 0, p.heads) * weight;
  std::uint64_t by_items = 1;
  if (items < tiles.target_items) by_items = std::min<std::uint64_t>((tiles.target_items + items - 1) / items, p.keys / kMinSplitKeys);
  // The CPU class decoding: its lanes take a row's splits, so a workgroup's worth of them (where
  // the keys give each kMinSplitKeys) keeps every SIMD lane scoring keys; with fewer, a CPU device
  // runs one lane of eight, and pays for each lane's loads all the same (a per-lane loop).
  const std::uint64_t by_lanes = !tiles.tiled && p.queries == 1 ? std::min<std::uint64_t>(tiles.lanes, p.keys / kMinSplitKeys) : 1;
  return static_cast<std::uint32_t>(std::max<std::uint64_t>({1, needed, by_items, by_lanes}));
}


// A split's keys, rounded up to a power-of-two alignment, stay within kMaxKeysPerSplit (and the
// kernels' loop bounds, multiples of a tile or step) where div_up(keys, splits) did.
static_assert(std::has_single_bit(AttentionParams::kMaxKeysPerSplit));
std::uint32_t split_length(std::uint32_t keys, std::uint32_t splits, std::uint32_t align) {
  return div_up(div_up(keys, splits), align) * align;
}

std::uint64_t attention_fused_item_iterations(const AttentionParams& p, std::uint32_t split_len, std::uint32_t key_block, bool shaw_slots) {
  // lavapipe runs a loop's body once more to find every lane done (and once where none enters):
  // the key blocks, each with its two loops over the block's keys; the packed call's loop over the
  // earlier sequences; the round's own; with Shaw's slots, the two loops over the interior buckets.
  const std::uint64_t blocks = div_up(split_len, key_block);
  const std::uint64_t buckets = shaw_slots ? 2 * (2ull * p.max_relative_position - 1 + 1) : 0;
  return 2ull * split_len + 3 * blocks + 2 + (p.packed() ? p.batch + 1ull : 0) + 1 + buckets;
}

std::uint32_t attention_fused_rounds(const AttentionParams& p, std::uint32_t split_len, std::uint32_t key_block, bool shaw_slots) {
  return static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, RELPOS_MAX_LOOP_ITERATIONS / attention_fused_item_iterations(p, split_len, key_block, shaw_slots)));
}

std::uint32_t attention_shaw_slots(const AttentionParams& p, const AttentionTiles& tiles) {
  const bool cpu_device = !tiles.tiled && tiles.rows > 1;  // attention_tiles: 4 rows a lane on a CPU device
  const std::uint64_t buckets = 2 * std::uint64_t{p.max_relative_position} - 1;
  // A power of two that holds them: each block rescales every slot.
  return p.bias == AttentionBias::Shaw && cpu_device && buckets <= kShawSlots ? std::max<std::uint32_t>(std::bit_ceil(static_cast<std::uint32_t>(buckets)), 4) : 0;
}

AttentionLaunch attention_launch(const AttentionParams& p, const AttentionTiles& tiles, std::uint32_t S, bool share_heads, std::uint32_t parts) {
  AttentionLaunch l{};
  l.splits = S;
  l.slab_heads = 1;
  l.split_align = 1;
  const bool one_query = p.queries == 1;
  const std::uint32_t mode = bias_family(p.bias).kernel_mode;
  const std::uint32_t may_mask = bias_family(p.bias).may_mask ? 1u : 0u;
  // Whether causality can mask a key for one row of a workgroup that another row sees, which the
  // kernels then guard (spec CAUSAL; the push flag still applies the mask): one query's keys end at
  // its own bound. Not set for one query, so that decoding takes one pipeline whatever p.causal.
  const std::uint32_t causal = p.causal && !one_query ? 1u : 0u;
  // Partial results (the call has several splits) are float32, which the merge stores as out; a
  // call of a single split writes out itself.
  const std::uint32_t in_half = storage_spec(p.dtype), out_half = std::max(S, parts) == 1 ? storage_spec(p.output_dtype()) : RELPOS_STORE_F32;
  const std::uint32_t paged = attention_paged_spec(p);
  // Decoding grouped-query heads: attention_tiled with the heads as rows where attention_decode
  // cannot hold them all (attention_tiled_row_heads).
  const std::uint32_t row_heads = share_heads ? attention_tiled_row_heads(tiles, p) : 1;
  if (tiles.tiled && one_query && row_heads == 1) {
    if (const AttentionDecodeShape d = attention_decode_shape(tiles, p); d.lanes) {
      l.lane_splits = false;
      l.decodes = true;
      l.lanes = d.lanes;
      l.slab_heads = share_heads ? d.heads : 1;
      l.rows_per_group = 1;
      l.split_groups = S;
      l.groups_per_bh = S * p.queries;
      l.spec = contract::AttentionDecodeSpec{.WG_X = d.lanes,
                                             .D4 = p.head_dim / 4,
                                             .KG = d.lanes_per_key,
                                             .IN_HALF = in_half,
                                             .OUT_HALF = out_half,
                                             .KEYS = d.keys,
                                             .BIAS_MODE = mode,
                                             .PAGED = paged,
                                             .KV_FORMAT = static_cast<std::uint32_t>(p.cache()),
                                             .HEADS = l.slab_heads,
                                             .VALUES_WITH_KEYS = d.values_with_keys,
                                             .BIAS_MAY_MASK = may_mask};
      l.shader = paged ? ShaderId::attention_decode_paged : ShaderId::attention_decode;
      // Splits start on a step (RELPOS_ATTN_TILED_BLOCK_BASES: a step then lies in one block).
      const std::uint32_t step = RELPOS_ATTN_DECODE_STEP_KEYS(d.lanes / d.lanes_per_key, d.keys);
      l.split_align = std::has_single_bit(step) ? step : 1;
      return l;
    }
  }
  if (tiles.tiled) {
    const AttentionTiledShape t = attention_tiled_shape(tiles, p, row_heads);
    // Splits start on a tile (RELPOS_ATTN_TILED_BLOCK_BASES: a tile then lies in one block).
    l.split_align = std::has_single_bit(t.key_tile) ? t.key_tile : 1;
    l.lane_splits = false;
    l.lanes = t.lanes;
    l.rows_per_group = t.rows;
    l.slab_heads = row_heads;
    l.decodes = row_heads > 1;
    l.split_groups = S;
    l.groups_per_bh = S * detail::div_up(p.queries, row_heads > 1 ? 1 : t.rows);
    l.spec = contract::AttentionTiledSpec{.WG_X = t.lanes,
                                          .D4 = p.head_dim / 4,
                                          .BC = t.key_tile,
                                          .IN_HALF = in_half,
                                          .OUT_HALF = out_half,
                                          .BR = t.rows,
                                          .BIAS_MODE = mode,
                                          .SHUFFLE_LANES = t.shuffle_lanes,
                                          .PAGED = paged,
                                          .KV_FORMAT = static_cast<std::uint32_t>(p.cache()),
                                          .ROWS_ARE_HEADS = row_heads > 1 ? 1u : 0u,
                                          .BIAS_MAY_MASK = may_mask,
                                          .CAUSAL = causal};
    // Only the variant that shuffles declares the subgroup-shuffle capability.
    l.shader = t.shuffle_lanes > 1 ? (paged ? ShaderId::attention_tiled_shuffle_paged : ShaderId::attention_tiled_shuffle)
                                   : (paged ? ShaderId::attention_tiled_paged : ShaderId::attention_tiled);
    return l;
  }
  // One query: the lanes of a workgroup take consecutive splits of its row, as many lanes as splits
  // rounded up to whole subgroups (idle lanes of a subgroup cost nothing more), so that a plan's
  // steps, whose splits follow their keys, need few workgroup sizes.
  l.lane_splits = one_query && S > 1;
  const std::uint32_t sub = std::max<std::uint32_t>(tiles.subgroup, 1);
  l.lanes = l.lane_splits ? std::min(tiles.lanes, div_up(S, sub) * sub) : one_query ? 1 : tiles.lanes;
  // Decoding: a lane's rows are heads of one kv head (as many as a lane takes queries otherwise).
  l.slab_heads = one_query && share_heads ? decode_slab_heads(p, tiles.decode_rows) : 1;
  // Query rows a lane takes: a row per lane before a lane takes more (row r of lane n is query
  // r * lanes + n), so that a call of few queries (17-64: the decoding launch takes fewer) runs no
  // rows that only shadow its last query.
  const std::uint32_t rows_per_lane =
      one_query ? l.slab_heads : std::min(tiles.rows, std::bit_ceil(std::max<std::uint32_t>(div_up(p.queries, l.lanes), 1)));
  l.rows_per_group = l.lanes * rows_per_lane;
  l.split_groups = l.lane_splits ? detail::div_up(S, l.lanes) : S;
  l.groups_per_bh = l.split_groups * detail::div_up(p.queries, l.rows_per_group);
  const contract::AttentionFusedSpec spec{.WG_X = l.lanes,
                                          .D4 = p.head_dim / 4,
                                          .KEY_BLOCK = tiles.key_block,
                                          .IN_HALF = in_half,
                                          .OUT_HALF = out_half,
                                          .ROWS = rows_per_lane,
                                          // every lane of a subgroup must walk the same keys
                                          .SHARE_LOADS = tiles.share_loads && !l.lane_splits && l.lanes % tiles.key_block == 0 ? 1u : 0u,
                                          .BIAS_MODE = mode,
                                          .PAGED = paged,
                                          .KV_FORMAT = static_cast<std::uint32_t>(p.cache()),
                                          .ROWS_ARE_HEADS = l.slab_heads > 1 ? 1u : 0u,
                                          .LANE_SPLITS = l.lane_splits ? 1u : 0u,
                                          .SHAW_SLOTS = attention_shaw_slots(p, tiles),
                                          .BIAS_MAY_MASK = may_mask,
                                          .CAUSAL = causal};
  l.spec = spec;
  // Only the variant that shares loads declares the subgroup-shuffle capability.
  l.shader = spec.SHARE_LOADS ? ShaderId::attention_fused_shuffle : ShaderId::attention_fused;
  l.key_block = tiles.key_block;
  l.shaw_slots = spec.SHAW_SLOTS != 0;
  l.decodes = l.lane_splits;
  return l;
}

push::AttentionPush attention_push(const AttentionParams& p, const AttentionLaunch& l, bool has_lengths, std::uint32_t kv_stride) {
  push::AttentionPush pc{};
  pc.groups_per_bh = l.groups_per_bh;
  pc.split_groups = l.split_groups;
  pc.splits = l.splits;
  pc.part_stride = l.splits;
  pc.split_len = split_length(p.keys, l.splits, l.split_align);
  pc.heads = p.heads;
  pc.kv_group = p.heads / p.kv_heads;
  pc.kv_heads = p.kv_heads;
  pc.queries = p.queries;
  pc.keys = p.keys;
  pc.memory_prefix = p.memory_prefix;
  pc.query_offset = static_cast<std::int32_t>(p.row_query_offset());
  pc.flags = (p.causal ? RELPOS_ATTN_CAUSAL : 0) | (has_lengths ? RELPOS_ATTN_HAS_LENGTHS : 0);  // (a paged kernel reads cache_lengths regardless)
  pc.scale = p.effective_scale();
  pc.shaw_k = p.max_relative_position;
  pc.kv_stride = kv_stride;
  pc.block_size = p.paged.block_size;
  pc.num_blocks = p.paged.num_blocks;
  pc.max_blocks = p.paged.max_blocks;
  pc.total_queries = p.total_queries;
  // A plan's launch serves steps of any keys for its splits: the lanes' rounds follow the step's.
  pc.rounds = l.lane_splits ? attention_fused_rounds(p, pc.split_len, l.key_block, l.shaw_slots) : 1;
  return pc;
}

bool attention_lse_has_reference(const AttentionParams& p) { return RELPOS_ATTN_LSE_REFERENCE(bias_family(p.bias).kernel_mode); }

AttentionPartials attention_partials(const AttentionParams& p, std::uint32_t splits) {
  if (splits <= 1) return {};
  const std::uint32_t stride = splits + (attention_lse_has_reference(p) ? 1 : 0);
  return {p.rows() * splits, p.rows() * stride, stride};
}

SpecValues attention_merge_spec(std::uint32_t head_dim, DType in_dtype, DType out_dtype, std::uint32_t part_lanes, bool part_references,
                                bool out_relative) {
  return contract::AttentionMergeSpec{.WG_X = kMergeGroup,
                                      .D4 = head_dim / 4,
                                      .IN_HALF = storage_spec(in_dtype),
                                      .OUT_HALF = storage_spec(out_dtype),
                                      .PART_LANES = part_lanes,
                                      .PART_REFERENCES = part_references ? 1u : 0u,
                                      .OUT_RELATIVE = out_relative ? 1u : 0u};
}

void record_attention_merge(Recorder& r, const AttentionMergeLayout& m, std::uint64_t rows, std::uint32_t head_dim, const Buffer& out,
                            DType out_dtype, const Buffer& lse, DescriptorSource* sets) {
  const DeviceLimits& lim = r.context().limits();
  // Parts with references of their own are few (ring attention's 2, a sharded call's ranks): one
  // lane a word (attention_merge.comp).
  const bool part_references = m.reference && m.reference_part_stride != 0;
  const std::uint32_t part_lanes = part_references ? 1 : attention_tiles(r.context()).merge_part_lanes;
  const std::uint32_t D4 = head_dim / 4, group = kMergeGroup / part_lanes;  // words a workgroup
  const std::uint32_t in_word = dtype_size(m.in_dtype) * 4, out_word = dtype_size(out_dtype) * 4;
  const std::uint32_t out_lse_floats = m.out_relative ? 2 : 1;  // a row's
  auto bounds = [&](std::uint64_t r0, std::uint64_t r1) {
    const std::uint64_t in_end = (r1 - 1) * m.row_stride + std::uint64_t{m.parts - 1} * m.part_stride + D4;
    const std::uint64_t last_row = (r1 - 1) * m.lse_row_stride, parts_end = last_row + std::uint64_t{m.parts - 1} * m.lse_part_stride + 1;
    const std::uint64_t references_end = last_row + std::uint64_t{m.parts - 1} * m.reference_part_stride + m.reference_at + 1;
    const std::uint64_t lse_end = m.reference ? std::max(parts_end, references_end) : parts_end;
    if (sets) return std::array<detail::Bound, 4>{detail::Bound{{m.in}}, detail::Bound{{m.in_lse}}, detail::Bound{{&out}}, detail::Bound{{&lse}}};
    return std::array<detail::Bound, 4>{detail::bind_range(lim, *m.in, r0 * m.row_stride * in_word, in_end * in_word, in_word),
                                detail::bind_range(lim, *m.in_lse, r0 * m.lse_row_stride * 4, lse_end * 4, 4),
                                detail::bind_range(lim, out, r0 * D4 * out_word, r1 * D4 * out_word, out_word),
                                detail::bind_range(lim, lse, r0 * out_lse_floats * 4, r1 * out_lse_floats * 4, 4)};
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
    pc.reference = m.reference;
    pc.reference_at = m.reference_at;
    pc.reference_part_stride = m.reference_part_stride;
    const SpecValues spec = attention_merge_spec(head_dim, m.in_dtype, out_dtype, part_lanes, part_references, m.out_relative);
    detail::for_each_group_range(lim, detail::div_up((r1 - r0) * D4, group), [&](std::uint64_t first, std::uint32_t groups) {
      pc.first = static_cast<std::uint32_t>(r0 * D4 + first * group);
      detail::dispatch(r, sets, ShaderId::attention_merge, spec,
                       contract::AttentionMergeBindings{.PARTS = b[0].span, .PARTS_LSE = b[1].span, .OUT = b[2].span, .LSE = b[3].span}, pc, groups);
    });
    r0 = r1;
  }
}

}  // namespace relpos::detail

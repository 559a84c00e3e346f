#pragma once
// Fused attention's launch: the device's tiles, the key splits, how one recording launches
// attention_fused or attention_tiled over the rows and splits, and the merge of split results.
#include <cstdint>
#include <vector>

#include "relpos/attention.hpp"
#include "relpos/context.hpp"
#include "relpos_push/attention.h"
#include "shader_id.hpp"
#include "shaders/contracts.hpp"

namespace relpos::detail {

class DescriptorSource;

// Lanes per workgroup, query rows per lane and keys per softmax rescale, from the device
// (attention_fused, the CPU kernel class); tiled: attention_tiled (the GPU class) instead, whose
// tiles follow the head size too (attention_tiled_shape).
struct AttentionTiles {
  bool tiled;
  std::uint32_t lanes, rows, key_block;
  // Items times key splits below which the keys are split: enough to fill the device (a CPU
  // device runs a few threads, and each workgroup costs it a task). Items: the CPU class's query
  // rows (a lane's), the GPU class's workgroups in decoding workgroups' worth (attention_splits).
  std::uint32_t target_items;
  bool share_loads;  // key blocks loaded one key per subgroup lane and shuffled (SHARE_LOADS)
  std::uint32_t shared_budget;  // tiled: bytes of shared memory a workgroup may take
  // tiled: the subgroup size where subgroups can shuffle in compute shaders and tile the workgroup,
  // 0 where not
  std::uint32_t shuffle_subgroup;
  std::uint32_t subgroup;  // the device's subgroup size
  std::uint32_t decode_lanes;  // tiled: lanes of a workgroup that decodes (one query row)
  std::uint32_t prefill_keys = 32;  // tiled: the most keys of a prefill tile
  // attention_fused decoding: the most query heads of one kv head a lane takes (a CPU device: 8,
  // each key and value load a per-lane gather that they all share; 1 on a GPU)
  std::uint32_t decode_rows = 1;
  // attention_decode: registers of a lane for a step's loads in flight (its words of the keys and
  // values as loaded) with one head and with more (each of which holds its query and output words
  // and its scores), and for its scores (a key's for each head). The default is what AMD's and
  // Intel's compilers hold: 32 of loads with 4 heads spilled on Xe2 (bmg, lnl) and took navi21 with
  // Mesa 22.3 past 128 VGPRs at head_dim 64; 32 scores went past them too.
  std::uint32_t decode_loads_one_head = 32, decode_loads = 24, decode_scores = 16;
  // attention_merge: lanes that share a word's parts (PART_LANES). A GPU's merge has few words (a
  // decoding step: rows times head_dim / 4) and many parts each; a CPU device runs a workgroup's
  // lanes one after another, so there its barrier would only cost.
  std::uint32_t merge_part_lanes = 1;
};
AttentionTiles attention_tiles(const Context& ctx);
// The GPU class's tiles on a device of these limits (forced_lanes: a test's workgroup size, 0 none).
// shuffle_lanes: a test's narrower subgroup shuffles (0: the device's subgroup).
AttentionTiles gpu_attention_tiles(const DeviceLimits& lim, std::uint32_t forced_lanes, std::uint32_t shuffle_lanes = 0);

// attention_tiled's workgroup: `rows` queries of one (batch, head), lanes / rows lanes per query,
// keys staged `key_tile` at a time, `shared_bytes` of shared memory; the row maxima of
// `shuffle_lanes` lanes meet by subgroup shuffles (attention_tiled_shuffle where above 1).
struct AttentionTiledShape {
  std::uint32_t lanes, rows, key_tile, shared_bytes, shuffle_lanes;
};
// The largest key tile that fits the device's shared memory (at most 32 KiB, so that two
// workgroups share a 64 KiB compute unit), for this head size and dtype (float16 tiles stay
// float16); one query row per workgroup when decoding (one query), or `row_heads` rows that are
// heads of one kv head (attention_tiled_row_heads); a paged cache may take a few words per key
// more. Throws where not even 4 keys fit.
AttentionTiledShape attention_tiled_shape(const AttentionTiles& tiles, const AttentionParams& p, std::uint32_t row_heads = 1);
// attention_bindings.glsl's PAGED: 0 contiguous, log2 of a power-of-two block size (shifts), else 1
// (divisions).
std::uint32_t attention_paged_spec(const AttentionParams& p);
// attention_decode's workgroup (one query row of `heads` heads sharing a kv head): `lanes` lanes in
// groups of `lanes_per_key` that each score `keys` keys per step; `shared_bytes` of shared memory
// (the groups' parts of a head, merged a head at a time).
// lanes 0 where the device cannot run it (no subgroup shuffles in compute shaders, or a workgroup
// that is not a whole number of subgroups): attention_tiled decodes there.
struct AttentionDecodeShape {
  std::uint32_t lanes, lanes_per_key, keys, shared_bytes, heads, values_with_keys;
};
AttentionDecodeShape attention_decode_shape(const AttentionTiles& tiles, const AttentionParams& p);
// Decoding grouped-query heads (GPU class): the heads of one kv head that a workgroup takes
// together, so that each key and value is read once for them (the most, up to 4, that divide the
// kv head's group). attention_decode takes them where its lanes can hold them all; elsewhere
// (subgroups too narrow for the head: dg2's 8 lanes at head_dim 128, any at 256) attention_tiled
// does, its rows being those heads: this returns their number there, and 1 where attention_tiled
// has no heads as rows.
std::uint32_t attention_tiled_row_heads(const AttentionTiles& tiles, const AttentionParams& p);
// Keys one split of attention_tiled may hold: its loops run RELPOS_ATTN_TILED_TILE_ITERATIONS
// (relpos_contract/attention.h) per tile, and a split's tiles stay within
// RELPOS_MAX_LOOP_ITERATIONS (at most kMaxKeysPerSplit).
std::uint32_t attention_tiled_max_split_keys(const AttentionTiles& tiles, const AttentionParams& p);

// Key splits per row for this shape (p.key_splits when given; the GPU kernels refuse one that
// leaves a split longer than attention_tiled_max_split_keys).
std::uint32_t attention_splits(const AttentionParams& p, const AttentionTiles& tiles);
// A kv head's query heads go in slabs of `slab_heads` (AttentionLaunch::slab_heads), the last of
// them smaller where that does not divide the group. A dispatch may start at (batch, head) row `bh`
// when bh begins a slab (a group's first row where the slabs do not divide the group); the slabs
// of rows [bh0, bh1) between two such rows.
bool attention_slab_starts(const AttentionParams& p, std::uint32_t slab_heads, std::uint64_t bh);
std::uint64_t attention_slabs(const AttentionParams& p, std::uint32_t slab_heads, std::uint64_t bh0, std::uint64_t bh1);

// How one recording of attention_fused or attention_tiled covers the rows and splits.
struct AttentionLaunch {
  // Splits start on a multiple of split_align keys (a split's keys: split_length, from the call's).
  std::uint32_t splits, split_align;
  bool lane_splits;  // one query: the lanes of a workgroup take consecutive splits of one row
  std::uint32_t lanes, rows_per_group, split_groups, groups_per_bh;
  // (batch, head) rows per slab: the workgroups count slabs of this many consecutive heads of one kv
  // head (decoding grouped-query heads, each kv head read once for them; 1 otherwise).
  std::uint32_t slab_heads;
  SpecValues spec;  // contract::AttentionTiledSpec or contract::AttentionFusedSpec
  ShaderId shader;
  // attention_fused: keys per softmax rescale, from which attention_push finds the most items (key
  // splits of a slab) a decoding lane (lane_splits) takes as they come free for a call's keys
  // (attention_fused.glsl's main; pc.rounds).
  std::uint32_t key_block = 0;
  bool shaw_slots = false;  // attention_fused: SHAW_SLOTS (attention_shaw_slots)
  // Its kernel takes one query of a sequence in each of groups_per_bh's query tiles, counted from
  // the sequence's last (attention_fused's lane splits, attention_decode, attention_tiled with heads
  // as rows), and leaves the sequences of more than decoded_queries to another launch
  // (AttentionSchedule; decoded_queries is counted in groups_per_bh).
  bool decodes = false;
  std::uint32_t decoded_queries = 1;
};
// attention_fused: the loop iterations lavapipe counts for one item (a lane's rows over one split of
// split_len keys, in blocks of key_block), and so the most items a lane may take within
// RELPOS_MAX_LOOP_ITERATIONS (1 at least: a dispatch has a lane per item).
std::uint64_t attention_fused_item_iterations(const AttentionParams& p, std::uint32_t split_len, std::uint32_t key_block, bool shaw_slots = false);
std::uint32_t attention_fused_rounds(const AttentionParams& p, std::uint32_t split_len, std::uint32_t key_block, bool shaw_slots = false);

// Shaw's interior buckets (2 * max_relative_position - 1) in a lane's local arrays (SHAW_SLOTS) on
// a CPU device, where reading a bucket's rel_keys and rel_values rows for each key near the
// diagonal runs those per-lane loads under a lane mask for every key; kShawSlots where they fit,
// else 0.
inline constexpr std::uint32_t kShawSlots = 64;
std::uint32_t attention_shaw_slots(const AttentionParams& p, const AttentionTiles& tiles);
// Keys per split: div_up(keys, splits) rounded up to a multiple of `align`, so that every split
// starts on one (attention_decode's steps of a power-of-two number of keys then never straddle a
// paged block; trailing splits may be empty).
std::uint32_t split_length(std::uint32_t keys, std::uint32_t splits, std::uint32_t align);
// attention_fused with one query: the lanes take splits, as many as there are splits rounded up to
// whole subgroups (one lane for one split); attention_tiled's specialisation depends on the head
// size, the dtypes and whether there is one query only.
// share_heads false: one head per slab (where the recording's chunks of (batch, head) rows cannot
// keep a kv head's query heads together).
// parts: the call's partial results per row, where a launch takes fewer splits than the call has
// (a packed call's two launches, AttentionSchedule::decoding; 0: its own splits).
AttentionLaunch attention_launch(const AttentionParams& p, const AttentionTiles& tiles, std::uint32_t splits, bool share_heads = true,
                                 std::uint32_t parts = 0);

// Whether this call's bias mode keeps a row's lse relative to a reference where it is merged
// (RELPOS_ATTN_LSE_REFERENCE, relpos_push/attention.h: ALiBi's near bias).
bool attention_lse_has_reference(const AttentionParams& p);

// The partial results of a call whose keys take `splits` > 1 parts: `parts` rows of head_dim
// float32 (rows · splits), and `lse` floats, lse_stride a row: its parts' lse and, where the kernels
// keep them relative to a reference (RELPOS_ATTN_LSE_REFERENCE, relpos_push/attention.h), that reference.
struct AttentionPartials {
  std::uint64_t parts = 0, lse = 0;
  std::uint32_t lse_stride = 0;
};
AttentionPartials attention_partials(const AttentionParams& p, std::uint32_t splits);

// The push constants of a launch (shifts, bh_first and first_group 0). kv_stride: keys between two
// (batch, kv head) slabs of k and v.
push::AttentionPush attention_push(const AttentionParams& p, const AttentionLaunch& l, bool has_lengths, std::uint32_t kv_stride);

// Merges `parts` partial results (words of D/4 floats, strides in words) into out and lse.
struct AttentionMergeLayout {
  const Buffer* in;
  const Buffer* in_lse;
  std::uint32_t parts, part_stride, row_stride, lse_part_stride, lse_row_stride;
  DType in_dtype;
  // The parts' lse are relative to references (attention_merge.h): part n's of row r at float
  // n * reference_part_stride + r * lse_row_stride + reference_at of in_lse; reference_part_stride
  // 0: one a row for all the parts (one call's splits), else each part's own (PART_REFERENCES).
  bool reference = false;
  std::uint32_t reference_at = 0, reference_part_stride = 0;
  bool out_relative = false;  // lse rows of 2 floats: relative to the merged reference, then it
};
// With `sets` (plans) every buffer is bound whole (the caller checked that it fits a binding) and
// the descriptor sets come from there; otherwise the rows go in chunks whose ranges fit.
void record_attention_merge(Recorder& r, const AttentionMergeLayout& m, std::uint64_t rows, std::uint32_t head_dim, const Buffer& out,
                            DType out_dtype, const Buffer& lse, DescriptorSource* sets = nullptr);
// The merge's specialisation constants.
SpecValues attention_merge_spec(std::uint32_t head_dim, DType in_dtype, DType out_dtype, std::uint32_t part_lanes,
                                bool part_references = false, bool out_relative = false);

}  // namespace relpos::detail

// attention_fused.comp (CPU kernels): one invocation per ROWS query rows and key split; workgroup g
// takes local_size * ROWS consecutive queries of (batch, head) bh_first + g / groups_per_bh and one
// split of the keys: g % groups_per_bh = split group * (groups_per_bh / split_groups) + query tile.
// attention_tiled (GPU kernels, shaders/include/relpos/attention_tiled.glsl): workgroup g takes BR
// queries the same way, lanes never split.
// attention_fused's LANE_SPLITS (decoding a few queries a sequence): lane l of split group s takes
// split s * local_size + l, and query tile t a sequence's query t from its last (the lanes take these
// items as they come free, attention_fused.glsl's main).
// A dispatch binds each buffer from an aligned offset at or below the first element it uses;
// *_shift is that offset in the units the binding is indexed in, subtracted from global indices.
#ifndef RELPOS_PUSH_ATTENTION_H
#define RELPOS_PUSH_ATTENTION_H
#include "relpos_push/common.h"

// How the kernel finds the position bias of key j (T5 arrives as a per-distance row too).
#define RELPOS_ATTN_NONE 0u
#define RELPOS_ATTN_ROW 1u    // bias[h * (Q + K - 1) + (j - M) + (Q - 1 - i)]
#define RELPOS_ATTN_ALIBI 2u  // -bias[h] * |rp|
#define RELPOS_ATTN_SHAW 3u   // s * q·rel_keys[idx], plus Σ w · rel_values[idx] on the output
#define RELPOS_ATTN_DENSE 4u  // bias[(h * Q + i) * K + j]
// Whether a mode's kernels keep a split row's lse relative to the bias its scores were taken
// relative to, written after the row's parts (attention_bindings.glsl's store_lse; the partial
// lse's rows are one float longer: attention_partials in src/ops/attention_launch.hpp).
#define RELPOS_ATTN_LSE_REFERENCE(mode) ((mode) == RELPOS_ATTN_ALIBI)

// AttentionPush::flags
#define RELPOS_ATTN_CAUSAL 1u
#define RELPOS_ATTN_HAS_LENGTHS 2u  // key_lengths bound
// Where the mode keeps a reference (RELPOS_ATTN_LSE_REFERENCE), the call's lse rows are its lse
// relative to the reference, then the reference, even unsplit: a block of ring attention, merged
// exactly with blocks over other keys (attention_merge.comp's PART_REFERENCES).
#define RELPOS_ATTN_LSE_WITH_REFERENCE 4u

RELPOS_PUSH_BEGIN(AttentionPush) {
  uint first_group;    // flat workgroup index of this dispatch's first group (within the chunk)
  uint bh_first;       // first (batch * heads + head) of this chunk
  uint groups_per_bh;  // split_groups * div_up(queries, queries per workgroup)
  uint split_groups;   // splits, or div_up(splits, local size) with LANE_SPLITS
  uint splits;         // this launch's key splits per row (the call's: part_stride)
  uint split_len;      // keys per split
  uint heads;
  uint kv_group;       // heads / kv_heads
  uint kv_heads;
  uint queries;
  uint keys;
  uint memory_prefix;
  int query_offset;    // paged: keys - queries, the offset the per-distance rows are laid out for
  uint flags;          // RELPOS_ATTN_CAUSAL, _HAS_LENGTHS, _LSE_WITH_REFERENCE
  float scale;
  uint shaw_k;         // max_relative_position
  uint q_shift;        // in 4-element words
  uint kv_shift;       // in 4-element words
  uint out_shift;      // in 4-element words
  uint lse_shift;      // in floats
  uint bias_shift;     // in floats
  uint kv_stride;      // keys between two (batch, kv head) slabs of k and v: keys, or a plan's max_keys (a KV cache)
  // PAGED: k and v are [num_blocks, block_size, kv_heads, D]; block table [batch, max_blocks]
  uint block_size;
  uint num_blocks;
  uint max_blocks;
  // Packed queries: q, out and lse rows are tokens [total_queries, heads] (0: [batch, heads,
  // queries]); sequence b's query_lengths[b] queries are the last rows of the envelope's queries.
  uint total_queries;
  // attention_fused, LANE_SPLITS: the counter of this dispatch's items (binding WORK; 0 otherwise),
  // and the most items a lane takes (attention_fused.glsl's main; 1 otherwise).
  uint work_slot;
  uint rounds;
  // A packed call with a decoding launch for its sequences of a few queries (attention_fused's
  // LANE_SPLITS; attention_decode, attention_tiled's ROWS_ARE_HEADS): in the other
  // launch, which skips them, the most queries such a sequence has (0: no decoding launch); and the
  // partial results' parts per row, the call's splits, of which a launch may take fewer (splits;
  // the rest keep the lse of -inf they were filled with).
  uint decoding_queries;
  uint part_stride;
  // attention_fused without LANE_SPLITS, a dispatch of the whole call: its batch, whose sequences'
  // workgroups then take turns (attention_fused.glsl's main; 0: in order).
  uint interleave;
}
RELPOS_PUSH_END(AttentionPush)

#endif

// The body of attention_fused.comp and attention_fused_shuffle.comp, which differ only in
// SHARED_LOAD: subgroupShuffle where the device has it, nothing where SHARE_LOADS is always 0 (so
// that SPIR-V for devices without subgroup shuffles declares no shuffle capability).
// Fused attention with a relative position bias. Each invocation owns ROWS rows of one key split
// (queries of one head; decoding, ROWS_ARE_HEADS, the heads of one kv head): the scaled queries and the output accumulators stay in registers, keys are visited in blocks
// of KEY_BLOCK with one online-softmax rescale per block, and the bias of each key is computed
// from the per-distance row, the slope, Shaw's tables or the dense bias. The [Q, K] scores are
// never stored.
#extension GL_EXT_control_flow_attributes : require
#include "relpos_contract/attention.h"
#include "relpos_push/attention.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_ATTENTION_FUSED)
const bool SHARE_BIAS = SHARE_LOADS != 0u && BIAS_MODE == RELPOS_ATTN_ROW;
// Query rows per lane, and heads per workgroup slab: ROWS of each, one or the other.
const uint QUERY_ROWS = ROWS_ARE_HEADS != 0u ? 1u : ROWS;
const uint SLAB_HEADS = ROWS_ARE_HEADS != 0u ? ROWS : 1u;
// SHAW_SLOTS: each row's interior buckets 1 .. 2k - 1 in local arrays: q·rel_keys[bucket] computed
// once an item, and the weights of the bucket's keys summed (rescaled with the output) and applied
// to rel_values[bucket] once at the end. Otherwise each key near the diagonal reads its bucket's
// rows, and a CPU device runs those per-lane loads under a lane mask for every key.
const uint SLOTS = SHAW_SLOTS != 0u ? SHAW_SLOTS : 1u;
const bool SHAW_LOCAL = BIAS_MODE == RELPOS_ATTN_SHAW && SHAW_SLOTS != 0u;
// Whether a key a lane reads can be masked for one of its rows, so that its value must not reach the
// row (weight exactly 0, and 0 * NaN and 0 * inf are NaN, where the reference skips masked keys):
// only a bias the host marks BIAS_MAY_MASK (dense, a user's per-distance row) may hold -inf, the
// others are finite (T5's, kerple's and sandwich's rows by construction). Otherwise only causality
// masks a key a block reads, and only where a lane's rows are several queries (CAUSAL; a single
// query, LANE_SPLITS or ROWS_ARE_HEADS, walks its own keys). The lengths do not: without
// causality, every row's bound is row_keys(seq_keys, i_abs) = seq_keys, that of the workgroup's
// sequence b, so every row's lane_end is min(j_end, seq_keys) = j_end, one bound for the whole
// workgroup; a block reads keys below it only, and past it (shared loads) reloads key j_end - 1,
// which every row sees. A CPU device runs both sides of every branch under a lane mask, so the
// guard costs wherever it is compiled (lavapipe: see docs/fused_attention.md).
// (No || or &&: glslang makes a specialisation constant's a branch, outside any function.)
const bool MASKED_VALUES = BIAS_MAY_MASK + CAUSAL * (LANE_SPLITS == 0u ? 1u : 0u) * (ROWS_ARE_HEADS == 0u ? 1u : 0u) != 0u;
// Blocks of a masking bias are all guarded; otherwise the blocks before the first causal mask run
// without the guard (attend).
const bool PLAIN_BLOCKS = BIAS_MAY_MASK == 0u;

#include "relpos/attention_bindings.glsl"
// A key's weight from its score s and the row's running maximum m: masked keys (s = -inf) weigh 0.
float key_weight(const float s, const float m) { return s == uintBitsToFloat(0xff800000u) ? 0.0 : exp(s - m); }

// Lane `lane` of workgroup g (counted from the chunk's first) and its rows.
void attend(const uint g, const uint lane) {
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  // Workgroup g covers WG_X * ROWS queries of one (batch, head) and one key split, so the key range
  // it walks is the same for all its lanes and their key loads share one address.
  // With one query (decoding), lanes take consecutive splits instead: their loads then fetch
  // different keys rather than the same one.
  // ROWS_ARE_HEADS: bh is the first of the slab's SLAB_HEADS (batch, head) rows, all of one kv head.
  const uint bh = slab_first_row(g / pc.groups_per_bh, SLAB_HEADS);
  const uint rem = g % pc.groups_per_bh, q_tiles = pc.groups_per_bh / pc.split_groups;
  const bool lane_splits = LANE_SPLITS != 0u;
  const uint split = lane_splits ? (rem / q_tiles) * WG_X + lane : rem / q_tiles;
  // LANE_SPLITS: one query of a sequence of at most q_tiles, counted from the call's last row (a
  // sequence's queries are its last rows); a call of more queries has another launch for the
  // sequences of more, and that launch skips these.
  const uint i_first = lane_splits ? pc.queries - 1u - rem % q_tiles : (rem % q_tiles) * WG_X * ROWS;
  const uint b = bh / pc.heads, h = bh % pc.heads;
  const uint M = pc.memory_prefix;
  // ROWS_ARE_HEADS: rows past the slab's heads (the last slab of a group that ROWS does not divide)
  // shadow its last head and store nothing.
  const uint slab_heads = slab_heads_of(h, SLAB_HEADS);
  // Packed queries: rows below seq.x are no query of this sequence (they shadow its first and store
  // nothing); a workgroup with none of its own leaves at once, all lanes together, as does one whose
  // sequence the call's decoding launch takes (pc.decoding_queries), and a decoding lane whose query
  // its sequence does not have, or whose sequence has more than the launch takes.
  const uvec2 seq = sequence_rows(b);
  const uint seq_queries = pc.queries - seq.x;
  if (lane_splits ? i_first < seq.x || seq_queries > q_tiles
                  : i_first + WG_X * QUERY_ROWS <= seq.x || seq_queries <= pc.decoding_queries) return;

  // Every mask is a bound on the keys: padding for the batch, causality for each query (memory
  // keys stay visible). The workgroup walks up to the bound of its last query.
  const uint j_begin = min(split * pc.split_len, pc.keys);
  const uint seq_keys = sequence_keys(b);
  const int q_off = sequence_query_offset(seq_keys);
  uint j_end = min(seq_keys, j_begin + pc.split_len);
  if ((pc.flags & RELPOS_ATTN_CAUSAL) != 0u) {
    const int last_abs = int(lane_splits ? i_first : min(i_first + WG_X * QUERY_ROWS, pc.queries) - 1u) + q_off;
    j_end = min(j_end, M + uint(max(last_abs + 1, 0)));
  }

  const int kk = int(pc.shaw_k);
  const uint last_rel = 2u * pc.shaw_k;
  const uint hk = h / pc.kv_group;
  set_kv_scales(hk);
  const uint kv_word = (b * pc.kv_heads + hk) * pc.kv_stride * D4 - pc.kv_shift;

  // Per row r (query i_first + r * WG_X + lane, or with ROWS_ARE_HEADS head h + r of query
  // i_first + lane; idle lanes shadow the last query): the scaled query,
  // the accumulator, the running max and sum. Shaw's two edge buckets take every far key, so
  // their q·rel_keys and weight sums are scalars, rescaled with the output; an interior bucket
  // holds one key per row and is added at once.
  vec4 q[ROWS * D4], acc[ROWS * D4];
  float m[ROWS], l[ROWS], p_lo[ROWS], p_hi[ROWS], w_lo[ROWS], w_hi[ROWS];
  uint lane_end[ROWS], bias_base[ROWS], q_word[ROWS];
  uint share_base[ROWS];  // SHARE_BIAS: bias_base of the subgroup's first lane, unclamped (wraps past Q)
  int rp_base[ROWS];  // rp = j + rp_base
  float near_bias[ROWS];  // ALiBi: alibi_near_bias of the row
  float slope[ROWS];      // ALiBi: the row's head's
  float rel_score[ROWS * SLOTS], rel_weight[ROWS * SLOTS];  // SHAW_LOCAL: bucket t + 1 of row r at r * SLOTS + t
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    const uint hr = h + min(r / QUERY_ROWS, slab_heads - 1u);  // the row's head
    const uint i = lane_splits ? i_first : clamp(i_first + r % QUERY_ROWS * WG_X + lane, seq.x, pc.queries - 1u);
    const int i_abs = int(i) + q_off;
    const uint row_end = row_keys(seq_keys, i_abs);
    lane_end[r] = min(j_end, row_end);
    rp_base[r] = -int(M) - i_abs;
    slope[r] = BIAS_MODE == RELPOS_ATTN_ALIBI ? bias[hr - pc.bias_shift] : 0.0;
    near_bias[r] = alibi_near_bias(slope[r], row_end, rp_base[r]);
    // Bias index of key j >= M is bias_base + j (wraps harmlessly in between).
    bias_base[r] = BIAS_MODE == RELPOS_ATTN_ROW     ? row_bias_start(hr, i, q_off)
                   : BIAS_MODE == RELPOS_ATTN_DENSE ? (hr * pc.queries + i) * pc.keys - pc.bias_shift
                                               : 0u;
    share_base[r] = row_bias_start(hr, i_first + r % QUERY_ROWS * WG_X + lane - LANE_IN_SUBGROUP, q_off);
    m[r] = NEG_INF;
    l[r] = 0.0;
    p_lo[r] = 0.0;
    p_hi[r] = 0.0;
    w_lo[r] = 0.0;
    w_hi[r] = 0.0;
    q_word[r] = query_row(bh + hr - h, hr, i, seq) * D4 - pc.q_shift;
    [[unroll]] for (uint d = 0u; d < D4; ++d) {
      q[r * D4 + d] = load_q(q_word[r] + d) * pc.scale;
      acc[r * D4 + d] = vec4(0.0);
    }
    if (BIAS_MODE == RELPOS_ATTN_SHAW) {
      [[unroll]] for (uint d = 0u; d < D4; ++d) {
        p_lo[r] += dot(q[r * D4 + d], rel_keys[d]);
        p_hi[r] += dot(q[r * D4 + d], rel_keys[last_rel * D4 + d]);
      }
    }
    if (SHAW_LOCAL) [[unroll]] for (uint t = 0u; t < SLOTS; ++t) rel_weight[r * SLOTS + t] = 0.0;
  }
  if (SHAW_LOCAL) for (uint t = 0u; t + 1u < last_rel; ++t) [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    float pr = 0.0;
    [[unroll]] for (uint d = 0u; d < D4; ++d) pr += dot(q[r * D4 + d], rel_keys[(t + 1u) * D4 + d]);
    rel_score[r * SLOTS + t] = pr;
  }

  // Causal prefill without a masking bias: a key is masked for a row only at or past the row's
  // causal bound, and the smallest bound of the workgroup's rows is that of its first query
  // (row_keys grows with the query; rows below seq.x shadow query seq.x, rows past the last query
  // shadow it). So the whole blocks from j_begin that end at or below that bound read only keys
  // that every row sees (memory keys below M among them), and run the plain body, main's; the rest
  // of the range runs the guarded one. If the bound is at or past j_end, every block is plain: the
  // last, part of a block, reads keys below j_end only (the lanes past it take zeros for a value).
  // The bound is the workgroup's, so every lane of a subgroup walks the same
  // blocks in the same loop (the shared loads shuffle). With a masking bias, every block is
  // guarded; without the guard compiled, every block is plain. Each loop is compiled only where it
  // can run: lavapipe runs a loop's body once per entry even where no lane enters it, and both
  // sides of every branch, so a per-block choice would cost both bodies.
  uint plain_end = j_end;
  if (MASKED_VALUES && PLAIN_BLOCKS) {
    const uint first_end = row_keys(seq_keys, int(min(max(i_first, seq.x), pc.queries - 1u)) + q_off);
    plain_end = first_end >= j_end ? j_end : first_end > j_begin ? j_begin + (first_end - j_begin) / KEY_BLOCK * KEY_BLOCK : j_begin;
  }
  uint j0 = j_begin;
#define GUARDED false
  if (PLAIN_BLOCKS) for (; j0 < plain_end; j0 += KEY_BLOCK) {
#include "relpos/attention_fused_block.glsl"
  }
#undef GUARDED
#define GUARDED true
  if (MASKED_VALUES) for (; j0 < j_end; j0 += KEY_BLOCK) {
#include "relpos/attention_fused_block.glsl"
  }
#undef GUARDED

  if (SHAW_LOCAL) for (uint t = 0u; t + 1u < last_rel; ++t) [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    const float w = rel_weight[r * SLOTS + t];
    [[unroll]] for (uint d = 0u; d < D4; ++d) acc[r * D4 + d] += w * rel_values[(t + 1u) * D4 + d];
  }

  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    const uint hr = h + r / QUERY_ROWS;
    const uint i = lane_splits ? i_first : i_first + r % QUERY_ROWS * WG_X + lane;
    if (!query_stored(i, seq) || split >= pc.splits || r / QUERY_ROWS >= slab_heads) continue;
    // A fully masked row (l = 0) gives zeros and -inf; a NaN among its inputs makes l NaN, and the
    // row NaN, as in the reference (an ordered l > 0 would have turned it into a masked row).
    const float inv = l[r] == 0.0 ? 0.0 : 1.0 / l[r];
    const uint row = query_row(bh + hr - h, hr, i, seq), out_row = row * pc.part_stride + split;
    const uint out_word = out_row * D4 - pc.out_shift;
    [[unroll]] for (uint d = 0u; d < D4; ++d) {
      vec4 x = acc[r * D4 + d];
      if (BIAS_MODE == RELPOS_ATTN_SHAW) x += w_lo[r] * rel_values[d] + w_hi[r] * rel_values[last_rel * D4 + d];
      x *= inv;
      store_out(out_word + d, x);
    }
    store_lse(row, split, m[r], l[r], near_bias[r]);
  }
}

// Decoding (LANE_SPLITS), a dispatch's items (item t: lane t % WG_X of its group t / WG_X, one key
// split of one slab) go to lanes as they come free, counted out by work[pc.work_slot] (zeroed before
// the dispatch; other launches take their own item). A CPU device hands each of its threads an
// equal run of consecutive workgroups, so where a batch's long sequences came last, one thread
// scored them while the other had finished
// (lavapipe: 20 ms where the same work took 27 ms on one thread). Every lane takes an item at least,
// and a dispatch has as many items as lanes, so every item is taken whatever the bound on rounds;
// pc.rounds keeps a lane's loops, summed over its items, within RELPOS_MAX_LOOP_ITERATIONS
// (attention_fused_rounds, src/ops/attention_launch.hpp).
// Other launches: with pc.interleave (the batch), workgroup n takes the turn of sequence n % batch,
// so that each thread's run holds a share of every sequence's workgroups, however their costs lie
// (a packed call's one long prefill, a ragged batch's longest sequence).
uint group_of(const uint n) {
  if (pc.interleave == 0u) return n;
  const uint per_sequence = pc.groups_per_bh * pc.kv_heads * ((pc.kv_group + SLAB_HEADS - 1u) / SLAB_HEADS);
  return n % pc.interleave * per_sequence + n / pc.interleave;
}
void main() {
  const uint items = gl_NumWorkGroups.x * WG_X;
  uint t = gl_WorkGroupID.x * WG_X + LANE;
  for (uint taken = 0u; taken < pc.rounds; ++taken) {
    if (LANE_SPLITS != 0u) t = atomicAdd(work[pc.work_slot], 1u);
    if (t >= items) break;
    attend(group_of(pc.first_group + t / WG_X), t % WG_X);
    if (LANE_SPLITS == 0u) break;  // a constant: prefill compiles as one pass, outside any loop
  }
}

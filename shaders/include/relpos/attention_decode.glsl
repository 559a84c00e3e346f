// Fused attention for GPUs when decoding: the query rows of HEADS consecutive heads of one kv head
// (grouped-query heads: the keys and values they share are read once for all of them) of one batch
// and one key split per workgroup, in flash-decoding form inside the workgroup. With one row there is nothing to share a
// staged key with, so keys and values go from memory to registers and no tile is staged: the
// lanes form GROUPS = WG_X / KG key groups of KG lanes; group g scores keys j0 + g + GROUPS·u
// (u < KEYS) of each step of STEP = GROUPS·KEYS keys, every lane of it holding QW words
// d = e + KG·k of the head (e = its place in the group) of the query, of each key, of each value and
// of each head's output. A key's partial dot products meet by subgroupShuffleXor within the group
// (KG is a power of two dividing the subgroup, LANE numbers lanes by subgroups, so a group is
// inside one subgroup), so every lane works at every head size: at head_dim 128 (D4 32) and 64
// lanes, 4 groups of 16 lanes with 2 words each. Each group keeps its own running maximum, sum
// and output words per head, rescaled once per step; the groups meet after the loop, a head at a
// time, through shared memory (the only shared memory: GROUPS·D4 words and 4·GROUPS floats).
//
// The shared-memory hand-off, once per head: every lane writes its group's part of the head (its
// own words; lane e = 0 the group's maximum, sum and Shaw's edge weights), barrier(), then lanes
// read all groups' parts of the words they store; with more heads a second barrier() follows, so
// that no lane writes the next head's part while another still reads this one. Every lane reaches
// every barrier: the key loop's bounds depend on the workgroup only, the head loop is unrolled,
// and no lane returns after the packed-queries check (which is uniform over the workgroup).
//
// Loops that are not unrolled: the key loop, one iteration per STEP keys
// (RELPOS_ATTN_DECODE_ITERATIONS, by which the host bounds the keys of a split).
//
// The including shader defines PAGED_KV (0 or 1: k and v a paged cache) and LANE.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "relpos_contract/attention.h"
#include "relpos_push/attention.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_ATTENTION_DECODE)
const uint GROUPS = WG_X / KG;
const uint QW = (D4 + KG - 1u) / KG;  // words per lane (the last lanes may own one less)
const uint STEP = GROUPS * KEYS;
// The one query's keys end at j_end (keys past it reload key j_end - 1, visible), so a key the
// workgroup reads is masked for a head only by a -inf bias, which only a bias the host marks
// BIAS_MAY_MASK (dense, a user's per-distance row) may hold: T5's, kerple's and sandwich's rows are
// finite by construction, though read the same way.
const bool MASKED_VALUES = BIAS_MAY_MASK != 0u;

#include "relpos/attention_bindings.glsl"

// Paged with blocks of 2^PAGED keys that STEP (a power of two) divides: a split starts on a
// multiple of STEP (the host rounds split_len up to one: AttentionLaunch::split_align), so a step's
// keys lie in one block, whose first word is one uniform table load (a scalar load on AMD) when a
// step enters it; a key costs no table load of its own. Other blocks: one table load per key
// (key_word).
const bool BLOCK_BASES = RELPOS_ATTN_TILED_BLOCK_BASES(PAGED, STEP);

shared vec4 part_acc[RELPOS_ATTN_DECODE_PART_WORDS(GROUPS, D4)];  // [GROUPS][D4]
shared float part_stat[RELPOS_ATTN_DECODE_PART_STATS(GROUPS)];    // [GROUPS][m, l, w_lo, w_hi]

// The first word of key u of the group's KEYS keys of the step from key j0 (past the end: the last
// key again, finite and masked), each found once (paged: one table load per key, or with
// BLOCK_BASES none: `base` is the first word of the step's block).
uint step_key_word(uint j0, uint u, uint j_end, uint base, uint kv_word, uint b, uint hk, uint grp) {
  if (!BLOCK_BASES) return key_word(kv_word, b, hk, min(j0 + grp + u * GROUPS, j_end - 1u));
  // One address per lane, the others a uniform stride on. Within a block a later key lies further
  // on, so where the step holds the last key (j_end - 1), a key past it is clamped to it by its
  // address (uniform).
  const uint key_stride = pc.kv_heads * D4, block_mask = (1u << PAGED) - 1u;
  const uint first = base + ((j0 & block_mask) + grp) * key_stride;  // a multiply per step, not a register held
  const uint last = j_end - j0 <= STEP ? base + ((j_end - 1u) & block_mask) * key_stride : 0xffffffffu;
  return min(first + u * (GROUPS * key_stride), last);
}

// The bits of word d of a key or value from word `at` (a word past the head: zero, never used).
// (A function of one word: a step's words as an out parameter, an array sized by specialisation
// constants, came back wrong on lavapipe with groups of 3 and 4 heads at head_dim 32.)
uvec4 fetch_word(uint at, uint d, bool values) { return D4 % KG == 0u || d < D4 ? kv_fetch(at + d, values) : uvec4(0u); }

float group_sum(float x) {
  [[unroll]] for (uint bit = 1u; bit < KG; bit <<= 1) x += subgroupShuffleXor(x, bit);
  return x;
}

void main() {
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  const uint lane = LANE, grp = lane / KG, e = lane % KG;
  const uint g = pc.first_group + gl_WorkGroupID.x;
  // bh: the first of the workgroup's HEADS (batch, head) rows, all of one kv head.
  const uint bh = slab_first_row(g / pc.groups_per_bh, HEADS);
  const uint rem = g % pc.groups_per_bh, q_tiles = pc.groups_per_bh / pc.split_groups;
  // A sequence's query rem % q_tiles from its last (a decoding call's one; a call of a few queries
  // or a packed call's decoding launch: its sequences of up to q_tiles, whose queries are the call's
  // last rows, which the other launch skips).
  const uint split = rem / q_tiles, i_first = pc.queries - 1u - rem % q_tiles;
  const uint b = bh / pc.heads, h = bh % pc.heads;
  const uint M = pc.memory_prefix;
  // Head c of the slab is h + hc[c]: heads past the slab's (the last slab of a group that HEADS
  // does not divide) shadow its last and store nothing.
  const uint slab_heads = slab_heads_of(h, HEADS);
  uint hc[HEADS];
  [[unroll]] for (uint c = 0u; c < HEADS; ++c) hc[c] = min(c, slab_heads - 1u);
  // Packed queries: a row below seq.x is no query of this sequence; a workgroup without its own
  // leaves before the barrier, all lanes together, as does one whose sequence has more queries than
  // the launch takes.
  const uvec2 seq = sequence_rows(b);
  if (i_first < seq.x || pc.queries - seq.x > q_tiles) return;

  // The keys of the workgroup: its split, cut by the batch's length and by the causal bound of its
  // query (memory keys stay visible). Uniform over the workgroup.
  const uint j_begin = min(split * pc.split_len, pc.keys);
  const uint seq_keys = sequence_keys(b);
  const int q_off = sequence_query_offset(seq_keys);
  const uint i = clamp(i_first, seq.x, pc.queries - 1u);
  const int i_abs = int(i) + q_off;
  const uint row_end = row_keys(seq_keys, i_abs);  // the row's, over every split
  const uint j_end = min(j_begin + pc.split_len, row_end);
  const uint hk = h / pc.kv_group;
  set_kv_scales(hk);
  const uint kv_word = (b * pc.kv_heads + hk) * pc.kv_stride * D4 - pc.kv_shift;

  const int rp_base = -int(M) - i_abs;  // rp = j + rp_base
  const int kk = int(pc.shaw_k);
  const uint last_rel = 2u * pc.shaw_k;
  // Per head c (head h + hc[c]): ALiBi's slope and the bias of its nearest key, the dense bias's and
  // the per-distance row's first index.
  float slope[HEADS], near_bias[HEADS];
  uint dense_base[HEADS], row_base[HEADS];
  [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
    slope[c] = BIAS_MODE == RELPOS_ATTN_ALIBI ? bias[h + hc[c] - pc.bias_shift] : 0.0;
    near_bias[c] = BIAS_MODE == RELPOS_ATTN_ALIBI ? alibi_near_bias(slope[c], row_end, rp_base) : 0.0;
    dense_base[c] = ((h + hc[c]) * pc.queries + i) * pc.keys - pc.bias_shift;
    row_base[c] = row_bias_start(h + hc[c], i, q_off);  // RELPOS_ATTN_ROW
  }

  // The lane's words of each head's scaled query (a word past the head: zero, never stored).
  vec4 q[HEADS * QW];
  [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
    const uint q_word = query_row(bh + hc[c], h + hc[c], i, seq) * D4 - pc.q_shift;
    [[unroll]] for (uint k = 0u; k < QW; ++k) {
      const uint d = e + k * KG;
      q[c * QW + k] = D4 % KG == 0u || d < D4 ? load_q(q_word + d) * pc.scale : vec4(0.0);
    }
  }

  // Shaw's edge buckets take every far key: their q·rel_keys are per row, their weights rescale
  // with the output.
  float p_lo[HEADS], p_hi[HEADS], w_lo[HEADS], w_hi[HEADS], m[HEADS], l[HEADS];
  vec4 acc[HEADS * QW];
  [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
    p_lo[c] = 0.0;
    p_hi[c] = 0.0;
    w_lo[c] = 0.0;
    w_hi[c] = 0.0;
    m[c] = NEG_INF;
    l[c] = 0.0;
    [[unroll]] for (uint k = 0u; k < QW; ++k) acc[c * QW + k] = vec4(0.0);
    if (BIAS_MODE == RELPOS_ATTN_SHAW) {
      [[unroll]] for (uint k = 0u; k < QW; ++k) {
        const uint d = e + k * KG;
        if (D4 % KG == 0u || d < D4) {
          p_lo[c] += dot(q[c * QW + k], rel_keys[d]);
          p_hi[c] += dot(q[c * QW + k], rel_keys[last_rel * D4 + d]);
        }
      }
      p_lo[c] = group_sum(p_lo[c]);
      p_hi[c] = group_sum(p_hi[c]);
    }
  }

  // BLOCK_BASES: the first word of the block of the step's keys, loaded when a step enters a block,
  // and the words between two keys of a block.
  uint base = 0u;
  if (BLOCK_BASES && j_begin < j_end) base = block_base(b, hk, j_begin >> PAGED);
  const uint block_mask = (1u << PAGED) - 1u;
  for (uint j0 = j_begin; j0 < j_end; j0 += STEP) {
    // The step's keys' words and (VALUES_WITH_KEYS) values' as loaded, all loads issued before any
    // is used: decoded where used.
    uint at[KEYS];
    [[unroll]] for (uint u = 0u; u < KEYS; ++u) at[u] = step_key_word(j0, u, j_end, base, kv_word, b, hk, grp);
    uvec4 key_bits[KEYS * QW], value_bits[KEYS * QW];
    [[unroll]] for (uint t = 0u; t < KEYS * QW; ++t) {
      key_bits[t] = fetch_word(at[t / QW], e + t % QW * KG, false);
      value_bits[t] = VALUES_WITH_KEYS != 0u ? fetch_word(at[t / QW], e + t % QW * KG, true) : uvec4(0u);
    }
    // Each key's words loaded once, scored against every head's query.
    float x[HEADS * KEYS];
    [[unroll]] for (uint u = 0u; u < KEYS; ++u) {
      const uint j = min(j0 + grp + u * GROUPS, j_end - 1u);
      [[unroll]] for (uint c = 0u; c < HEADS; ++c) x[c * KEYS + u] = 0.0;
      [[unroll]] for (uint k = 0u; k < QW; ++k) {
        const uint d = e + k * KG;
        if (D4 % KG == 0u || d < D4) {
          const vec4 key = kv_decode(key_bits[u * QW + k], at[u] + d, false);
          [[unroll]] for (uint c = 0u; c < HEADS; ++c) x[c * KEYS + u] += dot(q[c * QW + k], key);
        }
      }
      if (BIAS_MODE == RELPOS_ATTN_SHAW) {  // near the diagonal: q·rel_keys, summed with q·k
        const uint idx = uint(clamp(int(j) + rp_base, -kk, kk) + kk);
        if (j >= M && idx != 0u && idx != last_rel) [[unroll]] for (uint k = 0u; k < QW; ++k) {
            const uint d = e + k * KG;
            if (D4 % KG == 0u || d < D4) {
              const vec4 rk = rel_keys[idx * D4 + d];
              [[unroll]] for (uint c = 0u; c < HEADS; ++c) x[c * KEYS + u] += dot(q[c * QW + k], rk);
            }
          }
      }
    }
    // The next step's block, where it enters one (uniform: once per 2^PAGED / STEP steps).
    if (BLOCK_BASES && ((j0 + STEP) & block_mask) == 0u && j0 + STEP < j_end) base = block_base(b, hk, (j0 + STEP) >> PAGED);
    // Uniform control flow: every lane of the workgroup shuffles.
    [[unroll]] for (uint t = 0u; t < HEADS * KEYS; ++t) x[t] = group_sum(x[t]);
    // Each key's bias per head (row or dense), every load issued before any is used: under the
    // memory-prefix test below, each head's load waited for the one before it (ACO, navi21: four
    // waits a step). Loaded here, not with the keys, so that they hold no registers over the
    // shuffles (there they cost navi21 1-2 waves per SIMD).
    float key_bias[HEADS * KEYS];
    [[unroll]] for (uint u = 0u; u < KEYS; ++u) {
      const uint j = j0 + grp + u * GROUPS;
      [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
        key_bias[c * KEYS + u] = 0.0;
        if (BIAS_MODE == RELPOS_ATTN_ROW) key_bias[c * KEYS + u] = bias[min(row_base[c] + j, uint(bias.length()) - 1u)];
        if (BIAS_MODE == RELPOS_ATTN_DENSE) key_bias[c * KEYS + u] = bias[dense_base[c] + min(j, j_end - 1u)];
      }
    }
    [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
      float step_max = NEG_INF;
      [[unroll]] for (uint u = 0u; u < KEYS; ++u) {
        const uint j = j0 + grp + u * GROUPS;
        float s = x[c * KEYS + u];
        if (j >= M && BIAS_MODE != RELPOS_ATTN_NONE) {
          const int rp = int(j) + rp_base;
          if (BIAS_MODE == RELPOS_ATTN_ROW || BIAS_MODE == RELPOS_ATTN_DENSE) {
            s += key_bias[c * KEYS + u];
          } else if (BIAS_MODE == RELPOS_ATTN_ALIBI) {
            s = alibi_score(s, slope[c], rp, near_bias[c]);
          } else if (BIAS_MODE == RELPOS_ATTN_SHAW) {
            const uint idx = uint(clamp(rp, -kk, kk) + kk);
            if (idx == 0u) s += p_lo[c];
            else if (idx == last_rel) s += p_hi[c];
          }
        }
        x[c * KEYS + u] = j < j_end ? s : NEG_INF;
        step_max = max(step_max, x[c * KEYS + u]);
      }
      // One rescale per step; a group whose keys are all masked so far keeps m = -inf and zeros.
      const float m_new = max(m[c], step_max);
      const float alpha = m[c] == NEG_INF ? 0.0 : exp(m[c] - m_new);
      m[c] = m_new;
      l[c] *= alpha;
      w_lo[c] *= alpha;
      w_hi[c] *= alpha;
      [[unroll]] for (uint k = 0u; k < QW; ++k) acc[c * QW + k] *= alpha;
      [[unroll]] for (uint u = 0u; u < KEYS; ++u) {
        const float p = x[c * KEYS + u] == NEG_INF ? 0.0 : exp(x[c * KEYS + u] - m_new);
        x[c * KEYS + u] = p;  // the weight, for the values below
        l[c] += p;
      }
    }
    // Each value's words loaded once, weighted for every head.
    [[unroll]] for (uint u = 0u; u < KEYS; ++u) {
      [[unroll]] for (uint k = 0u; k < QW; ++k) {
        const uint d = e + k * KG;
        if (D4 % KG == 0u || d < D4) {
          const vec4 value = kv_decode(VALUES_WITH_KEYS != 0u ? value_bits[u * QW + k] : kv_fetch(at[u] + d, true), at[u] + d, true);
          // MASKED_VALUES: a head for which the key is masked (weight exactly 0) keeps its sum, for
          // 0 * NaN and 0 * inf are NaN and the reference skips masked keys. A select of the sum:
          // of the product it cost navi21 8 VGPRs (a wave per SIMD) at HEADS 4, a branch spilled
          // on Xe2 (bmg, lnl), a choice per step of a guarded loop cost ACO's estimate more.
          [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
            const float p = x[c * KEYS + u];
            const vec4 t = acc[c * QW + k] + p * value;
            acc[c * QW + k] = !MASKED_VALUES || p != 0.0 ? t : acc[c * QW + k];
          }
        }
      }
      if (BIAS_MODE == RELPOS_ATTN_SHAW) {
        const uint j = j0 + grp + u * GROUPS;
        const uint idx = uint(clamp(int(j) + rp_base, -kk, kk) + kk);
        [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
          const float p = x[c * KEYS + u];
          if (j >= M && p > 0.0) {
            if (idx == 0u) w_lo[c] += p;
            else if (idx == last_rel) w_hi[c] += p;
            else [[unroll]] for (uint k = 0u; k < QW; ++k) {
                const uint d = e + k * KG;
                if (D4 % KG == 0u || d < D4) acc[c * QW + k] += p * rel_values[idx * D4 + d];
              }
          }
        }
      }
    }
  }

  // Per head: the groups' parts into shared memory (each lane its own words), barrier, every lane
  // merges the groups' maxima and sums (the same order, so the same numbers) and stores words lane,
  // lane + WG_X, ...; a second barrier before the next head's parts overwrite what lanes read.
  const bool stored = query_stored(i_first, seq) && split < pc.splits;
  [[unroll]] for (uint c = 0u; c < HEADS; ++c) {
    [[unroll]] for (uint k = 0u; k < QW; ++k) {
      const uint d = e + k * KG;
      if (D4 % KG == 0u || d < D4) part_acc[grp * D4 + d] = acc[c * QW + k];
    }
    if (e == 0u) {
      part_stat[grp * 4u] = m[c];
      part_stat[grp * 4u + 1u] = l[c];
      part_stat[grp * 4u + 2u] = w_lo[c];
      part_stat[grp * 4u + 3u] = w_hi[c];
    }
    barrier();
    if (stored && c < slab_heads) {
      float mx = NEG_INF;
      [[unroll]] for (uint u = 0u; u < GROUPS; ++u) mx = max(mx, part_stat[u * 4u]);
      float scale_of[GROUPS];
      float lt = 0.0, wl = 0.0, wh = 0.0;
      [[unroll]] for (uint u = 0u; u < GROUPS; ++u) {
        const float mu = part_stat[u * 4u];
        // A group with every key masked (sum 0) weighs nothing; one whose sum is NaN (a NaN input,
        // even where its maximum stayed -inf) makes the row NaN, as in the reference.
        scale_of[u] = part_stat[u * 4u + 1u] == 0.0 ? 0.0 : exp(mu - mx);
        lt += scale_of[u] * part_stat[u * 4u + 1u];
        wl += scale_of[u] * part_stat[u * 4u + 2u];
        wh += scale_of[u] * part_stat[u * 4u + 3u];
      }
      const float inv = lt == 0.0 ? 0.0 : 1.0 / lt;  // masked: zeros and -inf; a NaN input: NaN
      const uint row = query_row(bh + hc[c], h + hc[c], i, seq), out_row = row * pc.part_stride + split;
      const uint out_word = out_row * D4 - pc.out_shift;
      [[unroll]] for (uint t = 0u; t < (D4 + WG_X - 1u) / WG_X; ++t) {
        const uint d = lane + t * WG_X;
        if (D4 % WG_X != 0u && d >= D4) continue;
        vec4 o = vec4(0.0);
        [[unroll]] for (uint u = 0u; u < GROUPS; ++u) o += scale_of[u] * part_acc[u * D4 + d];
        if (BIAS_MODE == RELPOS_ATTN_SHAW) o += wl * rel_values[d] + wh * rel_values[last_rel * D4 + d];
        o *= inv;
        store_out(out_word + d, o);
      }
      if (lane == 0u) store_lse(row, split, mx, lt, near_bias[c]);
    }
    if (HEADS > 1u) barrier();
  }
}

// Fused attention for GPUs, in FlashAttention-2 form. A workgroup owns BR query rows of one
// (batch, head) and one key split (ROWS_ARE_HEADS: the one query of BR heads that share a kv head,
// row r that of head h + r). Its queries are staged once in shared memory; the keys are
// walked in tiles of BC: all lanes load the tile's keys (then its values) into shared memory by
// coalesced loads, and every row of the workgroup reuses them. Each row has LPR = WG_X / BR lanes:
// lane s of row r scores keys c = s + LPR·t of the tile and owns dims d4 = s + LPR·k of the row's
// output, so no lane holds a whole key or a whole row. One online-softmax rescale per tile.
//
// The workgroup is several subgroups (prefill: 256 lanes, 4 wave64s or 8 wave32s, or 16 SIMD16
// threads), which run in no fixed order relative to each other: a row's lanes and a tile's
// writers and readers are in different subgroups, so every hand-off below needs its barrier (a
// single wave64 of 64 lanes let a compiler drop some; here none may be). The shared-memory
// hand-offs of one tile, each behind a barrier() that every lane reaches (the tile loop's bounds
// depend on the workgroup only, so control flow stays uniform; a packed workgroup with no rows of
// its own leaves before the first barrier, all its lanes together):
//   1. write kv_tile (keys) and row_tile (the bias window)  -> barrier A
//   2. read them: scores into this lane's own entries of p_tile (no other lane touches them until
//      barrier C); combine the row's largest score over SHUFFLE_LANES lanes by subgroup shuffles
//      and write one per group of them to row_max          -> barrier B (also ends the key reads)
//   3. read row_max; turn the lane's p_tile entries into weights; write kv_tile (values over the
//      keys: every read of the keys came before barrier B)     -> barrier C
//   4. read p_tile and kv_tile: rescale and accumulate; PAGED: write the next tile's key_words
//                                                           -> barrier D
// Barrier D keeps the next tile's writes of kv_tile, row_tile, row_max and p_tile behind this
// tile's reads (another subgroup may still be accumulating from kv_tile when a fast one loops).
// Step 2 writes p_tile only at the lane's own entries and step 3 reads only those back, so that
// pair needs no barrier of its own; the row maxima of step 2 cross lanes (row_max), hence B.
// Paged with BLOCK_BASES, a tile's key words come from one uniform load, not key_words: no
// hand-off is added.
// Loops that are not unrolled, per tile: the tile, ceil(D4 / 4) for the scores, two of SCORES for
// the bias and the weights, BC / OUT_STEP for the output; Shaw adds ceil(D4 / 4) near the diagonal
// (RELPOS_ATTN_TILED_TILE_ITERATIONS, by which the host bounds the keys of a split).
// q_tile is written once before the loop (behind its own barrier) and only read after; Shaw's edge
// products go into each row's padding word (EDGE_DOTS) after that barrier, by lane 0 of the row,
// and are first read in step 2 of the first tile, after barrier A.
//
// The including shader defines PAGED_KV (0 or 1: k and v a paged cache), LANE, the lane's index in
// the workgroup, and ROW_SHUFFLE_XOR(x, m),
// x of lane LANE ^ m (attention_tiled_shuffle.comp: subgroupShuffleXor, with LANE counted in
// subgroups, so that lanes LANE ^ m share a subgroup by construction), or x itself where
// SHUFFLE_LANES is always 1 (attention_tiled.comp).
#extension GL_EXT_control_flow_attributes : require
#include "relpos_contract/attention.h"
#include "relpos_push/attention.h"

// The constants, the shared arrays' sizes and the loop steps the host plans by are in
// relpos_contract/attention.h.
RELPOS_DECLARE_SPEC(RELPOS_SPEC_ATTENTION_TILED)
const uint LPR = WG_X / BR;                  // lanes per row
const uint MAX_PARTS = LPR / SHUFFLE_LANES;  // the row's maxima left for shared memory
const uint SCORES = RELPOS_ATTN_TILED_SCORES(BC, LPR);  // (decoding: lanes past BC score none)
const uint OWNED = (D4 + LPR - 1u) / LPR;  // output words per lane (the last lanes may own one less)
const uint KV_STRIDE = D4 + 1u, Q_STRIDE = D4 + 1u, P_STRIDE = BC + 1u;  // padded rows
const uint EDGE_DOTS = D4;  // Shaw: the word of a q_tile row's padding that keeps its edge products
const uint WINDOW = RELPOS_ATTN_TILED_WINDOW(BR, BC);
const uint OUT_STEP = RELPOS_ATTN_TILED_OUT_STEP(BIAS_MODE == RELPOS_ATTN_SHAW);
const uint QUERY_ROWS = ROWS_ARE_HEADS != 0u ? 1u : BR;  // queries per workgroup
const uint SLAB_HEADS = ROWS_ARE_HEADS != 0u ? BR : 1u;  // heads per workgroup

#include "relpos/attention_bindings.glsl"

shared vec4 q_tile[RELPOS_ATTN_TILED_Q_TILE(BR, D4)];           // [BR][Q_STRIDE]
// The tile's keys, then its values, [BC][KV_STRIDE] words: float32 as vec4, float16 as the four
// halves loaded (uvec2, half the bytes: unpacked where read). The other array has one word. Past
// them, row BC: zeros, written once, the value a key masked for a row gives it (step 4).
const uint KV_WORDS = RELPOS_ATTN_TILED_KV_TILE(BC, D4);
const uint ZERO_ROW = BC * KV_STRIDE;
// Only a bias the host marks BIAS_MAY_MASK (dense, a user's per-distance row) can hold -inf,
// masking any key for any row; the others are finite (T5's, kerple's and sandwich's rows by
// construction). Otherwise a key a tile reads is masked for a row only by causality, where the rows
// are several queries (CAUSAL; with ROWS_ARE_HEADS, one query, the tile reads no key past its
// end). Not by a length: without causality every row's bound is row_keys(seq_keys, i_abs) =
// seq_keys, the workgroup's sequence's, so row_end = j_end for every row, and past j_end a tile
// reloads key j_end - 1, which every row sees.
// (No || or &&: glslang makes a specialisation constant's a branch, outside any function.)
const bool MASKED_VALUES = BIAS_MAY_MASK + CAUSAL * (ROWS_ARE_HEADS == 0u ? 1u : 0u) != 0u;
// f16 and bf16 caches are staged as they are stored (four halves a word); f32 as it is, q8_0 and
// fp8 decoded to float32 as they are loaded (their products with the scales need float32).
const bool KV_HALF = KV_FORMAT - 1u < 2u;  // CACHE_F16 or CACHE_BF16 (one comparison: no branch)
shared vec4 kv_tile[KV_HALF ? 1u : KV_WORDS];
shared uvec2 kv_tile_half[KV_HALF ? KV_WORDS : 1u];
shared float p_tile[RELPOS_ATTN_TILED_P_TILE(BR, BC)];          // [BR][P_STRIDE]
shared float row_max[RELPOS_ATTN_TILED_ROW_MAX(BR, MAX_PARTS)];  // one per shuffle group of a row
shared float row_tile[WINDOW];  // RELPOS_ATTN_ROW: row r reads row_tile[BR - 1 - r + c]
#if PAGED_KV
// Blocks of 2^PAGED >= BC keys (BLOCK_BASES): splits start on a multiple of BC (the host rounds
// split_len up to one: AttentionLaunch::split_align), so a tile's keys lie in one block, whose
// first word every lane finds by one uniform table load per tile (a scalar load on AMD), and a
// staged word costs no table or shared read. Other blocks: the first word of each key of a tile, found
// once per key (one block table load) rather than once per staged word, in key_words. Two
// buffers: tile n stages from buffer n % 2 while the lanes fill the other for tile n + 1 in step 4
// (its last readers were before barrier C; barrier D publishes it). A preprocessor switch, not
// PAGED alone: RADV (Mesa 22.3) kept the shared reads in the contiguous variant even under a
// constant-false PAGED (ACO: +2% cycles).
const bool BLOCK_BASES = RELPOS_ATTN_TILED_BLOCK_BASES(PAGED, BC);
// Unused with BLOCK_BASES, where it keeps 4 words: a whole 16 bytes, so that the arrays the driver
// places after it stay 16-byte aligned (RADV laid it first, and with 1 word read the halves of the
// K/V tile 4 bytes at a time: ACO +20%).
shared uint key_words[BLOCK_BASES ? 4u : RELPOS_ATTN_TILED_KEY_WORDS(BC)];
#else
const bool BLOCK_BASES = false;
#endif

void find_key_words(uint buf, uint b, uint hk, uint j0, uint j_end) {
#if PAGED_KV
  if (BLOCK_BASES || j0 >= j_end) return;
  [[unroll]] for (uint t = 0u; t < (BC + WG_X - 1u) / WG_X; ++t) {
    const uint c = gl_LocalInvocationID.x + t * WG_X;
    if (c < BC) key_words[buf * BC + c] = key_word(0u, b, hk, min(j0 + c, j_end - 1u));
  }
#endif
}

// Word 0 of key j0 + c (past the end: of the last key). BLOCK_BASES: key_offset is c's words from
// key j0 (c · kv_heads · D4), tile_words.x key j0's first word and tile_words.y that of key
// j_end - 1 where the tile holds it (else ~0): in one block a later key lies further on, so a key
// past the last is clamped to it by its address.
uint tile_key_word(uint kv_word, uint buf, uint j0, uint c, uint j_end, uint key_offset, uvec2 tile_words) {
#if PAGED_KV
  if (BLOCK_BASES) return min(tile_words.x + key_offset, tile_words.y);
  return key_words[buf * BC + c];
#else
  return kv_word + min(j0 + c, j_end - 1u) * D4;
#endif
}

// The K/V load interface: word `at` of k (or v) in the form kv_tile keeps (f16 and bf16 as stored,
// q8_0 and fp8 decoded by attention_bindings.glsl's load_kv), and a staged word back as four floats.
void stage_word(uint slot, uint at, bool values) {
  if (KV_HALF) kv_tile_half[slot] = values ? v16[at] : k16[at];
  else kv_tile[slot] = load_kv(at, values);  // f32, or q8_0 and fp8 decoded
}
void stage_zero(uint slot) {
  if (KV_HALF) kv_tile_half[slot] = uvec2(0u);
  else kv_tile[slot] = vec4(0.0);
}
vec4 staged_word(uint slot) {
  if (!KV_HALF) return kv_tile[slot];
  return KV_FORMAT == CACHE_BF16 ? unpack4_bf16(kv_tile_half[slot]) : unpack4(kv_tile_half[slot]);
}

// Steps 1 and 3: the keys (or values) j0 .. j0 + BC - 1 into kv_tile, all lanes, consecutive lanes
// consecutive words. A key past the end reloads the last one: finite, and its score is masked.
// The bound on w is compiled only where WG_X does not divide the tile's words.
// BLOCK_BASES: a key's words from key j0, c · kv_heads · D4, multiplied once per lane where a lane's
// words are of keys WG_X / D4 apart (WG_X a multiple of D4).
void stage_tile(uint kv_word, uint buf, uint j0, uint j_end, bool values, uvec2 tile_words) {
  const uint key_stride = BLOCK_BASES ? pc.kv_heads * D4 : 0u;
  const uint lane_offset = (gl_LocalInvocationID.x / D4) * key_stride;
  [[unroll]] for (uint t = 0u; t < (BC * D4 + WG_X - 1u) / WG_X; ++t) {
    const uint w = gl_LocalInvocationID.x + t * WG_X;
    if ((BC * D4) % WG_X == 0u || w < BC * D4) {
      const uint c = w / D4, d = w % D4;
      const uint key_offset = WG_X % D4 == 0u ? lane_offset + t * (WG_X / D4) * key_stride : c * key_stride;
      const uint at = tile_key_word(kv_word, buf, j0, c, j_end, key_offset, tile_words) + d;
      stage_word(c * KV_STRIDE + d, at, values);
    }
  }
}

void main() {
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  const uint lane = LANE, r = lane / LPR, s = lane % LPR;
  const uint g = pc.first_group + gl_WorkGroupID.x;
  // bh: the (batch, head) of row 0 (ROWS_ARE_HEADS: the first of the slab's BR, of one kv head).
  const uint bh = slab_first_row(g / pc.groups_per_bh, SLAB_HEADS);
  const uint rem = g % pc.groups_per_bh, q_tiles = pc.groups_per_bh / pc.split_groups;
  // ROWS_ARE_HEADS (a decoding launch): a sequence's query rem % q_tiles from its last, as
  // attention_decode takes it.
  const uint split = rem / q_tiles;
  const uint i_first = ROWS_ARE_HEADS != 0u ? pc.queries - 1u - rem % q_tiles : (rem % q_tiles) * QUERY_ROWS;
  const uint b = bh / pc.heads, h = bh % pc.heads;
  const uint M = pc.memory_prefix;
  // Packed queries: rows below seq.x are no query of this sequence (they shadow its first and store
  // nothing); a workgroup with none of its own leaves before any barrier, all lanes together, as
  // does one whose sequence the call's decoding launch takes (pc.decoding_queries), and with
  // ROWS_ARE_HEADS (a decoding launch) one whose sequence has more queries than it takes.
  const uvec2 seq = sequence_rows(b);
  const uint seq_queries = pc.queries - seq.x;
  if (ROWS_ARE_HEADS != 0u ? i_first < seq.x || seq_queries > q_tiles
                           : i_first + QUERY_ROWS <= seq.x || seq_queries <= pc.decoding_queries) return;

  // The keys of the workgroup: its split, cut by the batch's length and by the causal bound of its
  // last query (memory keys stay visible). Uniform over the workgroup.
  const uint j_begin = min(split * pc.split_len, pc.keys);
  const uint seq_keys = sequence_keys(b);
  const int q_off = sequence_query_offset(seq_keys);
  uint j_end = min(seq_keys, j_begin + pc.split_len);
  if ((pc.flags & RELPOS_ATTN_CAUSAL) != 0u) {
    const int last_abs = int(min(i_first + QUERY_ROWS, pc.queries) - 1u) + q_off;
    j_end = min(j_end, M + uint(max(last_abs + 1, 0)));
  }
  const uint hk = h / pc.kv_group;
  set_kv_scales(hk);
  const uint kv_word = (b * pc.kv_heads + hk) * pc.kv_stride * D4 - pc.kv_shift;

  // This lane's row: query i of head h_r (rows past the last query, or ROWS_ARE_HEADS past the
  // slab's last head, shadow it and store nothing).
  const uint slab_heads = slab_heads_of(h, SLAB_HEADS);
  const uint rq = ROWS_ARE_HEADS != 0u ? 0u : r, rh = ROWS_ARE_HEADS != 0u ? min(r, slab_heads - 1u) : 0u;
  const uint h_r = h + rh;
  const uint i = clamp(i_first + rq, seq.x, pc.queries - 1u);
  const int i_abs = int(i) + q_off;
  const uint all_keys = row_keys(seq_keys, i_abs);  // the row's, over every split
  const uint row_end = min(j_end, all_keys);
  const int rp_base = -int(M) - i_abs;  // rp = j + rp_base
  const int kk = int(pc.shaw_k);
  const uint last_rel = 2u * pc.shaw_k;
  const float slope = BIAS_MODE == RELPOS_ATTN_ALIBI ? bias[h_r - pc.bias_shift] : 0.0;
  const float near_bias = BIAS_MODE == RELPOS_ATTN_ALIBI ? alibi_near_bias(slope, all_keys, rp_base) : 0.0;
  const uint dense_base = (h_r * pc.queries + i) * pc.keys - pc.bias_shift;
  // RELPOS_ATTN_ROW (row_bias_start): a tile's rows read one window of BR + BC − 1 values of the
  // head's row, from that of the last row. ROWS_ARE_HEADS: the rows are of different heads, so no
  // window is shared; a row reads its own head's row, bias[row_base + j], clamped into the binding
  // as the window is.
  const uint window_base = row_bias_start(h, i_first + BR - 1u, q_off);
  const uint row_base = row_bias_start(h_r, i, q_off);

  // Stage the scaled queries (one barrier, before the tile loop).
  [[unroll]] for (uint t = 0u; t < (BR * D4 + WG_X - 1u) / WG_X; ++t) {
    const uint w = lane + t * WG_X;
    if ((BR * D4) % WG_X == 0u || w < BR * D4) {
      const uint row = w / D4, d = w % D4;
      const uint row_h = ROWS_ARE_HEADS != 0u ? min(row, slab_heads - 1u) : 0u;
      const uint qi = clamp(i_first + (ROWS_ARE_HEADS != 0u ? 0u : row), seq.x, pc.queries - 1u);
      q_tile[row * Q_STRIDE + d] = load_q(query_row(bh + row_h, h + row_h, qi, seq) * D4 + d - pc.q_shift) * pc.scale;
    }
  }
  find_key_words(0u, b, hk, j_begin, j_end);
  if (MASKED_VALUES) [[unroll]] for (uint t = 0u; t < (D4 + WG_X - 1u) / WG_X; ++t)
    if (D4 % WG_X == 0u || lane + t * WG_X < D4) stage_zero(ZERO_ROW + lane + t * WG_X);
  barrier();

  // Shaw's edge buckets take every far key: their q·rel_keys are per row (kept in q_tile's padding,
  // EDGE_DOTS, not in registers through the key loop), their weights rescale with the output.
  float p_lo = 0.0, p_hi = 0.0, w_lo = 0.0, w_hi = 0.0;
  if (BIAS_MODE == RELPOS_ATTN_SHAW) {
    // Not unrolled: a compiler would issue all 2·D4 loads first and hold them in 8·D4 registers.
    [[dont_unroll]] for (uint d0 = 0u; d0 < D4; d0 += 4u) {
      [[unroll]] for (uint e = 0u; e < 4u; ++e) {
        const uint d = d0 + e;
        if (D4 % 4u == 0u || d < D4) {
          p_lo += dot(q_tile[r * Q_STRIDE + d], rel_keys[d]);
          p_hi += dot(q_tile[r * Q_STRIDE + d], rel_keys[last_rel * D4 + d]);
        }
      }
    }
    if (s == 0u) q_tile[r * Q_STRIDE + EDGE_DOTS] = vec4(p_lo, p_hi, 0.0, 0.0);
  }

  float m = NEG_INF, l = 0.0;
  vec4 acc[OWNED];
  [[unroll]] for (uint k = 0u; k < OWNED; ++k) acc[k] = vec4(0.0);

  for (uint j0 = j_begin; j0 < j_end; j0 += BC) {
    const uint buf = PAGED != 0u ? ((j0 - j_begin) / BC) & 1u : 0u;  // key_words' buffer of this tile
    // BLOCK_BASES: the first words of key j0 and, where the tile holds it, of key j_end - 1
    // (tile_key_word), uniform.
    uvec2 tile_words = uvec2(0u);
    if (BLOCK_BASES) {
      const uint base = block_base(b, hk, j0 >> PAGED), mask = (1u << PAGED) - 1u, key_stride = pc.kv_heads * D4;
      tile_words = uvec2(base + (j0 & mask) * key_stride, j_end - j0 <= BC ? base + ((j_end - 1u) & mask) * key_stride : 0xffffffffu);
    }
    // 1. The tile's keys and the bias window, clamped into the binding (only masked scores read
    // past it).
    stage_tile(kv_word, buf, j0, j_end, false, tile_words);
    if (BIAS_MODE == RELPOS_ATTN_ROW && ROWS_ARE_HEADS == 0u) {
      const uint last = uint(bias.length()) - 1u;
      [[unroll]] for (uint t = 0u; t < (WINDOW + WG_X - 1u) / WG_X; ++t) {
        const uint w = lane + t * WG_X;
        if (w < WINDOW) row_tile[w] = bias[min(window_base + j0 + w, last)];
      }
    }
    barrier();  // A

    // 2. Scores of keys s + LPR·t: the dot products in registers (the loop over the head in steps
    // of 4 words), then the bias and the masks through p_tile, where the keys can be indexed.
    // Up to 16 words (head_dim 64) the compilers unroll the loop over the head and that pays; past
    // it an unrolled loop keeps so many loads in flight that Intel's compiler drops to SIMD8 (dg2)
    // and ACO's estimate rises (navi21, navi31: 16–19% at head_dim 128), so it stays a loop there.
    float sc[SCORES];
    [[unroll]] for (uint t = 0u; t < SCORES; ++t) sc[t] = 0.0;
#define RELPOS_ATTN_SCORE_WORDS                                                    \
  [[unroll]] for (uint e = 0u; e < 4u; ++e) {                                      \
    const uint d = d0 + e;                                                         \
    if (D4 % 4u == 0u || d < D4) {                                                 \
      const vec4 qd = q_tile[r * Q_STRIDE + d];                                    \
      [[unroll]] for (uint t = 0u; t < SCORES; ++t) {                              \
        const uint c = BC % LPR == 0u ? s + t * LPR : min(s + t * LPR, BC - 1u);   \
        sc[t] += dot(qd, staged_word(c * KV_STRIDE + d));                          \
      }                                                                            \
    }                                                                              \
  }
    if (D4 <= 16u) {
      for (uint d0 = 0u; d0 < D4; d0 += 4u) { RELPOS_ATTN_SCORE_WORDS }
    } else {
      [[dont_unroll]] for (uint d0 = 0u; d0 < D4; d0 += 4u) { RELPOS_ATTN_SCORE_WORDS }
    }
#undef RELPOS_ATTN_SCORE_WORDS
    // Shaw: the keys near the diagonal (interior buckets) add q·rel_keys[idx], in a pass over the
    // head of their own, taken only by tiles that hold such a key for some row (uniform: the rows'
    // distances to key j lie between j + rp_last and j + rp_first). Per key inside the bias loop
    // below (and the edge products in registers) kept dg2 at SIMD8 at head_dim 128 and took navi21
    // 8–32 VGPRs more.
    if (BIAS_MODE == RELPOS_ATTN_SHAW) {
      const int rp_first = -int(M) - (int(clamp(i_first, seq.x, pc.queries - 1u)) + q_off);
      const int rp_last = -int(M) - (int(clamp(i_first + QUERY_ROWS - 1u, seq.x, pc.queries - 1u)) + q_off);
      if (j0 + BC > M && int(j0 + BC - 1u) + rp_first > -kk && int(j0) + rp_last < kk) {
        uint rel_word[SCORES];
        [[unroll]] for (uint t = 0u; t < SCORES; ++t) {
          const uint j = j0 + (BC % LPR == 0u ? s + t * LPR : min(s + t * LPR, BC - 1u));
          const uint idx = uint(clamp(int(j) + rp_base, -kk, kk) + kk);
          rel_word[t] = j >= M && idx != 0u && idx != last_rel ? idx * D4 : 0xffffffffu;
        }
        [[dont_unroll]] for (uint d0 = 0u; d0 < D4; d0 += 4u) {
          [[unroll]] for (uint e = 0u; e < 4u; ++e) {
            const uint d = d0 + e;
            if (D4 % 4u == 0u || d < D4) {
              const vec4 qd = q_tile[r * Q_STRIDE + d];
              [[unroll]] for (uint t = 0u; t < SCORES; ++t)
                if (rel_word[t] != 0xffffffffu) sc[t] += dot(qd, rel_keys[rel_word[t] + d]);
            }
          }
        }
      }
    }
    [[unroll]] for (uint t = 0u; t < SCORES; ++t)
      if (BC % LPR == 0u || s + t * LPR < BC) p_tile[r * P_STRIDE + s + t * LPR] = sc[t];
    float lane_max = NEG_INF;
    for (uint c = s; c < BC; c += LPR) {
      const uint j = j0 + c;
      float x = p_tile[r * P_STRIDE + c];
      if (j >= M && BIAS_MODE != RELPOS_ATTN_NONE) {
        const int rp = int(j) + rp_base;
        if (BIAS_MODE == RELPOS_ATTN_ROW) {
          x += ROWS_ARE_HEADS != 0u ? bias[min(row_base + j, uint(bias.length()) - 1u)] : row_tile[BR - 1u - r + c];
        } else if (BIAS_MODE == RELPOS_ATTN_DENSE) {
          x += bias[dense_base + min(j, j_end - 1u)];
        } else if (BIAS_MODE == RELPOS_ATTN_ALIBI) {
          x = alibi_score(x, slope, rp, near_bias);
        } else if (BIAS_MODE == RELPOS_ATTN_SHAW) {
          const uint idx = uint(clamp(rp, -kk, kk) + kk);
          if (idx == 0u) x += q_tile[r * Q_STRIDE + EDGE_DOTS].x;
          else if (idx == last_rel) x += q_tile[r * Q_STRIDE + EDGE_DOTS].y;
        }
      }
      x = j < row_end ? x : NEG_INF;
      p_tile[r * P_STRIDE + c] = x;  // only this lane reads it back, in step 3
      lane_max = max(lane_max, x);
    }
    // Uniform control flow: every lane of the workgroup shuffles.
    [[unroll]] for (uint bit = 1u; bit < SHUFFLE_LANES; bit <<= 1) lane_max = max(lane_max, ROW_SHUFFLE_XOR(lane_max, bit));
    if (MAX_PARTS > 1u && s % SHUFFLE_LANES == 0u) row_max[r * MAX_PARTS + s / SHUFFLE_LANES] = lane_max;
    barrier();  // B

    // 3. The row's new maximum (max is exact: every lane of the row agrees on it), the weights, and
    // the tile's values over its keys.
    float tile_max = lane_max;
    if (MAX_PARTS > 1u) [[unroll]] for (uint u = 0u; u < MAX_PARTS; ++u) tile_max = max(tile_max, row_max[r * MAX_PARTS + u]);
    const float m_new = max(m, tile_max);
    // Branch-free rescale: a row whose keys are all masked so far keeps m = -inf and zeros.
    const float alpha = m == NEG_INF ? 0.0 : exp(m - m_new);
    m = m_new;
    for (uint c = s; c < BC; c += LPR) {
      const float x = p_tile[r * P_STRIDE + c];
      p_tile[r * P_STRIDE + c] = x == NEG_INF ? 0.0 : exp(x - m_new);
    }
    stage_tile(kv_word, buf, j0, j_end, true, tile_words);
    barrier();  // C

    // 4. The next tile's key words; rescale, then accumulate this lane's dims of the row (the keys
    // in steps). Every lane of the row sums the row's weights itself, in the same order.
    find_key_words(buf ^ 1u, b, hk, j0 + BC, j_end);
    l *= alpha;
    w_lo *= alpha;
    w_hi *= alpha;
    [[unroll]] for (uint k = 0u; k < OWNED; ++k) acc[k] *= alpha;
    // A loop, not unrolled: unrolled (a 32-key tile) it costs ACO's estimate 11% at head_dim 128
    // (navi21) and keeps dg2 at SIMD8.
    [[dont_unroll]] for (uint c0 = 0u; c0 < BC; c0 += OUT_STEP) {
      [[unroll]] for (uint e = 0u; e < OUT_STEP; ++e) {
        const uint c = c0 + e;
        const float p = p_tile[r * P_STRIDE + c];
        l += p;
        // A key masked for the row (weight exactly 0: a causal row's future key in this tile, a
        // -inf bias) must add nothing, not 0 * v: 0 * NaN and 0 * inf are NaN, and the reference
        // skips masked keys. So it reads the row of zeros instead of its value: one select of an
        // address per key. (A branch per key cost Intel's estimate up to 64% (dg2, bmg); a uniform
        // choice per tile between a guarded and a plain loop doubled it, counting both loops.)
        const uint row_slot = !MASKED_VALUES || p != 0.0 ? c * KV_STRIDE : ZERO_ROW;
        [[unroll]] for (uint k = 0u; k < OWNED; ++k) {
          const uint d = s + k * LPR;
          if (D4 % LPR == 0u || d < D4) acc[k] += p * staged_word(row_slot + d);
        }
        if (BIAS_MODE == RELPOS_ATTN_SHAW && j0 + c >= M && p > 0.0) {
          const uint idx = uint(clamp(int(j0 + c) + rp_base, -kk, kk) + kk);
          if (idx == 0u) w_lo += p;
          else if (idx == last_rel) w_hi += p;
          else [[unroll]] for (uint k = 0u; k < OWNED; ++k) {
            const uint d = s + k * LPR;
            if (D4 % LPR == 0u || d < D4) acc[k] += p * rel_values[idx * D4 + d];
          }
        }
      }
    }
    barrier();  // D
  }

  if (!query_stored(i_first + rq, seq) || split >= pc.splits || (ROWS_ARE_HEADS != 0u && r >= slab_heads)) return;
  const float inv = l == 0.0 ? 0.0 : 1.0 / l;  // masked: zeros and -inf; a NaN input: NaN (attention_fused.glsl)
  const uint row = query_row(bh + rh, h_r, i, seq), out_row = row * pc.part_stride + split;
  const uint out_word = out_row * D4 - pc.out_shift;
  [[unroll]] for (uint k = 0u; k < OWNED; ++k) {
    const uint d = s + k * LPR;
    if (D4 % LPR != 0u && d >= D4) continue;
    vec4 x = acc[k];
    if (BIAS_MODE == RELPOS_ATTN_SHAW) x += w_lo * rel_values[d] + w_hi * rel_values[last_rel * D4 + d];
    x *= inv;
    store_out(out_word + d, x);
  }
  if (s == 0u) store_lse(row, split, m, l, near_bias);
}

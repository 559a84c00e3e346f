// Fused attention's constants and bindings: attention_fused*.comp (the CPU kernel class,
// shaders/include/relpos/attention_fused.glsl), attention_tiled*.comp (the GPU class,
// attention_tiled.glsl) and attention_merge.comp; and the sizes of attention_tiled's shared memory
// and loops, which the host plans its tiles and key splits by.
#ifndef RELPOS_CONTRACT_ATTENTION_H
#define RELPOS_CONTRACT_ATTENTION_H
#include "relpos_contract/common.h"

// Storage of q, out and the merge's parts (IN_HALF, OUT_HALF): float32, float16 or bfloat16.
#define RELPOS_STORE_F32 0u
#define RELPOS_STORE_F16 1u
#define RELPOS_STORE_BF16 2u

// attention_fused: each lane owns ROWS query rows of a key split.
// SHARE_LOADS 1: KEY_BLOCK equals the subgroup size and the subgroup is full; lane u loads key
// j0 + u of the block and the others take it by subgroupShuffle. A CPU device (lavapipe) runs each
// storage buffer load as a loop over its SIMD lanes, so one load per lane and block, instead of one
// per lane and key, divides that cost by the subgroup size; a shuffle there is a register extract.
// BIAS_MODE (RELPOS_ATTN_*, relpos_push/attention.h) is a constant so that only its own code is
// compiled: lavapipe runs both sides of every branch under a lane mask, so a mode chosen at run
// time cost every key the loads of all the others (Shaw's D4 rel_keys loads among them).
// PAGED not 0: k and v are a paged cache (attention_bindings.glsl's key_word says how it is
// addressed: 1 any block size, n >= 4 blocks of 2^n keys).
// ROWS_ARE_HEADS 1: decoding with grouped-query heads, a lane's ROWS rows are the one query of ROWS
// consecutive heads sharing one kv head (ROWS divides heads / kv_heads), so each key and value it
// loads serves all of them; the workgroups of a dispatch then count (batch, head set) slabs.
#define RELPOS_SPEC_ATTENTION_FUSED(X)                                                     \
  X(0, WG_X, size_x, 64u)                                                                  \
  X(1, D4, uint, 16u)        /* head_dim / 4 */                                            \
  X(2, KEY_BLOCK, uint, 8u)  /* keys scored before one softmax rescale */                  \
  X(3, IN_HALF, uint, 0u)    /* q: RELPOS_STORE_* */                                       \
  X(4, OUT_HALF, uint, 0u)   /* out: RELPOS_STORE_* */                                     \
  X(5, ROWS, uint, 1u)       /* query rows per lane, sharing each key and value load */    \
  X(6, SHARE_LOADS, uint, 0u)                                                              \
  X(7, BIAS_MODE, uint, 0u)                                                                \
  X(8, PAGED, uint, 0u)                                                                    \
  X(9, KV_FORMAT, uint, 0u)  /* k and v: a CacheFormat (CACHE_*, relpos/cache_format.glsl) */ \
  X(10, ROWS_ARE_HEADS, uint, 0u) /* 1 (one query): a lane's rows are ROWS heads of one kv head */ \
  X(11, LANE_SPLITS, uint, 0u) /* 1 (decoding a sequence's few queries, several splits): lanes take a row's splits as they come free */ \
  X(12, SHAW_SLOTS, uint, 0u) /* Shaw on a CPU device: local slots for the interior buckets (>= 2k - 1), 0: none */ \
  X(13, BIAS_MAY_MASK, uint, 0u) /* 1: the bias may hold -inf (BiasFamily::may_mask) */ \
  X(14, CAUSAL, uint, 0u) /* 1: causal with several queries (the mask differs between rows; the push flag masks) */

// attention_tiled: a workgroup of WG_X = BR * LPR lanes owns BR query rows; keys are staged BC at
// a time. SHUFFLE_LANES: lanes of a row whose maxima meet by subgroup shuffles, a power of two
// dividing LPR and the subgroup size (1: all through shared memory). PAGED as above, only in the
// shaders that define PAGED_KV 1 (attention_tiled_paged.comp, attention_tiled_shuffle_paged.comp).
// ROWS_ARE_HEADS 1: decoding grouped-query heads that attention_decode cannot hold together, the
// BR rows are the one query of BR consecutive heads of one kv head (BR divides heads / kv_heads),
// so each staged key and value serves all of them; the workgroups then count (batch, head set)
// slabs.
#define RELPOS_SPEC_ATTENTION_TILED(X)                                       \
  X(0, WG_X, size_x, 64u)                                                    \
  X(1, D4, uint, 16u)       /* head_dim / 4 */                               \
  X(2, BC, uint, 32u)       /* keys per tile, a multiple of 4 */             \
  X(3, IN_HALF, uint, 0u)   /* q: RELPOS_STORE_* */                          \
  X(4, OUT_HALF, uint, 0u)  /* out: RELPOS_STORE_* */                        \
  X(5, BR, uint, 16u)       /* query rows per workgroup */                   \
  X(6, BIAS_MODE, uint, 0u) /* RELPOS_ATTN_*: only its own code is compiled */ \
  X(7, SHUFFLE_LANES, uint, 1u)                                              \
  X(8, PAGED, uint, 0u)                                                      \
  X(9, KV_FORMAT, uint, 0u) /* k and v: a CacheFormat (CACHE_*) */          \
  X(10, ROWS_ARE_HEADS, uint, 0u) /* 1 (one query): the rows are BR heads of one kv head */ \
  X(11, BIAS_MAY_MASK, uint, 0u) /* 1: the bias may hold -inf (BiasFamily::may_mask) */ \
  X(12, CAUSAL, uint, 0u) /* 1: causal with several queries (the mask differs between rows; the push flag masks) */

// attention_decode: one query row of HEADS heads (sharing a kv head) per workgroup of WG_X lanes, in WG_X / KG groups of KG lanes
// (a power of two dividing the subgroup) that each score KEYS keys per step, every lane holding
// ceil(D4 / KG) words of the head. PAGED as above, in attention_decode_paged.comp.
#define RELPOS_SPEC_ATTENTION_DECODE(X)                                        \
  X(0, WG_X, size_x, 64u)                                                      \
  X(1, D4, uint, 16u)       /* head_dim / 4 */                                 \
  X(2, KG, uint, 8u)        /* lanes per key */                                \
  X(3, IN_HALF, uint, 0u)   /* q: RELPOS_STORE_* */                            \
  X(4, OUT_HALF, uint, 0u)  /* out: RELPOS_STORE_* */                          \
  X(5, KEYS, uint, 4u)      /* keys per group and step (one rescale) */        \
  X(6, BIAS_MODE, uint, 0u) /* RELPOS_ATTN_*: only its own code is compiled */ \
  X(7, PAGED, uint, 0u)                                                        \
  X(8, KV_FORMAT, uint, 0u) /* k and v: a CacheFormat (CACHE_*) */ \
  X(9, HEADS, uint, 1u)     /* heads of one kv head per workgroup, each key read once for them */ \
  X(10, VALUES_WITH_KEYS, uint, 1u) /* 1: a step's values load with its keys, 0: after its weights */ \
  X(11, BIAS_MAY_MASK, uint, 0u) /* 1: the bias may hold -inf (BiasFamily::may_mask) */

// The same twelve bindings in both kernel classes, so that one host path binds either. Shaw has no
// other bias input: its rel_values take BIAS (one binding fewer for every shader: the runtime binds
// at most kMaxBindings = 12, src/shaders/contracts.hpp). LENGTHS: key_lengths, or a paged cache's
// cache_lengths. QUERY_LENGTHS: packed queries' lengths per sequence (AttentionParams::total_queries).
// KV_SCALES: an fp8 cache's scales, float32 [2, kv_heads] (the keys', then the values').
// WORK: uint32 counters of the items attention_fused's decoding lanes have taken (LANE_SPLITS),
// one for each dispatch of a step (push work_slot; 16, zeroed again after every 16 dispatches);
// the GPU class binds a placeholder.
#define RELPOS_BINDINGS_ATTENTION(X) \
  X(0, Q)                            \
  X(1, K)                            \
  X(2, V)                            \
  X(3, OUT)                          \
  X(4, LSE)                          \
  X(5, BIAS)                         \
  X(6, REL_KEYS)                     \
  X(7, LENGTHS)                      \
  X(8, BLOCK_TABLE)                  \
  X(9, QUERY_LENGTHS)                \
  X(10, KV_SCALES)                   \
  X(11, WORK)

// attention_merge.comp: PART_LANES invocations per 4-element word of the merged output, each
// merging a share of the parts (WG_X / PART_LANES words a workgroup).
#define RELPOS_SPEC_ATTENTION_MERGE(X) \
  X(0, WG_X, size_x, 64u)              \
  X(1, D4, uint, 16u)                  \
  X(2, IN_HALF, uint, 0u)  /* the parts: RELPOS_STORE_* */ \
  X(3, OUT_HALF, uint, 0u) /* out: RELPOS_STORE_* */ \
  X(4, PART_LANES, uint, 1u)          \
  X(5, PART_REFERENCES, uint, 0u) /* each part's lse relative to a reference of its own */ \
  X(6, OUT_RELATIVE, uint, 0u)    /* lse rows of 2: relative to the merged reference, then it */
#define RELPOS_BINDINGS_ATTENTION_MERGE(X) \
  X(0, PARTS)                              \
  X(1, PARTS_LSE)                          \
  X(2, OUT)                                \
  X(3, LSE)

// attention_tiled's shared arrays, in elements, from its constants (LPR = WG_X / BR lanes per row,
// MAX_PARTS = LPR / SHUFFLE_LANES row maxima per row left for shared memory). Rows of the staged
// queries and keys (vec4 words) and of p_tile are padded by one word, so that the LPR keys (or BR
// queries) read at one time fall in different banks.
#define RELPOS_ATTN_TILED_Q_TILE(BR, D4) ((BR) * ((D4) + 1u))  /* vec4: the scaled queries */
// The K/V tile is followed by a row of D4 zeros (what a key masked for a row gives it), rounded to an
// even count so that the 8-byte words of a 16-bit tile end on 16 bytes (RADV read an array after a
// misaligned one 4 bytes at a time).
#define RELPOS_ATTN_TILED_KV_TILE(BC, D4) ((BC) * ((D4) + 1u) + (((D4) + 1u) & ~1u)) /* vec4: the tile's keys, then values */
#define RELPOS_ATTN_TILED_P_TILE(BR, BC) ((BR) * ((BC) + 1u))  /* float: exp(score - running max) */
#define RELPOS_ATTN_TILED_ROW_MAX(BR, MAX_PARTS) ((BR) * (MAX_PARTS))
#define RELPOS_ATTN_TILED_WINDOW(BR, BC) ((BR) + (BC) - 1u)    /* float: the per-distance row's values of a tile */
#define RELPOS_ATTN_TILED_KEY_WORDS(BC) (2u * (BC))            /* uint, paged only: two tiles' key words */
// Paged with blocks of 2^PAGED keys that BC (a power of two) divides, and splits starting on a
// multiple of BC (the host aligns them): a tile's keys lie in one block, whose first word each tile
// finds by one uniform table load; key_words is then 4 words (16 bytes). (No &&: glslang makes a
// specialisation constant's && a branch, outside any function.)
#define RELPOS_ATTN_TILED_BLOCK_BASES(PAGED, BC) \
  (((PAGED) > 1u ? 1u : 0u) * (((BC) & ((BC) - 1u)) == 0u ? 1u : 0u) * ((1u << (PAGED)) >= (BC) ? 1u : 0u) != 0u)
// All of them, in bytes: the K/V tile staged in 16-bit halves (KV_HALF: an f16 or bf16 cache) as
// 8-byte words, else 16; the array of the other form keeps one word, key_words where unused 4.
#define RELPOS_ATTN_TILED_SHARED_BYTES(BR, BC, D4, MAX_PARTS, PAGED_KV, KV_HALF, PAGED)                                \
  (16u * RELPOS_ATTN_TILED_Q_TILE(BR, D4) + ((KV_HALF) ? 8u * RELPOS_ATTN_TILED_KV_TILE(BC, D4) + 16u                   \
                                                       : 16u * RELPOS_ATTN_TILED_KV_TILE(BC, D4) + 8u) +                 \
   4u * (RELPOS_ATTN_TILED_P_TILE(BR, BC) + RELPOS_ATTN_TILED_ROW_MAX(BR, MAX_PARTS) + RELPOS_ATTN_TILED_WINDOW(BR, BC) + \
         ((PAGED_KV) ? (RELPOS_ATTN_TILED_BLOCK_BASES(PAGED, BC) ? 4u : RELPOS_ATTN_TILED_KEY_WORDS(BC)) : 0u)))

// attention_tiled's loops that are not unrolled, per tile: the tile loop itself, the scores' loop
// over the head in steps of 4 words, two of SCORES (the bias, the weights) and the output's BC /
// OUT_STEP; Shaw adds a loop over the head (its keys near the diagonal). The host bounds a split's
// keys by their sum (RELPOS_MAX_LOOP_ITERATIONS).
#define RELPOS_ATTN_TILED_SCORES(BC, LPR) (((BC) + (LPR) - 1u) / (LPR)) /* scores per lane and tile */
// Keys per step of the output loop: Shaw adds a row of rel_values per key, whose loads a compiler
// issues together for all the keys of a step (4 would take 16·OWNED registers).
#define RELPOS_ATTN_TILED_OUT_STEP(SHAW) ((SHAW) ? 1u : 4u)
#define RELPOS_ATTN_TILED_HEAD_STEPS(D4) (((D4) + 3u) / 4u)
#define RELPOS_ATTN_TILED_TILE_ITERATIONS(BC, LPR, D4, SHAW)                                                 \
  (1u + RELPOS_ATTN_TILED_HEAD_STEPS(D4) + 2u * RELPOS_ATTN_TILED_SCORES(BC, LPR) +                           \
   ((SHAW) ? RELPOS_ATTN_TILED_HEAD_STEPS(D4) : 0u) + (BC) / RELPOS_ATTN_TILED_OUT_STEP(SHAW))

// attention_decode's shared memory (the groups' parts, met once after the key loop) and its loop:
// one iteration per GROUPS·KEYS keys.
#define RELPOS_ATTN_DECODE_PART_WORDS(GROUPS, D4) ((GROUPS) * (D4)) /* vec4 */
#define RELPOS_ATTN_DECODE_PART_STATS(GROUPS) (4u * (GROUPS))       /* float: m, l, Shaw's two edge weights */
#define RELPOS_ATTN_DECODE_SHARED_BYTES(GROUPS, D4) (16u * RELPOS_ATTN_DECODE_PART_WORDS(GROUPS, D4) + 4u * RELPOS_ATTN_DECODE_PART_STATS(GROUPS))
#define RELPOS_ATTN_DECODE_STEP_KEYS(GROUPS, KEYS) ((GROUPS) * (KEYS))

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(AttentionFusedSpec, RELPOS_SPEC_ATTENTION_FUSED)
RELPOS_SPEC_STRUCT(AttentionTiledSpec, RELPOS_SPEC_ATTENTION_TILED)
RELPOS_SPEC_STRUCT(AttentionDecodeSpec, RELPOS_SPEC_ATTENTION_DECODE)
RELPOS_BINDINGS_STRUCT(AttentionBindings, RELPOS_BINDINGS_ATTENTION)
RELPOS_SPEC_STRUCT(AttentionMergeSpec, RELPOS_SPEC_ATTENTION_MERGE)
RELPOS_BINDINGS_STRUCT(AttentionMergeBindings, RELPOS_BINDINGS_ATTENTION_MERGE)
#endif

#endif

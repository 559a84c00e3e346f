// Fused attention's constants and bindings: attention_fused*.comp (the CPU kernel class,
// shaders/include/relpos/attention_fused.glsl), attention_tiled*.comp (the GPU class,
// attention_tiled.glsl) and attention_merge.comp.
#ifndef RELPOS_CONTRACT_ATTENTION_H
#define RELPOS_CONTRACT_ATTENTION_H
#include "relpos_contract/common.h"

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
#define RELPOS_SPEC_ATTENTION_FUSED(X)                                                     \
  X(0, WG_X, size_x, 64u)                                                                  \
  X(1, D4, uint, 16u)        /* head_dim / 4 */                                            \
  X(2, KEY_BLOCK, uint, 8u)  /* keys scored before one softmax rescale */                  \
  X(3, IN_HALF, uint, 0u)    /* q, k, v stored as float16 */                               \
  X(4, OUT_HALF, uint, 0u)   /* out stored as float16 */                                   \
  X(5, ROWS, uint, 1u)       /* query rows per lane, sharing each key and value load */    \
  X(6, SHARE_LOADS, uint, 0u)                                                              \
  X(7, BIAS_MODE, uint, 0u)                                                                \
  X(8, PAGED, uint, 0u)

// attention_tiled: a workgroup of WG_X = BR * LPR lanes owns BR query rows; keys are staged BC at
// a time. SHUFFLE_LANES: lanes of a row whose maxima meet by subgroup shuffles, a power of two
// dividing LPR and the subgroup size (1: all through shared memory). PAGED as above, only in the
// shaders that define PAGED_KV 1 (attention_tiled_paged.comp, attention_tiled_shuffle_paged.comp).
#define RELPOS_SPEC_ATTENTION_TILED(X)                                       \
  X(0, WG_X, size_x, 64u)                                                    \
  X(1, D4, uint, 16u)       /* head_dim / 4 */                               \
  X(2, BC, uint, 32u)       /* keys per tile, a multiple of 4 */             \
  X(3, IN_HALF, uint, 0u)   /* q, k, v stored as float16 */                  \
  X(4, OUT_HALF, uint, 0u)  /* out stored as float16 */                      \
  X(5, BR, uint, 16u)       /* query rows per workgroup */                   \
  X(6, BIAS_MODE, uint, 0u) /* RELPOS_ATTN_*: only its own code is compiled */ \
  X(7, SHUFFLE_LANES, uint, 1u)                                              \
  X(8, PAGED, uint, 0u)

// The same nine bindings in both kernel classes, so that one host path binds either. Shaw has no
// other bias input: its rel_values take BIAS (one binding fewer for every shader: the runtime binds
// at most kMaxBindings = 9, src/shaders/contracts.hpp). LENGTHS: key_lengths, or a paged cache's
// cache_lengths.
#define RELPOS_BINDINGS_ATTENTION(X) \
  X(0, Q)                            \
  X(1, K)                            \
  X(2, V)                            \
  X(3, OUT)                          \
  X(4, LSE)                          \
  X(5, BIAS)                         \
  X(6, REL_KEYS)                     \
  X(7, LENGTHS)                      \
  X(8, BLOCK_TABLE)

// attention_merge.comp: one invocation per 4-element word of the merged output.
#define RELPOS_SPEC_ATTENTION_MERGE(X) \
  X(0, WG_X, size_x, 64u)              \
  X(1, D4, uint, 16u)                  \
  X(2, IN_HALF, uint, 0u)              \
  X(3, OUT_HALF, uint, 0u)
#define RELPOS_BINDINGS_ATTENTION_MERGE(X) \
  X(0, PARTS)                              \
  X(1, PARTS_LSE)                          \
  X(2, OUT)                                \
  X(3, LSE)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(AttentionFusedSpec, RELPOS_SPEC_ATTENTION_FUSED)
RELPOS_SPEC_STRUCT(AttentionTiledSpec, RELPOS_SPEC_ATTENTION_TILED)
RELPOS_BINDINGS_STRUCT(AttentionBindings, RELPOS_BINDINGS_ATTENTION)
RELPOS_SPEC_STRUCT(AttentionMergeSpec, RELPOS_SPEC_ATTENTION_MERGE)
RELPOS_BINDINGS_STRUCT(AttentionMergeBindings, RELPOS_BINDINGS_ATTENTION_MERGE)
#endif

#endif

// kv_append.comp: a step's keys and values into a paged KV cache in any cache format, the keys (and
// the step's queries, in place) rotated by RoPE on the way. GPTJ 1: pairs (2p, 2p + 1); else NeoX
// (p, p + rotary_dim / 2). F16: k, v and q are float16 (else float32). FORMAT: the caches'
// (cache_format.glsl's CACHE_*). RAGGED: each sequence's count from NEW_TOKENS, rows packed
// token-major. ADVANCE: the second dispatch, cache_lengths[b] += the count, saturating at
// INT32_MAX.
#ifndef RELPOS_CONTRACT_KV_APPEND_H
#define RELPOS_CONTRACT_KV_APPEND_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_KV_APPEND(X) \
  X(0, WG_X, size_x, 64u)        \
  X(1, F16, uint, 0u)            \
  X(2, ROPE, uint, 0u)           \
  X(3, GPTJ, uint, 0u)           \
  X(4, FORMAT, uint, 0u)         \
  X(5, RAGGED, uint, 0u)         \
  X(6, ADVANCE, uint, 0u)
#define RELPOS_BINDINGS_KV_APPEND(X) \
  X(0, K_CACHE)                      \
  X(1, V_CACHE)                      \
  X(2, K)                            \
  X(3, V)                            \
  X(4, BLOCK_TABLE)                  \
  X(5, CACHE_LENGTHS)                \
  X(6, Q)                            \
  X(7, CONSTANTS)                    \
  X(8, NEW_TOKENS)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(KvAppendSpec, RELPOS_SPEC_KV_APPEND)
RELPOS_BINDINGS_STRUCT(KvAppendBindings, RELPOS_BINDINGS_KV_APPEND)
#endif

#endif

// kv_cache_decode.comp: cache rows in a cache format (cache_format.glsl) to float32, four values
// an invocation (PAIRS: two, as decode2 reads them, for head_dim % 4 == 2).
#ifndef RELPOS_CONTRACT_KV_CACHE_DECODE_H
#define RELPOS_CONTRACT_KV_CACHE_DECODE_H
#include "relpos_contract/common.h"

#define RELPOS_SPEC_KV_CACHE_DECODE(X) \
  X(0, WG_X, size_x, 64u)              \
  X(1, FORMAT, uint, 0u)               \
  X(2, PAIRS, uint, 0u)
#define RELPOS_BINDINGS_KV_CACHE_DECODE(X) \
  X(0, CACHE)                              \
  X(1, SCALES)                             \
  X(2, OUT)

#ifdef __cplusplus
RELPOS_SPEC_STRUCT(KvCacheDecodeSpec, RELPOS_SPEC_KV_CACHE_DECODE)
RELPOS_BINDINGS_STRUCT(KvCacheDecodeBindings, RELPOS_BINDINGS_KV_CACHE_DECODE)
#endif

#endif

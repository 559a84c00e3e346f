// kv_cache_decode.comp: invocation first + x decodes values [u * width, u * width + width) of row
// u / units_per_row (width 4, or 2 with PAIRS), the row's scale SCALES[row % kv_heads] (fp8).
#ifndef RELPOS_PUSH_KV_CACHE_DECODE_H
#define RELPOS_PUSH_KV_CACHE_DECODE_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(KvCacheDecodePush) {
  uint first;
  uint units;          // rows * units_per_row
  uint units_per_row;
  uint head_dim;
  uint kv_heads;
}
RELPOS_PUSH_END(KvCacheDecodePush)

#endif

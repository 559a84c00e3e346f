// kv_append.comp: one invocation per row of head_dim values. Rows [0, kv_rows) are the new keys
// and values, row = (b * kv_heads + hk) * tokens + t; rows [kv_rows, kv_rows + q_rows) the queries,
// (b * heads + h) * tokens + t. Every row's position is cache_lengths[b] + t.
#ifndef RELPOS_PUSH_KV_APPEND_H
#define RELPOS_PUSH_KV_APPEND_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(KvAppendPush) {
  uint first_row;   // of this dispatch
  uint kv_rows;
  uint q_rows;      // 0: no queries
  uint heads;
  uint kv_heads;
  uint tokens;
  uint head_dim;    // values per row (even)
  uint half_rot;    // rotary_dim / 2: pairs that rotate
  uint block_size;
  uint num_blocks;
  uint max_blocks;
  float scale;      // cos and sin multiplier (YaRN's attention factor; 1 otherwise)
}
RELPOS_PUSH_END(KvAppendPush)

#endif

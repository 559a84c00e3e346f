// kv_append.comp: workgroup row y is sequence first_sequence + y; invocation x (from first_row) one row of that
// sequence's n new tokens: rows [0, kv_heads * n) the keys and values of kv head r / n, token r % n;
// then, with queries, heads * n rows of the queries. A row's position is cache_lengths[b] + t (or - n + t); its
// input row (b * heads_of_x + h) * tokens + t, or ragged (cu[b] + t) * heads_of_x + h.
// The ADVANCE dispatch: invocation x is sequence first_sequence + x.
#ifndef RELPOS_PUSH_KV_APPEND_H
#define RELPOS_PUSH_KV_APPEND_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(KvAppendPush) {
  uint first_row;   // of this dispatch, within each sequence
  uint with_q;      // 1: the queries' rows follow
  uint batch;
  uint heads;
  uint kv_heads;
  uint tokens;      // each sequence's count (ragged: the most; a count outside [0, tokens] is 0)
  uint packed_rows; // ragged: input rows; rows at or past it are not read
  uint head_dim;    // values per row (even)
  uint half_rot;    // rotary_dim / 2: pairs that rotate
  uint block_size;
  uint num_blocks;
  uint max_blocks;
  uint scales_at;   // CONSTANTS[scales_at + h]: 1 / k scale of kv head h, then kv_heads of 1 / v scale
  float scale;      // cos and sin multiplier (YaRN's attention factor; 1 otherwise)
  uint lengths_include_new;  // 1: a row's position is cache_lengths[b] - n + t
  uint first_sequence;  // of this dispatch: batches past maxComputeWorkGroupCount take several
}
RELPOS_PUSH_END(KvAppendPush)

#endif

#ifndef RELPOS_PUSH_SOFTMAX_H
#define RELPOS_PUSH_SOFTMAX_H
#include "relpos_push/common.h"

// masked_softmax.comp: one invocation per (row, chunk) of f32 [B, H, Q, K] logits, in place.
RELPOS_PUSH_BEGIN(SoftmaxPush) {
  uint rows;          // rows of this dispatch
  uint row0;          // global row of the first one
  uint queries;
  uint keys;
  uint heads;
  uint causal;        // 1: key j masked when j > i + query_offset
  int query_offset;
  uint has_lengths;   // 1: key j masked when j >= key_lengths[b]
  uint base;          // logits window: element of the first row
  uint chunk_len;     // keys per chunk (a multiple of 4 when there are several)
  uint chunks;        // chunks per row
}
RELPOS_PUSH_END(SoftmaxPush)

#endif

// alibi_distance_row.comp: the ALiBi bias of every head at each relative position
// rp = r + rp_first, r in [0, row_len), written as rows [heads, row_len] of float32.
#ifndef RELPOS_PUSH_ALIBI_H
#define RELPOS_PUSH_ALIBI_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(AlibiRowPush) {
  uint row_len;   // Q + K - 1
  uint first;     // first r of this dispatch
  int rp_first;   // relative position of r = 0: -(Q - 1) - query_offset
  uint first_head; // this dispatch writes the heads [first_head, first_head + head_count)
  uint head_count;
  uint causal;    // 1: -inf for rp > 0 and -m * (-rp) otherwise; 0: -m * |rp|
}
RELPOS_PUSH_END(AlibiRowPush)

#endif

// The push fields every per-distance bias row shader starts with (shaders/include/relpos/
// distance_row.glsl): a dispatch writes rows [heads, row_len] at the relative positions
// rp = rp_first + r, r in [first, row_len), for the heads [first_head, first_head + head_count).
#ifndef RELPOS_PUSH_DISTANCE_ROW_H
#define RELPOS_PUSH_DISTANCE_ROW_H
#include "relpos_push/common.h"

#define RELPOS_DISTANCE_ROW_FIELDS                                      \
  uint row_len;    /* Q + K - 1 */                                      \
  uint first;      /* first r of this dispatch */                       \
  int rp_first;    /* relative position of r = 0: -(Q - 1) - offset */  \
  uint first_head;                                                      \
  uint head_count;                                                      \
  uint causal;     /* 1: -inf for rp > 0 */

#endif

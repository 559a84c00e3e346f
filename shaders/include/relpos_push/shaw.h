// Shaw relative keys and values: idx(i, j) = clamp(j - (i + query_offset), -k, k) + k, with
// i = (row0 + local row) % queries for rows (b, h, i) of [B, H, Q, *] tensors.
#ifndef RELPOS_PUSH_SHAW_H
#define RELPOS_PUSH_SHAW_H
#include "relpos_push/common.h"

// shaw_gather_add.comp: logits[row, j] += P[row, idx(i, j)]; shaw_buckets.comp: S[row, r] =
// Σ_{j: idx(i, j) = r} weights[row, j].
RELPOS_PUSH_BEGIN(ShawRowsPush) {
  uint rows;         // rows of this dispatch
  uint row0;         // global row of the first one
  uint queries;
  uint keys;
  int query_offset;
  int max_rel;       // k
  uint x_base;       // logits / weights window: element of the first row
  uint t_base;       // P / S window: element of the first row
  uint first_quad;   // shaw_gather_add: first quad of columns of this dispatch
  // Long rows are cut into parts, so that no invocation's loops outgrow the loop bound
  // (relpos_push/loop_bound.h); one invocation per (row, part).
  uint parts;        // parts per row: band quads (gather), keys (bucket partial sums) or buckets (bucket finish)
  uint part_len;     // quads, keys or buckets per part
  uint key_parts;    // shaw_buckets' finishing pass: partial sums per row
}
RELPOS_PUSH_END(ShawRowsPush)

#endif

// attention_merge.comp: one invocation per 4-element word (row * D/4 + d4) of the merged output.
// Part n of row r starts at word n * part_stride + r * row_stride of the partial outputs, its lse
// at n * lse_part_stride + r * lse_row_stride. With `reference` the parts' lse are relative to a
// value a row held as its part `parts` (fused attention's ALiBi parts, attention_bindings.glsl's
// lse_relative), which the merged lse subtracts. *_shift: the aligned binding offset in the
// units of the binding, as in attention.h.
#ifndef RELPOS_PUSH_ATTENTION_MERGE_H
#define RELPOS_PUSH_ATTENTION_MERGE_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(AttentionMergePush) {
  uint first;        // first word (row * D/4 + d4) of this dispatch
  uint end;          // one past the last word of this chunk
  uint parts;
  uint part_stride;  // words between parts of one row
  uint row_stride;   // words between rows of one part
  uint in_shift;     // in words
  uint lse_part_stride;
  uint lse_row_stride;
  uint lse_shift;    // in floats
  uint out_shift;    // in words
  uint lse_out_shift;
  uint reference;
}
RELPOS_PUSH_END(AttentionMergePush)

#endif

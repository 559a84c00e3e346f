// attention_merge.comp: one invocation per 4-element word (row * D/4 + d4) of the merged output.
// Part n of row r starts at word n * part_stride + r * row_stride of the partial outputs, its lse
// at n * lse_part_stride + r * lse_row_stride. With `reference` the parts' lse are relative to a
// reference (attention_bindings.glsl's lse_relative: ALiBi's near bias), part n's of row r at
// n * reference_part_stride + r * lse_row_stride + reference_at: one a row for all its parts (the
// splits of one call: reference_part_stride 0), or each part's own (PART_REFERENCES: calls over
// different keys, ring attention's blocks). The merged lse subtracts the reference, or with
// OUT_RELATIVE keeps relative to it and writes it after (rows of 2 floats), for a later merge.
// (Both specialisation constants: as push fields they cost the decoding step's merge 40
// instructions on navi21.)
// *_shift: the aligned binding offset in the units of the binding, as in attention.h.
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
  uint reference_at;           // floats from a row's first lse to its reference
  uint reference_part_stride;  // floats between two parts' references (0: one a row)
}
RELPOS_PUSH_END(AttentionMergePush)

#endif

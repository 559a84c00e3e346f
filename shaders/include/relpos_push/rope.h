// rope.comp: rotate (or copy) rows of head_dim features. A dispatch covers a rectangle of
// p x l rows, where (p, l) is (b * seq + s, h) for [B, S, H, D] and (s, b * heads + h) for
// [B, H, S, D]: every invocation takes one unit of a row at one p and loops over its block of l,
// so the angles of a position are computed once and applied to every head of it.
#ifndef RELPOS_PUSH_ROPE_H
#define RELPOS_PUSH_ROPE_H
#include "relpos_push/common.h"

RELPOS_PUSH_BEGIN(RopePush) {
  uint units;            // rotating units per row: QUAD: rot_dim / 8 (four pairs each); scalar: 1 (the whole row)
  uint tail_units;       // QUAD, out of place: pass-through quads per row, (head_dim - rot_dim) / 4; else 0
  uint half_dim;         // rot_dim / 2: pairs per row
  uint head_dim;         // elements per row
  uint rot_dim;
  uint p_first;          // global p of this dispatch's first row
  uint p_count;
  uint p_stride;         // elements between rows of consecutive p
  uint l_first;          // global l of this dispatch's first row
  uint l_count;
  uint l_stride;         // elements between rows of consecutive l
  uint l_per_invocation; // l's each invocation loops over (grid z counts the blocks)
  uint base;             // element of row (p_first, l_first) in the bound ranges
  uint p_mod;            // position index from p: p % p_mod (0: p itself)
  uint l_div;            // with positions: b = l / l_div adds b * l_mul to the index (0: l plays no part)
  uint l_mul;
  int position_offset;   // without positions: position = position_offset + index
  uint use_positions;    // 1: position = positions[index]
  float scale;           // cos and sin multiplier: the attention factor, or its inverse
  float sin_sign;        // -1 for the inverse rotation
}
RELPOS_PUSH_END(RopePush)

#endif

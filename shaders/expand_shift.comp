#version 450
// VEC copies of each per-distance row, shifted by 0..VEC-1 elements, so that the window of any
// output row starts on a whole 16-byte vector in one of them: shifted[h][s][x] = row[h][x + s].
// With HALF the copies hold float16 (rounded here, once per distance, not once per output element).
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/expand.h"
#include "relpos_push/expand.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_EXPAND_SHIFT)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_EXPAND_SHIFT)

layout(std430, binding = BINDING_ROWS) readonly buffer Rows { uint row[]; };
layout(std430, binding = BINDING_SHIFTED) writeonly buffer Shifted { uint shifted[]; };

uint value(uint h, uint s, uint x) {
  return x + s < pc.row_len ? row[h * pc.row_len + x + s] : 0u;
}

void main() {
  // One 32-bit word of output per invocation: one value, or two halves.
  uint w = pc.first_row + gl_GlobalInvocationID.x;
  if (w >= pc.count) return;
  uint e = HALF != 0u ? 2u * w : w;
  uint copy = e / pc.shifted_len, x = e % pc.shifted_len;
  uint h = copy / VEC, s = copy % VEC;
  if (HALF != 0u) {
    shifted[w] = packHalf2x16(vec2(uintBitsToFloat(value(h, s, x)), uintBitsToFloat(value(h, s, x + 1u))));
  } else {
    shifted[w] = value(h, s, x);
  }
}

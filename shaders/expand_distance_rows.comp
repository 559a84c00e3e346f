#version 450
// The per-distance expansion when every output row is a whole number of quads (keys % 4 == 0):
// workgroup y is one output row. The row's window starts at w = Q - 1 - i; in the copy shifted by
// s = w % 4 it starts on a whole quad, so each output quad is one aligned 16-byte (or, for f16
// output, 8-byte) load and one store: a copy kernel whose source stays in cache.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/expand.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint QUADS = 4;

layout(std430, binding = 0) readonly buffer Shifted4 { uvec4 src4[]; };  // 32-bit copies
layout(std430, binding = 0) readonly buffer Shifted2 { uvec2 src2[]; };  // f16 copies (WRITE_F16)
#include "relpos/expand_store.glsl"

void main() {
  uint r = pc.first_row + gl_WorkGroupID.y;
  uint i = r % pc.queries;
  uint h = (r / pc.queries) % pc.heads;
  uint w = pc.queries - 1u - i;
  uint s = w & 3u;
  uint src_quad = ((h * 4u + s) * pc.shifted_len + (w - s)) >> 2;
  uint quads_per_row = pc.keys >> 2;
  uint out_base = gl_WorkGroupID.y * quads_per_row;
  uint base = gl_WorkGroupID.x * gl_WorkGroupSize.x * QUADS + gl_LocalInvocationID.x;
  for (uint k = 0; k < QUADS; ++k) {
    uint jq = base + k * gl_WorkGroupSize.x;
    if (jq >= quads_per_row) return;
    if (MODE == WRITE_F16) {
      out2[out_base + jq] = src2[src_quad + jq];
    } else {
      store_quad(out_base + jq, src4[src_quad + jq]);
    }
  }
}

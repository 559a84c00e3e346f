#version 450
// logits[row, j] (+)= P[row, idx(i, j)]: Shaw's relative-key term from P = scale·q·rel_keysᵀ. Each
// invocation adds QUADS quads of four columns of one row (gl_WorkGroupID.y), workgroup-strided so
// neighbouring invocations touch neighbouring quads. Beyond ±k a whole quad takes one edge value
// of P (most of a long row), so it is one load broadcast instead of four clamped ones.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/shaw.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool VEC4 = false;  // keys and x_base are multiples of 4
layout(constant_id = 2) const uint QUADS = 4;
layout(constant_id = 3) const bool ADD = true;  // false: write the term instead of adding it

layout(std430, binding = 0) buffer Logits { float logits[]; };
layout(std430, binding = 0) buffer Logits4 { vec4 logits4[]; };
layout(std430, binding = 1) readonly buffer P { float p[]; };

// lo and hi are P's edge values of the row (idx 0 and 2k), loaded once per invocation.
vec4 term(uint t, int rp, float lo, float hi) {
  int k = pc.max_rel;
  if (rp >= k) return vec4(hi);
  if (rp + 3 <= -k) return vec4(lo);
  return vec4(p[t + clamp(rp, -k, k)], p[t + clamp(rp + 1, -k, k)], p[t + clamp(rp + 2, -k, k)], p[t + clamp(rp + 3, -k, k)]);
}

void main() {
  uint row = gl_WorkGroupID.y;
  if (row >= pc.rows) return;
  int i_abs = int((pc.row0 + row) % pc.queries) + pc.query_offset;
  uint x = pc.x_base + row * pc.keys;
  uint t = pc.t_base + row * uint(2 * pc.max_rel + 1) + uint(pc.max_rel);
  float lo = p[t - uint(pc.max_rel)], hi = p[t + uint(pc.max_rel)];
  uint first = pc.first_quad + gl_WorkGroupID.x * gl_WorkGroupSize.x * QUADS + gl_LocalInvocationID.x;
  for (uint n = 0; n < QUADS; ++n) {
    uint j0 = (first + n * gl_WorkGroupSize.x) * 4u;
    if (j0 >= pc.keys) return;
    vec4 add = term(t, int(j0) - i_abs, lo, hi);
    if (VEC4) {
      logits4[(x + j0) >> 2] = ADD ? logits4[(x + j0) >> 2] + add : add;
    } else {
      for (uint l = 0; l < 4u && j0 + l < pc.keys; ++l) logits[x + j0 + l] = ADD ? logits[x + j0 + l] + add[l] : add[l];
    }
  }
}

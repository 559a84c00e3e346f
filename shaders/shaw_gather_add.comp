#version 450
// logits[row, j] += P[row, idx(i, j)]: Shaw's relative-key term from P = scale·q·rel_keysᵀ. One
// invocation per quad of columns of one row (gl_WorkGroupID.y); the row's query index is taken
// once per invocation, never per element.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/shaw.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool VEC4 = false;  // keys and x_base are multiples of 4

layout(std430, binding = 0) buffer Logits { float logits[]; };
layout(std430, binding = 0) buffer Logits4 { vec4 logits4[]; };
layout(std430, binding = 1) readonly buffer P { float p[]; };

void main() {
  uint row = gl_WorkGroupID.y;
  uint j0 = (pc.first_quad + gl_GlobalInvocationID.x) * 4u;
  if (row >= pc.rows || j0 >= pc.keys) return;
  int i_abs = int((pc.row0 + row) % pc.queries) + pc.query_offset;
  uint x = pc.x_base + row * pc.keys + j0;
  uint t = pc.t_base + row * uint(2 * pc.max_rel + 1) + uint(pc.max_rel);
  int rp = int(j0) - i_abs;
  if (VEC4) {
    vec4 add = vec4(p[t + clamp(rp, -pc.max_rel, pc.max_rel)], p[t + clamp(rp + 1, -pc.max_rel, pc.max_rel)],
                    p[t + clamp(rp + 2, -pc.max_rel, pc.max_rel)], p[t + clamp(rp + 3, -pc.max_rel, pc.max_rel)]);
    logits4[x >> 2] += add;
    return;
  }
  for (uint l = 0; l < 4u && j0 + l < pc.keys; ++l) logits[x + l] += p[t + clamp(rp + int(l), -pc.max_rel, pc.max_rel)];
}

#version 450
// meliad's sinusoidal encoding [N, d]: row k holds cos(π·pos/w_p) for p < d/2, then sin of the
// same angles, pos = pos0 + k. One element per invocation over a flat chunk of the output.
#extension GL_GOOGLE_include_directive : require
#define RELPOS_FOURIER_SINUSOIDAL
#include "relpos_push/fourier.h"
#include "relpos/fourier_phase.glsl"

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Steps { uvec2 steps[]; };  // [d/2] phase steps
layout(std430, binding = 1) writeonly buffer Out { float enc[]; };     // this chunk of [N, d]

void main() {
  uint e = gl_GlobalInvocationID.x;
  if (e >= pc.count) return;
  uint flat_index = pc.first + e;
  uint k = flat_index / pc.dim, c = flat_index % pc.dim;
  uint half_dim = pc.dim / 2u;
  vec2 cs = cos_sin_of_position(pc.pos0 + int(k), steps[c % half_dim]);
  enc[e] = c < half_dim ? cs.x : cs.y;
}

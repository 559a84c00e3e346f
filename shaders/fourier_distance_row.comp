#version 450
// The Fourier bias of every relative position rp = rp_first + r, r < row_len, for every head:
// row[h][r] = Σ_p a[h,p]·cos(π·rp/w_p) + b[h,p]·sin(π·rp/w_p). Each invocation takes four
// consecutive r (so each rotation value it loads serves four distances) and up to HEADS_PER_PASS
// heads at a time in registers (so each cos/sin pair serves all of them).
#extension GL_GOOGLE_include_directive : require
#define RELPOS_FOURIER_ROW
#include "relpos_push/fourier.h"
#include "relpos/fourier_phase.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HEADS_PER_PASS = 8;

layout(std430, binding = 0) readonly buffer Steps { uvec2 steps[]; };      // [d/2]
layout(std430, binding = 1) readonly buffer Rotation { float rot[]; };     // [heads, d] = [a | b]
layout(std430, binding = 2) writeonly buffer Rows { float row[]; };        // [heads, row_len]

void main() {
  uint r0 = pc.first + 4u * gl_GlobalInvocationID.x;
  if (r0 >= pc.row_len) return;
  uint valid = min(4u, pc.row_len - r0);
  int rp0 = pc.rp_first + int(r0);  // rp0 + 3 may pass the last rp; those lanes are not stored
  uint half_dim = pc.dim / 2u;
  for (uint h0 = 0u; h0 < pc.heads; h0 += HEADS_PER_PASS) {
    uint n = min(HEADS_PER_PASS, pc.heads - h0);
    vec4 acc[HEADS_PER_PASS];
    for (uint k = 0u; k < HEADS_PER_PASS; ++k) acc[k] = vec4(0.0);
    for (uint p = 0u; p < half_dim; ++p) {
      uvec2 step = steps[p];
      vec2 cs0 = cos_sin_of_position(rp0, step), cs1 = cos_sin_of_position(rp0 + 1, step);
      vec2 cs2 = cos_sin_of_position(rp0 + 2, step), cs3 = cos_sin_of_position(rp0 + 3, step);
      vec4 c = vec4(cs0.x, cs1.x, cs2.x, cs3.x), s = vec4(cs0.y, cs1.y, cs2.y, cs3.y);
      for (uint k = 0u; k < HEADS_PER_PASS; ++k) {
        if (k < n) {
          uint base = (h0 + k) * pc.dim + p;
          acc[k] += rot[base] * c + rot[base + half_dim] * s;
        }
      }
    }
    for (uint k = 0u; k < n; ++k)
      for (uint i = 0u; i < valid; ++i) row[(h0 + k) * pc.row_len + r0 + i] = acc[k][i];
  }
}

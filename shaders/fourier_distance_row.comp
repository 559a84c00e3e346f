#version 450
// The Fourier bias of every relative position rp = rp_first + r, r < row_len, for every head:
// row[h][r] = Σ_p a[h,p]·cos(π·rp/w_p) + b[h,p]·sin(π·rp/w_p). One invocation per r; each cos/sin
// pair serves HEADS_PER_PASS heads held in registers.
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
  uint r = pc.first + gl_GlobalInvocationID.x;
  if (r >= pc.row_len) return;
  int rp = pc.rp_first + int(r);
  uint half_dim = pc.dim / 2u;
  for (uint h0 = 0u; h0 < pc.heads; h0 += HEADS_PER_PASS) {
    uint n = min(HEADS_PER_PASS, pc.heads - h0);
    float acc[HEADS_PER_PASS];
    for (uint k = 0u; k < HEADS_PER_PASS; ++k) acc[k] = 0.0;
    for (uint p = 0u; p < half_dim; ++p) {
      vec2 cs = cos_sin_of_position(rp, steps[p]);
      for (uint k = 0u; k < HEADS_PER_PASS; ++k) {
        if (k < n) {
          uint base = (h0 + k) * pc.dim + p;
          acc[k] += rot[base] * cs.x + rot[base + half_dim] * cs.y;
        }
      }
    }
    for (uint k = 0u; k < n; ++k) row[(h0 + k) * pc.row_len + r] = acc[k];
  }
}

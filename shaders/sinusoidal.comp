#version 450
// meliad's sinusoidal encoding [N, d]: row k holds cos(π·pos/w_p) for p < d/2, then sin of the
// same angles, pos = pos0 + k.
// PAIRED (d % 8 == 0): each invocation takes four consecutive wavelengths of one row and stores
// their cos and sin quads with one 16-byte store each; the chunk is whole rows.
// Otherwise: one element per invocation over a flat chunk of the output.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define RELPOS_FOURIER_SINUSOIDAL
#include "relpos_contract/fourier.h"
#include "relpos_push/fourier.h"
#include "relpos/fourier_phase.glsl"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_SINUSOIDAL)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_SINUSOIDAL)

layout(std430, binding = BINDING_STEPS) readonly buffer Steps { uvec2 steps[]; };  // [d/2] phase steps
layout(std430, binding = BINDING_OUT) writeonly buffer Out { float enc[]; };       // this chunk of [N, d]
layout(std430, binding = BINDING_OUT) writeonly buffer Out4 { vec4 enc4[]; };

void main() {
  uint t = pc.first_task + gl_GlobalInvocationID.x;
  if (t >= pc.count) return;
  uint half_dim = pc.dim / 2u;
  if (PAIRED != 0u) {
    uint quads = half_dim / 4u;  // per half row
    uint k = t / quads, m = t % quads;
    int pos = pc.pos0 + int(pc.first + k);
    vec4 c, s;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      vec2 cs = cos_sin_of_position(pos, steps[4u * m + i]);
      c[i] = cs.x;
      s[i] = cs.y;
    }
    uint row4 = k * (pc.dim / 4u);
    enc4[row4 + m] = c;
    enc4[row4 + quads + m] = s;
    return;
  }
  uint flat_index = pc.first + t;
  uint k = flat_index / pc.dim, col = flat_index % pc.dim;
  vec2 cs = cos_sin_of_position(pc.pos0 + int(k), steps[col % half_dim]);
  enc[t] = col < half_dim ? cs.x : cs.y;
}

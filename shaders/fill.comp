#version 450
// The device's write ceiling: stores a 32-bit pattern with one vec4 store per 16 bytes, QUADS per
// invocation, workgroup-strided so neighbouring invocations write neighbouring words.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/fill.h"
#include "relpos_push/fill.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_FILL)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_FILL)

layout(std430, binding = BINDING_OUT) writeonly buffer Out { uvec4 out4[]; };

void main() {
  uint base = gl_WorkGroupID.x * gl_WorkGroupSize.x * QUADS + gl_LocalInvocationID.x;
  for (uint k = 0; k < QUADS; ++k) {
    uint q = base + k * gl_WorkGroupSize.x;
    if (q < pc.quads) out4[q] = uvec4(pc.value);
  }
}

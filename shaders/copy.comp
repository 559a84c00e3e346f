#version 450
// The device's copy ceiling: one 16-byte load and one 16-byte store per quad.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/fill.h"
#include "relpos_push/fill.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_FILL)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_COPY)

layout(std430, binding = BINDING_SRC) readonly buffer Src { uvec4 src4[]; };
layout(std430, binding = BINDING_DST) writeonly buffer Dst { uvec4 dst4[]; };

void main() {
  uint base = gl_WorkGroupID.x * gl_WorkGroupSize.x * QUADS + gl_LocalInvocationID.x;
  for (uint k = 0; k < QUADS; ++k) {
    uint q = base + k * gl_WorkGroupSize.x;
    if (q < pc.quads) dst4[q] = src4[q];
  }
}

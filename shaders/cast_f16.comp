#version 450
// f32 -> f16. Each invocation owns one 32-bit word of the output (two halves), so neighbouring
// invocations never write the same word; halves of the word outside [out_base, out_base + count)
// are kept.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/cast.h"
#include "relpos_push/cast.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_CAST_F16)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_CAST_F16)

layout(std430, binding = BINDING_IN_F32) readonly buffer In { float src[]; };
layout(std430, binding = BINDING_OUT_F16) buffer Out { uint dst[]; };

void main() {
  uint word = (pc.out_base >> 1) + gl_GlobalInvocationID.x;
  uint end = pc.out_base + pc.count;
  if (2u * word >= end) return;
  uint old = dst[word];
  vec2 v = unpackHalf2x16(old);
  for (uint lane = 0; lane < 2u; ++lane) {
    uint e = 2u * word + lane;
    if (e < pc.out_base || e >= end) continue;
    float f = src[pc.in_base + e - pc.out_base];
    v[lane] = ADD ? v[lane] + f : f;
  }
  uint h = packHalf2x16(v);
  // Halves outside the range keep their exact bits (a NaN payload survives).
  uint keep = (2u * word < pc.out_base ? 0xffffu : 0u) | (2u * word + 1u >= end ? 0xffff0000u : 0u);
  dst[word] = (old & keep) | (h & ~keep);
}

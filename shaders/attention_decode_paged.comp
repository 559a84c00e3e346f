#version 450
// attention_decode.comp over a paged KV cache (PAGED must not be 0).
#extension GL_GOOGLE_include_directive : require
#define PAGED_KV 1
#define LANE (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID)
#include "relpos/attention_decode.glsl"

#version 450
// attention_tiled.comp over a paged KV cache (PAGED must not be 0).
#extension GL_GOOGLE_include_directive : require
#define PAGED_KV 1
#define LANE gl_LocalInvocationID.x
#define ROW_SHUFFLE_XOR(x, m) (x)
#include "relpos/attention_tiled.glsl"

#version 450
// Fused attention for GPUs (shaders/include/relpos/attention_tiled.glsl), for devices without
// subgroup shuffles: SHUFFLE_LANES must be 1.
#extension GL_GOOGLE_include_directive : require
#define PAGED_KV 0
#define LANE gl_LocalInvocationID.x
#define ROW_SHUFFLE_XOR(x, m) (x)
#include "relpos/attention_tiled.glsl"

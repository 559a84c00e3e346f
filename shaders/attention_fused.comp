#version 450
// Fused attention with a relative position bias (shaders/include/relpos/attention_fused.glsl),
// for devices without subgroup shuffles: SHARE_LOADS must be 0.
#extension GL_GOOGLE_include_directive : require
#define SHARED_LOAD(value, lane) (value)
#define LANE_IN_SUBGROUP 0u
#define LANE gl_LocalInvocationID.x
#include "relpos/attention_fused.glsl"

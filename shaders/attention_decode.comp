#version 450
// Fused attention for GPUs when decoding (shaders/include/relpos/attention_decode.glsl). The
// workgroup is a whole number of subgroups (the host checks), so LANE numbers every lane once and
// a group of KG lanes lies within one subgroup.
#extension GL_GOOGLE_include_directive : require
#define PAGED_KV 0
#define LANE (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID)
#include "relpos/attention_decode.glsl"

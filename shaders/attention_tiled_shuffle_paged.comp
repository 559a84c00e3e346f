#version 450
// attention_tiled_shuffle.comp over a paged KV cache (PAGED must not be 0).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define PAGED_KV 1
#define LANE (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID)
#define ROW_SHUFFLE_XOR(x, m) subgroupShuffleXor(x, m)
#include "relpos/attention_tiled.glsl"

#version 450
// Fused attention for GPUs (shaders/include/relpos/attention_tiled.glsl), where the maxima of a
// row's lanes within a subgroup meet by subgroupShuffleXor. The workgroup is a whole number of
// subgroups (the host checks), so LANE numbers every lane once.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define PAGED_KV 0
#define LANE (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID)
#define ROW_SHUFFLE_XOR(x, m) subgroupShuffleXor(x, m)
#include "relpos/attention_tiled.glsl"

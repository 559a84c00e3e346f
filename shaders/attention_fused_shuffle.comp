#version 450
// Fused attention with a relative position bias (shaders/include/relpos/attention_fused.glsl),
// where key blocks may be loaded one key per lane and shared by subgroupShuffle (SHARE_LOADS).
// Lanes are numbered subgroup by subgroup, so that a subgroup's first lane is its lane minus
// LANE_IN_SUBGROUP (SHARE_BIAS) whatever way the device forms subgroups of the workgroup (a whole
// number of them: the host checks).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define SHARED_LOAD(value, lane) subgroupShuffle(value, lane)
#define LANE_IN_SUBGROUP gl_SubgroupInvocationID
#define LANE (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID)
#include "relpos/attention_fused.glsl"

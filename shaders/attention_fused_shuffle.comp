#version 450
// Fused attention with a relative position bias (shaders/include/relpos/attention_fused.glsl),
// where key blocks may be loaded one key per lane and shared by subgroupShuffle (SHARE_LOADS).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define SHARED_LOAD(value, lane) subgroupShuffle(value, lane)
#define LANE_IN_SUBGROUP gl_SubgroupInvocationID
#include "relpos/attention_fused.glsl"

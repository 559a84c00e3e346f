#version 450
// The Fourier bias per relative position (shaders/include/relpos/fourier_distance_row.glsl), where
// the lanes of a subgroup may share the rotation loads by subgroupShuffle (SUB > 0).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define SHARED_LOAD(value, lane) subgroupShuffle(value, lane)
#define LANE_IN_SUBGROUP gl_SubgroupInvocationID
#include "relpos/fourier_distance_row.glsl"

#version 450
// The Fourier bias per relative position (shaders/include/relpos/fourier_distance_row.glsl), for
// devices without subgroup shuffles: SUB must be 0.
#extension GL_GOOGLE_include_directive : require
#define SHARED_LOAD(value, lane) (value)
#define LANE_IN_SUBGROUP 0u
#include "relpos/fourier_distance_row.glsl"

#version 450
// The Sandwich bias (Chi et al., 2023) on the per-distance bias skeleton: S(rp) = Σ_k cos(rp·ω_k)
// once per relative position, then scale[h]·S(rp) per head. Each phase is exact integer turns
// (fourier_phase.glsl: the host's 64-bit fixed-point steps ω_k / 2π), so no large angle reaches
// cos; docs/sandwich.md bounds the error against the float64 reference.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/sandwich.h"

layout(std430, binding = 0) readonly buffer Scale { float scale[]; };  // [heads]
layout(std430, binding = 2) readonly buffer Steps { uvec2 steps[]; };  // [terms]: 2^64·ω_k/2π, low word first

#include "relpos/fourier_phase.glsl"

float row_sum;

#define RELPOS_ROW_PREPARE
void row_prepare(int rp) {
  // Bounded: terms <= SandwichParams::kMaxDim / 2, half the loop bound (the heads take the other).
  const uint terms = pc.terms;
  float s = 0.0;
  for (uint k = 0u; k < terms; ++k) s += cos_sin_of_position(rp, steps[k]).x;
  row_sum = s;
}

float bias_at(uint h, int rp) { return scale[h] * row_sum; }

#include "relpos/distance_row.glsl"

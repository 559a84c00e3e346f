#version 450
// The KERPLE bias (Chi et al., 2022) on the per-distance bias skeleton: -r1 * log(1 + r2 * |rp|)
// (log variant) or -r1 * |rp|^r2 (power variant), per head. float32 with the GPU's log and pow;
// docs/kerple.md bounds the error against the float64 reference.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/distance_row.h"
#include "relpos_push/kerple.h"

RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_DISTANCE_ROW)
layout(std430, binding = BINDING_PARAMS) readonly buffer Params { float params[]; };  // [2, heads]: r1, then r2

float bias_at(uint h, int rp) {
  float r1 = params[h], r2 = params[pc.heads + h];
  float n = float(uint(abs(rp)));
  if (n == 0.0) return -0.0;
  if (pc.variant == RELPOS_KERPLE_POWER) return -(r1 * pow(n, r2));
  // log(1 + x) without losing x below float32's epsilon to the rounding of 1 + x: the rounding
  // error of u = 1 + x is corrected by x / (u - 1) (exact when u == 1 + x).
  // `precise` keeps compilers from folding (1 + x) - 1 into x.
  precise float x = r2 * n;
  precise float u = 1.0 + x;
  precise float d = u - 1.0;
  return -(r1 * (u == 1.0 ? x : log(u) * (x / d)));
}

#include "relpos/distance_row.glsl"

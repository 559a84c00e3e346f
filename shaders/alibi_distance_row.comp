#version 450
// The ALiBi bias -m_h * |rp| on the per-distance bias skeleton. One float32 multiply of the slope by
// the integer distance, as the CPU reference does: exact.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/distance_row.h"
#include "relpos_push/alibi.h"

RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_DISTANCE_ROW)
layout(std430, binding = BINDING_PARAMS) readonly buffer Slopes { float slopes[]; };  // [heads]

float bias_at(uint h, int rp) {
  // |rp| < 2^31 (validated), so the conversion of the distance is the CPU's int64 -> float.
  return -(slopes[h] * float(uint(abs(rp))));
}

#include "relpos/distance_row.glsl"

#version 450
// The ALiBi bias of every head at each relative position of a [Q, K] window (Q + K - 1 of them).
// One float32 multiply of the slope by the integer distance, as the CPU reference does: exact.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/alibi.h"

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Slopes { float slopes[]; };  // [heads]
layout(std430, binding = 1) writeonly buffer Rows { float row[]; };     // [heads, row_len]

void main() {
  uint r = pc.first + gl_GlobalInvocationID.x;
  if (r >= pc.row_len) return;
  int rp = pc.rp_first + int(r);
  bool masked = pc.causal != 0u && rp > 0;
  // |rp| < 2^31 (validated), so the conversion of the distance is the CPU's int64 -> float.
  float n = float(uint(abs(rp)));
  // Bounded: the host gives each dispatch at most kHeadsPerInvocation heads (src/ops/alibi.cpp).
  uint row_len = pc.row_len, h_end = pc.first_head + pc.head_count;
  for (uint h = pc.first_head; h < h_end; ++h) row[h * row_len + r] = masked ? uintBitsToFloat(0xff800000u) : -(slopes[h] * n);
}

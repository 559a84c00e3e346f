#version 450
// The T5 bucket of every relative position of a [Q, K] window (one per distance, Q + K - 1 of
// them), written as int buckets or as scale * table[bucket, h] per head. The bucket is exact
// integer arithmetic against thresholds the host computed with the CPU reference.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/t5.h"

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Table { float table[]; };        // [num_buckets, heads]
layout(std430, binding = 1) readonly buffer Thresholds { uint thresholds[]; };
layout(std430, binding = 2) writeonly buffer Rows { uint row[]; };           // [heads or 1, row_len]

uint bucket_of(int rp) {
  uint ret = 0u;
  uint n;
  if (pc.bidirectional != 0u) {
    if (rp > 0) ret = pc.half_buckets;
    n = uint(abs(rp));
  } else {
    n = uint(max(-rp, 0));
  }
  if (n < pc.max_exact) return ret + n;
  // thresholds are non-decreasing: count those <= n by bisection (bounded: at most 32 halvings
  // of a 32-bit count).
  uint lo = 0u, hi = pc.threshold_count;
  while (lo < hi) {
    uint mid = (lo + hi) >> 1;
    if (thresholds[mid] <= n) lo = mid + 1u; else hi = mid;
  }
  return ret + pc.max_exact + pc.threshold_base + lo;
}

void main() {
  uint r = pc.first + gl_GlobalInvocationID.x;
  if (r >= pc.row_len) return;
  uint b = bucket_of(pc.rp_first + int(r));
  if (pc.write_buckets != 0u) {
    row[r] = b;
    return;
  }
  // Bounded: the host gives each dispatch at most kHeadsPerInvocation heads (src/ops/t5.cpp).
  uint heads = pc.heads, row_len = pc.row_len, h_end = pc.first_head + pc.head_count;
  float scale = pc.scale;
  for (uint h = pc.first_head; h < h_end; ++h) row[h * row_len + r] = floatBitsToUint(scale * table[b * heads + h]);
}

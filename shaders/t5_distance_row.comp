#version 450
// The T5 bias on the per-distance bias skeleton: the bucket of each relative position (once per
// rp), written as int buckets or as scale * table[bucket, h] per head. The bucket is exact integer
// arithmetic against thresholds the host computed with the CPU reference.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/distance_row.h"
#include "relpos_push/t5.h"

RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_DISTANCE_ROW_CONSTANTS)
layout(std430, binding = BINDING_PARAMS) readonly buffer Table { float table[]; };          // [num_buckets, heads]
layout(std430, binding = BINDING_CONSTANTS) readonly buffer Thresholds { uint thresholds[]; };

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

uint bucket;

#define RELPOS_ROW_PREPARE
void row_prepare(int rp) { bucket = bucket_of(rp); }

#define RELPOS_ROW_BITS
uint row_bits(uint h, int rp) {
  if (pc.write_buckets != 0u) return bucket;
  return floatBitsToUint(pc.scale * table[bucket * pc.heads + h]);
}

#include "relpos/distance_row.glsl"

#version 450
// S[row, r] = Σ_{j: idx(i, j) = r} weights[row, j]: the weights of one row bucketed by Shaw
// index. Interior buckets hold at most one key (j = i + query_offset + r - k); bucket 0 is the
// prefix of keys at distance <= -k, bucket 2k the suffix at distance >= k. One invocation per row.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/shaw.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool VEC4 = false;  // keys and x_base multiples of 4: quad loads

layout(std430, binding = 0) readonly buffer Weights { float w[]; };
layout(std430, binding = 0) readonly buffer Weights4 { vec4 w4[]; };
layout(std430, binding = 1) writeonly buffer S { float s[]; };

void main() {
  uint row = gl_GlobalInvocationID.x;
  if (row >= pc.rows) return;
  int i_abs = int((pc.row0 + row) % pc.queries) + pc.query_offset;
  int keys = int(pc.keys), k = pc.max_rel;
  uint x = pc.x_base + row * pc.keys;
  uint t = pc.t_base + row * uint(2 * k + 1);
  // Bucket 0: j <= i_abs - k. Bucket 2k: j >= i_abs + k.
  int prefix_end = clamp(i_abs - k + 1, 0, keys), suffix_start = clamp(i_abs + k, 0, keys);
  float prefix = 0.0, suffix = 0.0;
  int j = 0;
  if (VEC4) {
    vec4 acc = vec4(0.0);
    for (; j + 4 <= prefix_end; j += 4) acc += w4[(x + uint(j)) >> 2];
    prefix = (acc.x + acc.y) + (acc.z + acc.w);
  }
  for (; j < prefix_end; ++j) prefix += w[x + uint(j)];
  j = suffix_start;
  if (VEC4) {
    for (; j < keys && (j & 3) != 0; ++j) suffix += w[x + uint(j)];
    vec4 acc = vec4(0.0);
    for (; j < keys; j += 4) acc += w4[(x + uint(j)) >> 2];  // keys % 4 == 0: whole quads to the end
    suffix += (acc.x + acc.y) + (acc.z + acc.w);
  }
  for (; j < keys; ++j) suffix += w[x + uint(j)];
  s[t] = prefix;
  s[t + uint(2 * k)] = suffix;
  for (int r = 1; r < 2 * k; ++r) {
    int jr = i_abs + r - k;
    s[t + uint(r)] = (jr >= 0 && jr < keys) ? w[x + uint(jr)] : 0.0;
  }
}

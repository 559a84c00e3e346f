#version 450
// S[row, r] = Σ_{j: idx(i, j) = r} weights[row, j]: the weights of one row bucketed by Shaw
// index. Interior buckets hold at most one key (j = i + query_offset + r - k); bucket 0 is the
// prefix of keys at distance <= -k, bucket 2k the suffix at distance >= k. One invocation per
// (row, part) (relpos_push/shaw.h), in one of three passes:
// - PASS 0: the whole row (parts = 1): both edge sums and every interior bucket.
// - PASS 1: the keys [c·part_len, (c + 1)·part_len) of the row: their share of the prefix and the
//   suffix sums, to partial[row, c].
// - PASS 2: the buckets [c·part_len, (c + 1)·part_len) of the row; the edge buckets add the row's
//   key_parts partial sums.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/shaw.h"
#include "relpos_push/shaw.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_SHAW_BUCKETS)  // VEC4: keys and x_base multiples of 4
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_SHAW_BUCKETS)

layout(std430, binding = BINDING_WEIGHTS) readonly buffer Weights { float w[]; };
layout(std430, binding = BINDING_WEIGHTS) readonly buffer Weights4 { vec4 w4[]; };
layout(std430, binding = BINDING_S) writeonly buffer S { float s[]; };
layout(std430, binding = BINDING_PARTIAL) buffer Partial { vec2 partial[]; };  // [rows of the dispatch, key_parts]: (prefix, suffix)

// Σ w[x + j] for j in [j0, j1); with VEC4, j0 and x are multiples of 4 or the quads start after j0.
float sum_range(uint x, int j0, int j1) {
  float total = 0.0;
  int j = j0;
  if (VEC4) {
    for (; j < j1 && (j & 3) != 0; ++j) total += w[x + uint(j)];
    vec4 acc = vec4(0.0);
    for (; j + 4 <= j1; j += 4) acc += w4[(x + uint(j)) >> 2];
    total += (acc.x + acc.y) + (acc.z + acc.w);
  }
  for (; j < j1; ++j) total += w[x + uint(j)];
  return total;
}

void main() {
  uint parts = pc.parts, part_len = pc.part_len;
  uint id = gl_GlobalInvocationID.x;
  uint row = id / parts, c = id % parts;
  if (row >= pc.rows) return;
  int i_abs = int((pc.row0 + row) % pc.queries) + pc.query_offset;
  int keys = int(pc.keys), k = pc.max_rel;
  uint x = pc.x_base + row * pc.keys;
  uint t = pc.t_base + row * uint(2 * k + 1);
  // Bucket 0: j <= i_abs - k. Bucket 2k: j >= i_abs + k.
  int prefix_end = clamp(i_abs - k + 1, 0, keys), suffix_start = clamp(i_abs + k, 0, keys);
  if (PASS == 1u) {
    int j0 = int(c * part_len), j1 = min(j0 + int(part_len), keys);
    partial[id] = vec2(sum_range(x, j0, min(prefix_end, j1)), sum_range(x, max(suffix_start, j0), j1));
    return;
  }
  // The buckets [r0, r1) of this invocation.
  int r0 = PASS == 0u ? 0 : int(c * part_len), r1 = PASS == 0u ? 2 * k + 1 : min(r0 + int(part_len), 2 * k + 1);
  if (r0 == 0 || r1 == 2 * k + 1) {
    float prefix = 0.0, suffix = 0.0;
    if (PASS == 0u) {
      prefix = sum_range(x, 0, prefix_end);
      suffix = sum_range(x, suffix_start, keys);
    } else {
      uint first = row * pc.key_parts;
      for (uint n = 0u; n < pc.key_parts; ++n) {
        vec2 v = partial[first + n];
        prefix += v.x;
        suffix += v.y;
      }
    }
    if (r0 == 0) s[t] = prefix;
    if (r1 == 2 * k + 1) s[t + uint(2 * k)] = suffix;
  }
  for (int r = max(r0, 1); r < min(r1, 2 * k); ++r) {
    int jr = i_abs + r - k;
    s[t + uint(r)] = (jr >= 0 && jr < keys) ? w[x + uint(jr)] : 0.0;
  }
}

#version 450
// logits[row, j] (+)= P[row, idx(i, j)]: Shaw's relative-key term from P = scale·q·rel_keysᵀ, in
// two passes over disjoint quads of four columns (so they need no barrier between them):
// - BAND = false: every quad entirely beyond ±k takes one of the row's two edge values of P, a
//   broadcast. Lanes lie along a row, each storing UNROLL neighbouring quads, and a workgroup walks
//   ROWS rows (lavapipe pays per workgroup, and per separate run of stores).
// - BAND = true: the few quads of each row that meet the band (-k < rp < k), with clamped loads.
//   One lane per row walks (a part of) that row's band, so every lane runs the same number of steps.
// lavapipe turns each push-constant or buffer read in a loop into an eight-lane gather, so the
// loops read nothing they can read before.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/shaw.h"
#include "relpos_push/shaw.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_SHAW_GATHER_ADD)  // VEC4: keys and x_base are multiples of 4
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_SHAW_GATHER_ADD)

layout(std430, binding = BINDING_LOGITS) buffer Logits { float logits[]; };
layout(std430, binding = BINDING_LOGITS) buffer Logits4 { vec4 logits4[]; };
layout(std430, binding = BINDING_P) readonly buffer P { float p[]; };

// Columns j0 .. j0 + 3 of the row starting at element x (the last quad of a row may be partial).
void store(uint x, uint j0, uint keys, vec4 v) {
  uint e = x + j0;
  if (VEC4) {
    logits4[e >> 2] = ADD ? logits4[e >> 2] + v : v;
  } else {
    for (uint l = 0; l < 4u && j0 + l < keys; ++l) logits[e + l] = ADD ? logits[e + l] + v[l] : v[l];
  }
}

void main() {
  uint rows = pc.rows, queries = pc.queries, keys = pc.keys, x_base = pc.x_base;
  int k = pc.max_rel, query_offset = pc.query_offset;
  uint quads = (keys + 3u) / 4u;
  uint t_stride = uint(2 * k + 1);
  if (BAND) {
    // One invocation per (row, part of the row's band steps).
    uint parts = pc.parts, part_len = pc.part_len;
    uint row = gl_GlobalInvocationID.x / parts, part = gl_GlobalInvocationID.x % parts;
    if (row >= rows) return;
    int i_abs = int((pc.row0 + row) % queries) + query_offset;
    uint x = x_base + row * keys;
    uint t = pc.t_base + row * t_stride + uint(k);
    // Quads [band_first, band_last] hold the columns with -k < j - i_abs < k; every row has at
    // most (2k - 2) / 4 + 2 of them.
    int band_first = (i_abs - k + 1) >> 2, band_last = (i_abs + k - 1) >> 2;  // floor division
    int first = max(band_first, 0), last = min(band_last, int(quads) - 1);
    uint steps = (2u * uint(k) - 2u) / 4u + 2u;
    uint s0 = part * part_len, s1 = min(steps, s0 + part_len);
    for (uint s = s0; s < s1; ++s) {
      int q = first + int(s);
      if (q > last) break;
      int rp = 4 * q - i_abs;
      store(x, uint(4 * q), keys, vec4(p[t + clamp(rp, -k, k)], p[t + clamp(rp + 1, -k, k)], p[t + clamp(rp + 2, -k, k)],
                                       p[t + clamp(rp + 3, -k, k)]));
    }
    return;
  }
  uint row = gl_WorkGroupID.y * ROWS;
  uint i = (pc.row0 + row) % queries;
  uint x = x_base + row * keys;
  uint t = pc.t_base + row * t_stride;
  uint q0 = pc.first_quad + gl_GlobalInvocationID.x * UNROLL;
  for (uint n = 0u; n < ROWS; ++n, ++row, x += keys, t += t_stride) {
    if (row >= rows) break;
    int i_abs = int(i) + query_offset;
    int band_first = (i_abs - k + 1) >> 2, band_last = (i_abs + k - 1) >> 2;
    float lo = p[t], hi = p[t + 2u * uint(k)];
    for (uint u = 0u; u < UNROLL; ++u) {
      uint q = q0 + u;
      if (q < quads && (int(q) < band_first || int(q) > band_last)) store(x, 4u * q, keys, vec4(int(4u * q) > i_abs ? hi : lo));
    }
    if (++i == queries) i = 0u;
  }
}

#version 450
// logits[row, j] (+)= P[row, idx(i, j)]: Shaw's relative-key term from P = scale·q·rel_keysᵀ, in
// two passes over disjoint quads of four columns (so they need no barrier between them):
// - BAND = false: every quad entirely beyond ±k takes one of the row's two edge values of P, a
//   broadcast (lavapipe runs both sides of a divergent branch, so the clamped loads of the band
//   would otherwise be paid by every quad);
// - BAND = true: the few quads of the row that meet the band (-k < rp < k), with clamped loads.
// Rows are gl_WorkGroupID.y; the row's query index is taken once per invocation.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/shaw.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool VEC4 = false;  // keys and x_base are multiples of 4
layout(constant_id = 2) const uint QUADS = 4;     // quads per invocation (broadcast pass)
layout(constant_id = 3) const bool ADD = true;    // false: write the term instead of adding it
layout(constant_id = 4) const bool BAND = false;

layout(std430, binding = 0) buffer Logits { float logits[]; };
layout(std430, binding = 0) buffer Logits4 { vec4 logits4[]; };
layout(std430, binding = 1) readonly buffer P { float p[]; };

// Columns j0 .. j0 + 3 of the row starting at element x (the last quad of a row may be partial).
void store(uint x, uint j0, vec4 v) {
  uint e = x + j0;
  if (VEC4) {
    logits4[e >> 2] = ADD ? logits4[e >> 2] + v : v;
  } else {
    for (uint l = 0; l < 4u && j0 + l < pc.keys; ++l) logits[e + l] = ADD ? logits[e + l] + v[l] : v[l];
  }
}

void main() {
  uint row = gl_WorkGroupID.y;
  if (row >= pc.rows) return;
  int k = pc.max_rel;
  int i_abs = int((pc.row0 + row) % pc.queries) + pc.query_offset;
  uint x = pc.x_base + row * pc.keys;
  uint t = pc.t_base + row * uint(2 * k + 1) + uint(k);
  uint quads = (pc.keys + 3u) / 4u;
  // Quads [band_first, band_last] hold the columns with -k < j - i_abs < k.
  int band_first = (i_abs - k + 1) >> 2, band_last = (i_abs + k - 1) >> 2;  // floor division
  if (BAND) {
    int q = max(band_first, 0) + int(gl_GlobalInvocationID.x);
    if (q > band_last || q >= int(quads)) return;
    int rp = 4 * q - i_abs;
    store(x, uint(4 * q), vec4(p[t + clamp(rp, -k, k)], p[t + clamp(rp + 1, -k, k)], p[t + clamp(rp + 2, -k, k)],
                                p[t + clamp(rp + 3, -k, k)]));
    return;
  }
  float lo = p[t - uint(k)], hi = p[t + uint(k)];
  uint first = pc.first_quad + gl_WorkGroupID.x * gl_WorkGroupSize.x * QUADS + gl_LocalInvocationID.x;
  for (uint n = 0; n < QUADS; ++n) {
    uint q = first + n * gl_WorkGroupSize.x;
    if (q >= quads) return;
    if (int(q) >= band_first && int(q) <= band_last) continue;
    store(x, 4u * q, vec4(int(4u * q) > i_abs ? hi : lo));
  }
}

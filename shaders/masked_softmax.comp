#version 450
// Row softmax of f32 logits in place, with the causal and key-padding masks applied: masked
// entries become 0, and a row with every key masked becomes all zeros (never NaN). The max is
// subtracted before exp. A row is cut into chunks of at most pc.chunk_len keys, one invocation
// per (row, chunk), so that no invocation's loops outgrow the loop bound (relpos_push/loop_bound.h):
// - PASS 0 (one chunk per row): the row's max, sum and normalisation in one invocation.
// - PASS 1: each chunk's max m_c and sum s_c = Σ exp(x - m_c) over its visible keys, to stats.
// - PASS 2: the row's max M = max m_c and sum S = Σ s_c·exp(m_c - M) from every chunk's stats,
//   then the chunk normalised by them.
// With VEC4 (keys, chunk_len and base multiples of 4) the visible keys are read and written a quad
// at a time: on lavapipe each invocation's loads are separate memory operations, so a quad load
// costs about what one float does.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/softmax.h"
#include "relpos_push/softmax.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_MASKED_SOFTMAX)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_MASKED_SOFTMAX)

layout(std430, binding = BINDING_LOGITS) buffer Logits { float x[]; };
layout(std430, binding = BINDING_LOGITS) buffer Logits4 { vec4 x4[]; };
layout(std430, binding = BINDING_KEY_LENGTHS) readonly buffer Lengths { uint key_lengths[]; };
layout(std430, binding = BINDING_STATS) buffer Stats { vec2 stats[]; };  // [rows of the dispatch, chunks]: (m_c, s_c)

const float LOWEST = -3.402823466e38;

void main() {
  uint chunks = pc.chunks, chunk_len = pc.chunk_len, keys = pc.keys;
  uint id = gl_GlobalInvocationID.x;
  uint row = id / chunks, c = id % chunks;
  if (row >= pc.rows) return;
  uint g = pc.row0 + row;
  uint i = g % pc.queries;
  uint valid = keys;  // keys [0, valid) of the row are visible
  if (pc.has_lengths != 0u) valid = min(valid, key_lengths[g / (pc.queries * pc.heads)]);
  if (pc.causal != 0u) valid = uint(clamp(int(i) + pc.query_offset + 1, 0, int(valid)));
  // This chunk: keys [j0, j0 + len) of the row, of which the first `seen` are visible.
  uint j0 = c * chunk_len, len = min(chunk_len, keys - j0);
  uint seen = uint(clamp(int(valid) - int(j0), 0, int(len)));
  uint base = pc.base + row * keys + j0;
  uint whole = VEC4 ? seen / 4u : 0u;  // quads entirely visible
  float mx = LOWEST, sum = 0.0, inv = 0.0;
  if (PASS != 2u) {
    vec4 mx4 = vec4(mx);
    for (uint q = 0; q < whole; ++q) mx4 = max(mx4, x4[(base >> 2) + q]);
    mx = max(max(mx4.x, mx4.y), max(mx4.z, mx4.w));
    for (uint j = 4u * whole; j < seen; ++j) mx = max(mx, x[base + j]);
    vec4 sum4 = vec4(0.0);
    for (uint q = 0; q < whole; ++q) sum4 += exp(x4[(base >> 2) + q] - mx);
    sum = (sum4.x + sum4.y) + (sum4.z + sum4.w);
    for (uint j = 4u * whole; j < seen; ++j) sum += exp(x[base + j] - mx);
    if (PASS == 1u) {
      stats[id] = vec2(mx, sum);
      return;
    }
    inv = valid > 0u ? 1.0 / sum : 0.0;
  } else {
    uint first = row * chunks;
    for (uint n = 0u; n < chunks; ++n) mx = max(mx, stats[first + n].x);
    for (uint n = 0u; n < chunks; ++n) {
      vec2 s = stats[first + n];
      sum += s.y == 0.0 ? 0.0 : s.y * exp(s.x - mx);  // no visible key: 0; a NaN sum (a NaN logit) stays NaN
    }
    inv = valid > 0u ? 1.0 / sum : 0.0;
  }
  for (uint q = 0; q < whole; ++q) x4[(base >> 2) + q] = exp(x4[(base >> 2) + q] - mx) * inv;
  for (uint j = 4u * whole; j < seen; ++j) x[base + j] = exp(x[base + j] - mx) * inv;
  for (uint j = seen; j < len; ++j) x[base + j] = 0.0;
}

#version 450
// The per-distance expansion when every output row is a whole number of quads (keys % 4 == 0).
//
// Row i's window starts at w = Q - 1 - i; in the copy shifted by s = w % 4 it starts on a whole
// quad, so output quad jq of row i is source quad (w - s) / 4 + jq of that copy. Rows i and i + 4
// of the same head see the same values one quad further right, so each invocation walks a
// diagonal: it loads one source quad and stores it DIAG times, at (i + 4t, jq + t). Loads become
// 1/DIAG of the stores, and at every step neighbouring invocations store neighbouring quads.
//
// Grid: x covers starting quads jq0 in [-(DIAG - 1), K / 4); y is a tile of 4 * DIAG rows of this
// chunk, whose four diagonal classes c + 4t (c = 0..3) are the workgroup's four rows of
// invocations (large workgroups cost lavapipe less per invocation).
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/expand.h"

layout(local_size_x_id = 0, local_size_y = 4) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint DIAG = 8;

layout(std430, binding = 0) readonly buffer Shifted4 { uvec4 src4[]; };  // 32-bit copies
layout(std430, binding = 0) readonly buffer Shifted2 { uvec2 src2[]; };  // f16 copies (WRITE_F16)
#include "relpos/expand_store.glsl"

uint source_quad(uint h, uint i, uint jq) {
  uint w = pc.queries - 1u - i;
  uint s = w & 3u;
  return (((h * 4u + s) * pc.shifted_len + (w - s)) >> 2) + jq;
}

// Moves (i, h) forward to a valid query of the following heads (and batches) after i grew past Q.
void normalise(inout uint i, inout uint h) {
  while (i >= pc.queries) {
    i -= pc.queries;
    h = h + 1u == pc.heads ? 0u : h + 1u;
  }
}

// Stores the diagonal (row + 4t, jq0 + t), t in [0, DIAG), of the chunk: one load per run of rows
// within one head, then plain stores.
// (i, h) is the query and head of `row`; computed by the caller from workgroup-uniform values, so
// the divisions happen once per workgroup rather than once per lane.
void walk(uint row, uint i, uint h, int jq0, uint chunk_rows, uint quads_per_row) {
  if (row >= chunk_rows) return;
  int t = max(0, -jq0);
  int t_end = min(int(DIAG), int(quads_per_row) - jq0);
  t_end = min(t_end, int((chunk_rows - row + 3u) >> 2));
  if (t >= t_end) return;
  i += 4u * uint(t);
  normalise(i, h);
  uint q = (row + 4u * uint(t)) * quads_per_row + uint(jq0 + t);
  uint step = 4u * quads_per_row + 1u;  // four rows down, one quad right
  while (t < t_end) {
    int run_end = min(t_end, t + int((pc.queries - i + 3u) >> 2));  // rows i, i + 4, ... < Q
    uint src = source_quad(h, i, uint(jq0 + t));
    i += 4u * uint(run_end - t);
    if (MODE == WRITE_F16) {
      uvec2 v = src2[src];
      for (; t < run_end; ++t, q += step) out2[q] = v;
    } else {
      uvec4 v = src4[src];
      for (; t < run_end; ++t, q += step) store_quad(q, v);
    }
    normalise(i, h);
  }
}

void main() {
  uint quads_per_row = pc.keys >> 2;
  uint chunk_rows = pc.count / pc.keys;
  int jq0 = int(gl_GlobalInvocationID.x) - int(DIAG - 1u);
  uint tile_row = gl_WorkGroupID.y * (4u * DIAG);
  uint r = pc.first_row + tile_row;
  uint i = r % pc.queries + gl_LocalInvocationID.y;
  uint h = (r / pc.queries) % pc.heads;
  uint row = tile_row + gl_LocalInvocationID.y;
  // Almost every invocation is inside: its whole diagonal lies in the chunk, in one head, and in the
  // row. Then the loop has a constant trip count and no tests.
  bool rows_inside = r % pc.queries + 4u * DIAG <= pc.queries && tile_row + 4u * DIAG <= chunk_rows;
  if (rows_inside && jq0 >= 0 && uint(jq0) + DIAG <= quads_per_row) {
    uint q = row * quads_per_row + uint(jq0);
    uint src = source_quad(h, i, uint(jq0));
    uint step = 4u * quads_per_row + 1u;
    if (MODE == WRITE_F16) {
      uvec2 v = src2[src];
      for (uint t = 0u; t < DIAG; ++t, q += step) out2[q] = v;
    } else {
      uvec4 v = src4[src];
      for (uint t = 0u; t < DIAG; ++t, q += step) store_quad(q, v);
    }
    return;
  }
  walk(row, i, h, jq0, chunk_rows, quads_per_row);
}

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
// chunk, whose four diagonals c + 4t (c = 0..3) each invocation walks in turn.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/expand.h"

layout(local_size_x_id = 0) in;
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

// Stores the diagonal starting at (row, jq) of the chunk.
void walk(uint row, int jq, uint chunk_rows, uint quads_per_row) {
  uint r = pc.first_row + row;
  uint i = r % pc.queries;
  uint h = (r / pc.queries) % pc.heads;
  bool loaded = false;
  uvec4 v4 = uvec4(0u);
  uvec2 v2 = uvec2(0u);
  for (uint t = 0u; t < DIAG; ++t, ++jq, row += 4u) {
    if (row >= chunk_rows) return;
    if (t > 0u) {
      i += 4u;
      while (i >= pc.queries) {  // crossed into the next head (or batch): new values
        i -= pc.queries;
        h = h + 1u == pc.heads ? 0u : h + 1u;
        loaded = false;
      }
    }
    if (jq < 0 || uint(jq) >= quads_per_row) continue;
    uint q = row * quads_per_row + uint(jq);
    if (MODE == WRITE_F16) {
      if (!loaded) v2 = src2[source_quad(h, i, uint(jq))];
      out2[q] = v2;
    } else {
      if (!loaded) v4 = src4[source_quad(h, i, uint(jq))];
      store_quad(q, v4);
    }
    loaded = true;
  }
}

void main() {
  uint quads_per_row = pc.keys >> 2;
  uint chunk_rows = pc.count / pc.keys;
  int jq0 = int(gl_GlobalInvocationID.x) - int(DIAG - 1u);
  uint tile_row = gl_WorkGroupID.y * (4u * DIAG);
  for (uint c = 0u; c < 4u; ++c) walk(tile_row + c, jq0, chunk_rows, quads_per_row);
}

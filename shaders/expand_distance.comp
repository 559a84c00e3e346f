#version 450
// Expands per-distance rows into a [rows, keys] tensor: value(r, j) = row[h][(Q - 1 - i) + j] with
// r = (b, h, i). The general path for any number of keys: each invocation produces whole quads of
// four consecutive elements of the flat output (a quad may span two rows) and stores each with one
// 16-byte (f32, i32) or 8-byte (f16) store; only the last, partial quad of a chunk falls back to
// scalar stores. expand_distance_rows.comp is the faster path when rows are whole quads.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/expand.h"
#include "relpos_push/expand.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_EXPAND_DISTANCE)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_EXPAND_DISTANCE)

layout(std430, binding = BINDING_ROWS) readonly buffer Rows { uint row[]; };
#include "relpos/expand_store.glsl"

uint row_base(uint r) {
  uint i = r % pc.queries;
  uint h = (r / pc.queries) % pc.heads;
  return h * pc.row_len + (pc.queries - 1u - i);
}

void main() {
  uint base = gl_WorkGroupID.x * gl_WorkGroupSize.x * QUADS + gl_LocalInvocationID.x;
  for (uint k = 0; k < QUADS; ++k) {  // bounded: QUADS (4) quads per invocation
    uint q = base + k * gl_WorkGroupSize.x;
    uint e0 = 4u * q;
    if (e0 >= pc.count) return;
    uint pos = pc.first_col + e0;
    uint r = pc.first_row + pos / pc.keys;
    uint j = pos % pc.keys;
    uvec4 v;
    if (j + 3u < pc.keys) {
      uint b = row_base(r) + j;
      v = uvec4(row[b], row[b + 1u], row[b + 2u], row[b + 3u]);
    } else {
      for (uint l = 0; l < 4u; ++l) {  // bounded: the 4 values of a quad
        v[l] = row[row_base(r) + j];
        if (++j == pc.keys) { j = 0u; ++r; }
      }
    }
    uint n = min(4u, pc.count - e0);
    if (n < 4u) store_partial(q, v, n); else store_quad(q, v);
  }
}

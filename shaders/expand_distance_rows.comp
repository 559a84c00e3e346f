#version 450
// The per-distance expansion when every output row is a whole number of 16-byte vectors: VEC = 4
// f32/i32 values or 8 f16 values, keys % VEC == 0.
//
// Row i's window starts at w = Q - 1 - i; in the copy shifted by s = w % VEC it starts on a whole
// vector, so output vector jv of row i is source vector (w - s) / VEC + jv of that copy. Rows i and
// i + VEC of the same head see the same values one vector further right, so each invocation walks
// a diagonal: it loads one source vector and stores it DIAG times, at (i + VEC t, jv + t). Loads
// become 1/DIAG of the stores, and at every step neighbouring invocations store neighbouring
// vectors: a copy kernel whose source stays in cache, with only 16-byte stores.
//
// Each invocation carries UNROLL neighbouring diagonals, so that each store of a step is UNROLL
// vectors long: CPU devices write few, longer runs per page (lavapipe's rate follows the number of
// separate runs, not the bytes). Grid: x covers starting vectors jv0 = UNROLL * x - (DIAG - 1);
// y is a tile of VEC * DIAG rows of this chunk, whose VEC diagonal classes c + VEC t are the
// workgroup's VEC rows of invocations (large workgroups cost lavapipe less per invocation).
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/expand.h"
#include "relpos_push/expand.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_EXPAND_DISTANCE_ROWS)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_EXPAND_DISTANCE_ROWS)

const uint COPY32 = 0, WRITE_F16 = 1, ADD_F32 = 2, ADD_F16 = 3;

// The shifted copies: f16 for WRITE_F16 (8 per 16 bytes), else 32-bit values (ADD_F16 reads two
// 16-byte words of f32 per output vector, to add in f32 and round once).
layout(std430, binding = BINDING_SHIFTED) readonly buffer Shifted { uvec4 src[]; };
layout(std430, binding = BINDING_OUT) buffer Out { uvec4 dst[]; };

uvec4 pack8(vec4 a, vec4 b) {
  return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}

// Source words of the vector at element offset e of the copies.
uint source_word(uint h, uint i, uint jv) {
  uint w = pc.queries - 1u - i;
  uint s = w % VEC;
  uint e = (h * VEC + s) * pc.shifted_len + (w - s) + VEC * jv;
  return MODE == WRITE_F16 ? e >> 3 : e >> 2;
}

// The store of one output vector; v0 (and v1 for ADD_F16) are the loaded source words.
void store(uint q, uvec4 v0, uvec4 v1) {
  if (MODE == COPY32 || MODE == WRITE_F16) {
    dst[q] = v0;
  } else if (MODE == ADD_F32) {
    dst[q] = floatBitsToUint(uintBitsToFloat(dst[q]) + uintBitsToFloat(v0));
  } else {
    uvec4 old = dst[q];
    vec4 a = vec4(unpackHalf2x16(old.x), unpackHalf2x16(old.y)) + uintBitsToFloat(v0);
    vec4 b = vec4(unpackHalf2x16(old.z), unpackHalf2x16(old.w)) + uintBitsToFloat(v1);
    dst[q] = pack8(a, b);
  }
}

// Moves (i, h) forward to a valid query of the following heads (and batches) after i grew past Q.
void normalise(inout uint i, inout uint h) {
  // Bounded: callers pass i < Q + VEC * DIAG (128 for f16), so at most VEC * DIAG / Q + 1 turns.
  while (i >= pc.queries) {
    i -= pc.queries;
    h = h + 1u == pc.heads ? 0u : h + 1u;
  }
}

// The diagonal (row + VEC t, jv0 + t), t in [0, DIAG), of the chunk, near an edge (of the row,
// the chunk or a head): one load per run of rows within one head, then plain stores. (i, h) is the
// query and head of `row`.
void walk(uint row, uint i, uint h, int jv0, uint chunk_rows, uint vecs_per_row) {
  if (row >= chunk_rows) return;
  int t = max(0, -jv0);
  int t_end = min(int(DIAG), int(vecs_per_row) - jv0);
  t_end = min(t_end, int((chunk_rows - row + VEC - 1u) / VEC));
  if (t >= t_end) return;
  i += VEC * uint(t);
  normalise(i, h);
  uint q = (row + VEC * uint(t)) * vecs_per_row + uint(jv0 + t);
  uint step = VEC * vecs_per_row + 1u;  // VEC rows down, one vector right
  while (t < t_end) {  // bounded: t advances by at least one per turn, t_end <= DIAG
    int run_end = min(t_end, t + int((pc.queries - i + VEC - 1u) / VEC));  // rows i, i + VEC, ... < Q
    uint sw = source_word(h, i, uint(jv0 + t));
    uvec4 v0 = src[sw];
    uvec4 v1 = MODE == ADD_F16 ? src[sw + 1u] : uvec4(0u);
    i += VEC * uint(run_end - t);
    for (; t < run_end; ++t, q += step) store(q, v0, v1);  // bounded: DIAG steps in all
    normalise(i, h);
  }
}

void main() {
  uint vecs_per_row = pc.keys / VEC;
  uint chunk_rows = pc.count / pc.keys;
  int jv0 = int(UNROLL * gl_GlobalInvocationID.x) - int(DIAG - 1u);
  uint tile_row = gl_WorkGroupID.y * (VEC * DIAG);
  // Divisions on workgroup-uniform values: once per workgroup, not per lane.
  uint r = pc.first_row + tile_row;
  uint i_tile = r % pc.queries;
  uint h = (r / pc.queries) % pc.heads;
  uint i = i_tile + gl_LocalInvocationID.y;
  uint row = tile_row + gl_LocalInvocationID.y;
  // Almost every invocation is inside: its diagonals lie in the chunk, in one head, and in the row.
  // Then the loop has a constant trip count and no tests.
  bool rows_inside = i_tile + VEC * DIAG <= pc.queries && tile_row + VEC * DIAG <= chunk_rows;
  if (rows_inside && jv0 >= 0 && uint(jv0) + DIAG + UNROLL - 1u <= vecs_per_row) {
    uint q = row * vecs_per_row + uint(jv0);
    uint sw = source_word(h, i, uint(jv0));
    uint words = MODE == ADD_F16 ? 2u : 1u;  // source words per vector
    uvec4 v0[UNROLL], v1[UNROLL];
    for (uint u = 0u; u < UNROLL; ++u) {  // bounded: UNROLL (2); likewise the loops below
      v0[u] = src[sw + u * words];
      v1[u] = MODE == ADD_F16 ? src[sw + u * words + 1u] : uvec4(0u);
    }
    uint step = VEC * vecs_per_row + 1u;
    for (uint t = 0u; t < DIAG; ++t, q += step)
      for (uint u = 0u; u < UNROLL; ++u) store(q + u, v0[u], v1[u]);
    return;
  }
  normalise(i, h);
  for (uint u = 0u; u < UNROLL; ++u) walk(row, i, h, jv0 + int(u), chunk_rows, vecs_per_row);
}

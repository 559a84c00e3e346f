#version 450
// C = alpha·A·B' (+ C) for quad-aligned operands, GPU kernel class. A workgroup of 64 lanes owns a
// 32×32 tile of C, each lane a 4×4 block of it in registers (lane = 8·ty + tx: rows 4·ty.., columns
// 4·tx..). The shared dimension goes in steps of KT = 16: all lanes load the step's 32×16 blocks of
// A and of B into shared memory (two quads each, consecutive lanes consecutive quads of a row:
// coalesced), transposed so that a lane reads the four rows (columns) it needs at one element of
// the step as one vec4; then 16 multiply-adds per two shared reads.
// Shared-memory hand-offs: the step's stores, barrier A, the lanes' reads, barrier B (the next
// step's stores overwrite what this step read). Every lane reaches both barriers: the step loop's
// bound is a push constant and no lane leaves before the end (edges are clamped, not skipped).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "relpos_contract/matmul.h"
#include "relpos_push/matmul.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_MATMUL_TILED)  // WG_X 64: the lane mapping below assumes it
const uint TM = RELPOS_MATMUL_TILED_ROWS, TN = RELPOS_MATMUL_TILED_COLS, KT = 16u;

#include "relpos/matmul_io.glsl"

// a_step[kk * TM + row], b_step[kk * TN + column]: one element of the step across the tile, as
// floats (lanes store single components), read back as the quads a lane needs.
shared float a_step[KT * TM];
shared float b_step[KT * TN];

vec4 quad_at(uint kk, uint q, bool of_a) {
  const uint w = of_a ? kk * TM + 4u * q : kk * TN + 4u * q;
  return of_a ? vec4(a_step[w], a_step[w + 1u], a_step[w + 2u], a_step[w + 3u])
              : vec4(b_step[w], b_step[w + 1u], b_step[w + 2u], b_step[w + 3u]);
}

void main() {
  const uint lane = gl_LocalInvocationID.x, tx = lane % 8u, ty = lane / 8u;
  const uint m = pc.m, n = pc.n, depth = pc.k;
  const uint row0 = gl_WorkGroupID.y * TM, col0 = (pc.tile_n0 + gl_WorkGroupID.x) * TN;
  const uint z = gl_WorkGroupID.z;
  const uint a0 = pc.a_base + z * pc.a_bs, b0 = pc.b_base + z * pc.b_bs;

  // The quads this lane loads at each step (u = lane and lane + 64 of the 128 in a block):
  // A: row u / 4 of the tile, quad u % 4 of the step. B·ᵀ alike with columns. B (NN): row u / 8 of
  // the step, quad u % 8 of the tile's columns. Rows and columns past the edge are clamped.
  uint a_at[2], b_at[2];
  [[unroll]] for (uint t = 0u; t < 2u; ++t) {
    const uint u = lane + 64u * t;
    a_at[t] = a0 + min(row0 + u / 4u, m - 1u) * pc.a_rs + 4u * (u % 4u);
    b_at[t] = B_T ? b0 + min(col0 + u / 4u, n - 1u) * pc.b_rs + 4u * (u % 4u)
                  : b0 + (u / 8u) * pc.b_rs + min(col0 + 4u * (u % 8u), n - 4u);
  }
  const uint b_step_elems = B_T ? KT : KT * pc.b_rs;

  vec4 acc[4];  // acc[i][j]: row 4·ty + i, column 4·tx + j
  [[unroll]] for (uint i = 0u; i < 4u; ++i) acc[i] = vec4(0.0);
  for (uint k0 = 0u, b_off = 0u; k0 < depth; k0 += KT, b_off += b_step_elems) {
    [[unroll]] for (uint t = 0u; t < 2u; ++t) {
      const uint u = lane + 64u * t;
      // A's quad: elements 4·(u % 4) .. + 3 of the step, zero past the depth (a multiple of 4).
      const uint ka = 4u * (u % 4u);
      const vec4 a = k0 + ka < depth ? load_a4(a_at[t] + k0) : vec4(0.0);
      const uint ra = u / 4u;  // tile row
      [[unroll]] for (uint e = 0u; e < 4u; ++e) a_step[(ka + e) * TM + ra] = a[e];
      if (B_T) {
        const vec4 b = k0 + ka < depth ? load_b4(b_at[t] + k0) : vec4(0.0);
        const uint cb = u / 4u;
        [[unroll]] for (uint e = 0u; e < 4u; ++e) b_step[(ka + e) * TN + cb] = b[e];
      } else {
        const uint kb = u / 8u, cq = u % 8u;  // step row, column quad
        const vec4 b = k0 + kb < depth ? load_b4(b_at[t] + b_off) : vec4(0.0);
        [[unroll]] for (uint e = 0u; e < 4u; ++e) b_step[kb * TN + 4u * cq + e] = b[e];
      }
    }
    barrier();  // A
    [[unroll]] for (uint kk = 0u; kk < KT; ++kk) {
      const vec4 a = quad_at(kk, ty, true), b = quad_at(kk, tx, false);
      [[unroll]] for (uint i = 0u; i < 4u; ++i) acc[i] += a[i] * b;
    }
    barrier();  // B
  }

  const uint c0 = pc.c_base + z * pc.c_bs;
  [[unroll]] for (uint i = 0u; i < 4u; ++i)
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      const uint row = row0 + 4u * ty + i, col = col0 + 4u * tx + j;
      if (row < m && col < n) store_c(c0 + row * pc.c_rs + col, pc.alpha * acc[i][j]);
    }
}

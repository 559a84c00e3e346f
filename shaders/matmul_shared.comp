#version 450
// C = alpha·A·B' (+ C) for quad-aligned operands on CPU devices, where every storage-buffer load is
// a loop over the SIMD lanes (the subgroup) and the shared operand is what costs: each lane keeps
// RM rows of C across the subgroup's NC columns and loads its own rows of A, while the 4·NQ quads
// of B that a step of four along the shared dimension needs (NC rows of B for A·Bᵀ; four rows of
// NQ quads for A·B) are loaded one per lane in turn and handed round by subgroupShuffle. A step
// then loads RM + 4·NQ / SG quads per lane for 4·RM·NC multiply-adds (matmul.comp: 12 for 128).
// Workgroup: its subgroups stacked along the rows, one column tile of NC. Lanes never leave early
// (the shuffles need them all): rows and columns past the edge are clamped on load, skipped on store.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "relpos_contract/matmul.h"
#include "relpos_push/matmul.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_MATMUL_SHARED)
const uint NC = 4u * NQ;
const uint OWN = (NC + SG - 1u) / SG;            // quads of B each lane loads per step

#include "relpos/matmul_io.glsl"

void main() {
  // Push constants read once: lavapipe makes each read inside a loop an eight-lane gather.
  uint m = pc.m, n = pc.n, depth = pc.k;
  uint lane = gl_SubgroupInvocationID;
  uint row0 = ((gl_WorkGroupID.y * gl_NumSubgroups + gl_SubgroupID) * SG + lane) * RM;
  uint col0 = (pc.tile_n0 + gl_WorkGroupID.x) * NC;
  uint z = gl_WorkGroupID.z;
  uint a_at[RM], b_at[OWN];
  [[unroll]] for (uint r = 0u; r < RM; ++r) a_at[r] = pc.a_base + z * pc.a_bs + min(row0 + r, m - 1u) * pc.a_rs;
  // Quad u = lane + SG t of the step: A·Bᵀ: row col0 + u of B; A·B: row u / NQ of the step, quad
  // u % NQ of the tile (n is a multiple of 4 there). Rows of A·Bᵀ advance by 4 elements a step,
  // those of A·B by 4 rows.
  uint b_step = B_T ? 4u : 4u * pc.b_rs;
  [[unroll]] for (uint t = 0u; t < OWN; ++t) {
    uint u = lane + SG * t;
    b_at[t] = pc.b_base + z * pc.b_bs +
              (B_T ? min(col0 + u, n - 1u) * pc.b_rs : min(u / NQ, 3u) * pc.b_rs + min(col0 + 4u * (u % NQ), n - 4u));
  }

  vec4 acc[RM][NQ];  // acc[r][jq][s]: row row0 + r, column col0 + 4 jq + s
  [[unroll]] for (uint r = 0u; r < RM; ++r)
    [[unroll]] for (uint jq = 0u; jq < NQ; ++jq) acc[r][jq] = vec4(0.0);
  for (uint c = 0u, b_off = 0u; c < depth; c += 4u, b_off += b_step) {
    vec4 a[RM], own[OWN];
    [[unroll]] for (uint r = 0u; r < RM; ++r) a[r] = load_a4(a_at[r] + c);
    [[unroll]] for (uint t = 0u; t < OWN; ++t) own[t] = load_b4(b_at[t] + b_off);
    if (!B_T) {
      [[unroll]] for (uint t = 0u; t < 4u; ++t)
        [[unroll]] for (uint jq = 0u; jq < NQ; ++jq) {
          vec4 b = subgroupShuffle(own[(t * NQ + jq) / SG], (t * NQ + jq) % SG);
          [[unroll]] for (uint r = 0u; r < RM; ++r) acc[r][jq] += a[r][t] * b;
        }
      continue;
    }
    [[unroll]] for (uint jq = 0u; jq < NQ; ++jq) {
      // Column j = 4 jq + s was loaded by lane j % SG as its row j / SG.
      vec4 b0 = subgroupShuffle(own[(4u * jq) / SG], (4u * jq) % SG);
      vec4 b1 = subgroupShuffle(own[(4u * jq + 1u) / SG], (4u * jq + 1u) % SG);
      vec4 b2 = subgroupShuffle(own[(4u * jq + 2u) / SG], (4u * jq + 2u) % SG);
      vec4 b3 = subgroupShuffle(own[(4u * jq + 3u) / SG], (4u * jq + 3u) % SG);
      [[unroll]] for (uint r = 0u; r < RM; ++r) acc[r][jq] += vec4(dot(a[r], b0), dot(a[r], b1), dot(a[r], b2), dot(a[r], b3));
    }
  }
  uint c0 = pc.c_base + z * pc.c_bs, c_rs = pc.c_rs;
  float alpha = pc.alpha;
  [[unroll]] for (uint r = 0u; r < RM; ++r)
    [[unroll]] for (uint jq = 0u; jq < NQ; ++jq)
      [[unroll]] for (uint s = 0u; s < 4u; ++s)
        if (row0 + r < m && col0 + 4u * jq + s < n) store_c(c0 + (row0 + r) * c_rs + col0 + 4u * jq + s, alpha * acc[r][jq][s]);
}

#version 450
// C = alpha·A·B' (+ C): each invocation keeps an RM×4 block of C and walks the shared dimension
// once. lavapipe runs invocations as SIMD lanes and storage-buffer loads are what costs there:
// 8 rows per invocation reuse each B load twice as often as 4 (P = q·rel_keysᵀ ran ~1.5× faster),
// while shared memory and barriers do not pay. A workgroup of 64 invocations is an (8·ty) × (4·tx)
// tile (push constants, not specialization constants: one pipeline serves every tile shape).
// f32 accumulation whatever the storage; rows and columns past the edge are clamped on load and
// skipped on store, so the inner loop has no branches.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "relpos_contract/matmul.h"
#include "relpos_push/matmul.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_MATMUL)
const uint RM = RELPOS_MATMUL_ROWS;  // rows of C per invocation

#include "relpos/matmul_io.glsl"
// Element-wise views of the same bindings, for operands that are not quad-aligned.
layout(std430, binding = BINDING_A) readonly buffer A32 { float a32[]; };
layout(std430, binding = BINDING_A) readonly buffer A16 { uint a16[]; };
layout(std430, binding = BINDING_B) readonly buffer B32 { float b32[]; };
layout(std430, binding = BINDING_B) readonly buffer B16 { uint b16[]; };

float load_a(uint e) { return A_F16 ? unpackHalf2x16(a16[e >> 1])[e & 1u] : a32[e]; }
float load_b(uint e) { return B_F16 ? unpackHalf2x16(b16[e >> 1])[e & 1u] : b32[e]; }

void main() {
  uint tx = gl_LocalInvocationID.x % pc.tx, ty = gl_LocalInvocationID.x / pc.tx;
  uint row0 = (gl_WorkGroupID.y * pc.ty + ty) * RM;
  uint col0 = ((pc.tile_n0 + gl_WorkGroupID.x) * pc.tx + tx) * 4u;
  if (ty >= pc.ty || row0 >= pc.m || col0 >= pc.n) return;
  uint z = gl_WorkGroupID.z;
  uint a_row[RM], b_at[4];
  [[unroll]] for (uint r = 0u; r < RM; ++r) a_row[r] = pc.a_base + z * pc.a_bs + min(row0 + r, pc.m - 1u) * pc.a_rs;
  uint b0 = pc.b_base + z * pc.b_bs;
  [[unroll]] for (uint s = 0u; s < 4u; ++s) b_at[s] = B_T ? b0 + min(col0 + s, pc.n - 1u) * pc.b_rs : b0 + min(col0 + s, pc.n - 1u);

  // The loops read no push constant: lavapipe makes each such read an eight-lane gather.
  uint depth = pc.k, b_rs = pc.b_rs;
  vec4 acc[RM];  // acc[r][s]
  [[unroll]] for (uint r = 0u; r < RM; ++r) acc[r] = vec4(0.0);
  if (VEC4 && B_T) {
    for (uint c = 0; c < depth; c += 4u) {
      vec4 a[RM], b[4];
      [[unroll]] for (uint r = 0u; r < RM; ++r) a[r] = load_a4(a_row[r] + c);
      [[unroll]] for (uint s = 0u; s < 4u; ++s) b[s] = load_b4(b_at[s] + c);
      [[unroll]] for (uint r = 0u; r < RM; ++r) acc[r] += vec4(dot(a[r], b[0]), dot(a[r], b[1]), dot(a[r], b[2]), dot(a[r], b[3]));
    }
  } else if (VEC4) {
    // NN with n % 4 == 0: the four columns are one quad of each B row.
    for (uint c = 0; c < depth; c += 4u) {
      vec4 a[RM];
      [[unroll]] for (uint r = 0u; r < RM; ++r) a[r] = load_a4(a_row[r] + c);
      [[unroll]] for (uint t = 0u; t < 4u; ++t) {
        vec4 b = load_b4(b_at[0] + (c + t) * b_rs);
        [[unroll]] for (uint r = 0u; r < RM; ++r) acc[r] += a[r][t] * b;
      }
    }
  } else {
    for (uint c = 0; c < depth; ++c) {
      vec4 b;
      [[unroll]] for (uint s = 0u; s < 4u; ++s) b[s] = load_b(B_T ? b_at[s] + c : b_at[s] + c * b_rs);
      [[unroll]] for (uint r = 0u; r < RM; ++r) acc[r] += load_a(a_row[r] + c) * b;
    }
  }
  // Unrolled, each element under its own bound: a loop bounded by the matrix made acc[r][s] an
  // indexed array, which NVK's compiler kept in 128 bytes of local memory.
  const uint c0 = pc.c_base + z * pc.c_bs, m = pc.m, n = pc.n, c_rs = pc.c_rs;
  const float alpha = pc.alpha;
  [[unroll]] for (uint r = 0u; r < RM; ++r)
    [[unroll]] for (uint s = 0u; s < 4u; ++s)
      if (row0 + r < m && col0 + s < n) store_c(c0 + (row0 + r) * c_rs + col0 + s, alpha * acc[r][s]);
}

#version 450
// meliad's einsum hqd,kd->hqk: out[h, i, j] = rot_q[h, i] · ks[j], where rot_q rotates the query
// encoding qs[i] = [qx | qy] by the head's [a | b]: [a·qx - b·qy, b·qx + a·qy]. Each invocation
// computes a block of 4 output rows (r = h·Q + i) by 4 keys, rotating its queries on the fly, over
// the features [first_feature, first_feature + features): the host splits d/2 into such chunks so
// that the feature loop stays under RELPOS_MAX_LOOP_ITERATIONS; the first chunk writes, later ones
// (ACCUMULATE) add in float32.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define RELPOS_FOURIER_DIRECT
#include "relpos_contract/fourier.h"
#include "relpos_push/fourier.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_FOURIER_DIRECT)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_FOURIER_DIRECT)

layout(std430, binding = BINDING_QUERIES) readonly buffer Queries { float qs[]; };   // [Q, d]
layout(std430, binding = BINDING_KEYS) readonly buffer Keys { float ks[]; };         // [K, d]
layout(std430, binding = BINDING_ROTATION) readonly buffer Rotation { float rot[]; }; // [heads, d]
layout(std430, binding = BINDING_OUT) buffer Out { float outv[]; };                  // this chunk's rows of [rows, K]

void main() {
  uint block = pc.first_block + gl_GlobalInvocationID.x;
  if (block >= pc.blocks) return;
  uint rb = block / pc.key_blocks, kb = block % pc.key_blocks;
  uint half_dim = pc.dim / 2u;
  uint p_first = pc.first_feature, p_end = pc.first_feature + pc.features;
  uint q_base[4], r_base[4], k_base[4];
  [[unroll]] for (uint a = 0u; a < 4u; ++a) {
    uint local_row = min(4u * rb + a, pc.rows - 1u);
    uint r = pc.first_row + local_row;
    q_base[a] = (r % pc.queries) * pc.dim;
    r_base[a] = (r / pc.queries) * pc.dim;
    k_base[a] = min(4u * kb + a, pc.keys - 1u) * pc.dim;
  }
  mat4 acc = mat4(0.0);  // acc[row][key]
  for (uint p = p_first; p < p_end; ++p) {  // bounded: `features` iterations (host-planned)
    vec4 kx = vec4(ks[k_base[0] + p], ks[k_base[1] + p], ks[k_base[2] + p], ks[k_base[3] + p]);
    vec4 ky = vec4(ks[k_base[0] + half_dim + p], ks[k_base[1] + half_dim + p], ks[k_base[2] + half_dim + p],
                   ks[k_base[3] + half_dim + p]);
    [[unroll]] for (uint a = 0u; a < 4u; ++a) {
      float qx = qs[q_base[a] + p], qy = qs[q_base[a] + half_dim + p];
      float ra = rot[r_base[a] + p], rb_ = rot[r_base[a] + half_dim + p];
      acc[a] += (ra * qx - rb_ * qy) * kx + (rb_ * qx + ra * qy) * ky;
    }
  }
  [[unroll]] for (uint a = 0u; a < 4u; ++a) {
    uint local_row = 4u * rb + a;
    [[unroll]] for (uint c = 0u; c < 4u; ++c) {
      uint j = 4u * kb + c;
      if (local_row < pc.rows && j < pc.keys) {
        uint at = local_row * pc.keys + j;
        outv[at] = ACCUMULATE != 0u ? outv[at] + acc[a][c] : acc[a][c];
      }
    }
  }
}

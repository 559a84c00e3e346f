#version 450
// tensor2tensor's materialised relative embeddings E[i, j, :] = table[idx(i, j), :], [Q, K, D]
// (the benchmark baseline the cheap form is measured against). One invocation per (i, j) pair.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/shaw.h"
#include "relpos_push/shaw_materialise.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_SHAW_MATERIALISE)  // VEC4: depth and e_base are multiples of 4
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_SHAW_MATERIALISE)

layout(std430, binding = BINDING_TABLE) readonly buffer Table { float table[]; };
layout(std430, binding = BINDING_TABLE) readonly buffer Table4 { vec4 table4[]; };
layout(std430, binding = BINDING_E) writeonly buffer E { float e[]; };
layout(std430, binding = BINDING_E) writeonly buffer E4 { vec4 e4[]; };

void main() {
  uint local_pair = gl_GlobalInvocationID.x;
  if (local_pair >= pc.pairs) return;
  uint pair = pc.pair0 + local_pair;
  int i = int(pair / pc.keys), j = int(pair % pc.keys);
  uint idx = uint(clamp(j - i - pc.query_offset, -pc.max_rel, pc.max_rel) + pc.max_rel);
  uint src = idx * pc.depth, dst = pc.e_base + local_pair * pc.depth;
  if (VEC4) {
    for (uint c = 0; c < pc.depth; c += 4u) e4[(dst + c) >> 2] = table4[(src + c) >> 2];
    return;
  }
  for (uint c = 0; c < pc.depth; ++c) e[dst + c] = table[src + c];
}

// The operands of the matmul kernels (matmul.comp, matmul_shared.comp, matmul_tiled.comp): A and B
// read as quads in float32 or float16 storage, C written or added in either. The including shader
// declares its constants (with A_F16, B_F16 and C_MODE, relpos_contract/matmul.h) first. An f16 C is written a half at a time by read-modify-write of its 32-bit word, so the
// two halves of a word must belong to one invocation (the host stages C otherwise).
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_MATMUL)
layout(std430, binding = BINDING_A) readonly buffer A32x4 { vec4 a32x4[]; };
layout(std430, binding = BINDING_A) readonly buffer A16x4 { uvec2 a16x4[]; };
layout(std430, binding = BINDING_B) readonly buffer B32x4 { vec4 b32x4[]; };
layout(std430, binding = BINDING_B) readonly buffer B16x4 { uvec2 b16x4[]; };
layout(std430, binding = BINDING_C) buffer C32 { float c32[]; };
layout(std430, binding = BINDING_C) buffer C16 { uint c16[]; };

// e is a multiple of 4.
vec4 load_a4(uint e) {
  if (A_F16) { uvec2 w = a16x4[e >> 2]; return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
  return a32x4[e >> 2];
}
vec4 load_b4(uint e) {
  if (B_F16) { uvec2 w = b16x4[e >> 2]; return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
  return b32x4[e >> 2];
}

void store_c(uint e, float v) {
  if (C_MODE == 0u) {
    c32[e] = v;
  } else if (C_MODE == 2u) {
    c32[e] = c32[e] + v;
  } else {
    uint w = e >> 1, lane = e & 1u;
    uint old = c16[w];
    if (C_MODE == 3u) v += unpackHalf2x16(old)[lane];
    uint h = packHalf2x16(vec2(v, 0.0)) & 0xffffu;
    c16[w] = lane == 0u ? (old & 0xffff0000u) | h : (old & 0xffffu) | (h << 16);
  }
}

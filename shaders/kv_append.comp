#version 450
// Appends a step's keys and values to a paged KV cache [num_blocks, block_size, kv_heads, D] at each
// sequence's length, rotating the keys (and, as their own rows, the step's queries in place) by
// RoPE on the way (relpos/kv_cache.hpp). A row belongs to one invocation, so f16 rows (D even)
// own whole words. A key whose block entry lies outside the cache or whose position lies past the
// table's capacity is not written.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "relpos_contract/kv_append.h"
#include "relpos_push/kv_append.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_KV_APPEND)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_KV_APPEND)

layout(std430, binding = BINDING_K_CACHE) buffer KCache { uint k_cache[]; };
layout(std430, binding = BINDING_V_CACHE) buffer VCache { uint v_cache[]; };
layout(std430, binding = BINDING_K) readonly buffer K { uint k_new[]; };
layout(std430, binding = BINDING_V) readonly buffer V { uint v_new[]; };
layout(std430, binding = BINDING_BLOCK_TABLE) readonly buffer Table { int block_table[]; };
layout(std430, binding = BINDING_CACHE_LENGTHS) readonly buffer Lengths { int cache_lengths[]; };
layout(std430, binding = BINDING_Q) buffer Q { uint q[]; };
layout(std430, binding = BINDING_INV_FREQ) readonly buffer Freq { float inv_freq[]; };

#include "relpos/rope_angles.glsl"

// Rows as words: a word is one float32 or two float16 values. WHICH selects the buffer (a literal
// at every call, so each call reads or writes one binding).
const uint SRC_K = 0u, SRC_Q = 1u, DST_K = 0u, DST_Q = 1u;
float load_value(uint which, uint base, uint e) {
  if (F16 != 0u) {
    const uint w = which == SRC_K ? k_new[(base + e) >> 1] : q[(base + e) >> 1];
    return unpackHalf2x16(w)[e & 1u];
  }
  return uintBitsToFloat(which == SRC_K ? k_new[base + e] : q[base + e]);
}
void store_value(uint which, uint base, uint e, float x) {
  if (F16 != 0u) {
    const uint at = (base + e) >> 1;
    const uint old = which == DST_K ? k_cache[at] : q[at];
    const uint h = packHalf2x16(vec2(x, 0.0)) & 0xffffu;
    const uint w = (e & 1u) == 0u ? (old & 0xffff0000u) | h : (old & 0xffffu) | (h << 16);
    if (which == DST_K) k_cache[at] = w; else q[at] = w;
  } else {
    if (which == DST_K) k_cache[base + e] = floatBitsToUint(x); else q[base + e] = floatBitsToUint(x);
  }
}

// Rotates the row at `src` (k_new or q) into `dst` (k_cache or q) at position pos: pairs four at a
// time, one sincos4 for each four; then, unless in place, the pass-through values.
void rotate_row(uint src_which, uint src, uint dst_which, uint dst, bool in_place, int pos) {
  const uint half_rot = pc.half_rot;
  for (uint k0 = 0u; k0 < half_rot; k0 += 4u) {
    vec4 f = vec4(inv_freq[k0], inv_freq[min(k0 + 1u, half_rot - 1u)], inv_freq[min(k0 + 2u, half_rot - 1u)],
                  inv_freq[min(k0 + 3u, half_rot - 1u)]);
    precise vec4 a = float(pos) * f;  // HuggingFace's float32 product, one rounding
    vec4 s, c;
    sincos4(a, s, c);
    c *= pc.scale;
    s *= pc.scale;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      const uint k = k0 + i;
      if (k >= half_rot) break;
      const uint ea = GPTJ != 0u ? 2u * k : k, eb = GPTJ != 0u ? 2u * k + 1u : k + half_rot;
      const float x = load_value(src_which, src, ea), y = load_value(src_which, src, eb);
      store_value(dst_which, dst, ea, x * c[i] - y * s[i]);
      store_value(dst_which, dst, eb, x * s[i] + y * c[i]);
    }
  }
  if (!in_place)
    for (uint e = 2u * half_rot; e < pc.head_dim; ++e) store_value(dst_which, dst, e, load_value(src_which, src, e));
}

void main() {
  const uint row = pc.first_row + gl_GlobalInvocationID.x;
  if (row >= pc.kv_rows + pc.q_rows) return;
  const bool is_q = row >= pc.kv_rows;
  const uint r = is_q ? row - pc.kv_rows : row;
  const uint t = r % pc.tokens, bh = r / pc.tokens;
  const uint b = bh / (is_q ? pc.heads : pc.kv_heads), hk = bh % pc.kv_heads;
  const int pos = cache_lengths[b] + int(t);
  const uint words = F16 != 0u ? pc.head_dim / 2u : pc.head_dim;  // per row
  if (is_q) {
    if (ROPE != 0u) rotate_row(SRC_Q, r * pc.head_dim, DST_Q, r * pc.head_dim, true, pos);
    return;
  }
  const uint capacity = pc.max_blocks * pc.block_size;
  if (pos < 0 || uint(pos) >= capacity) return;
  const uint j = uint(pos);
  const int entry = block_table[b * pc.max_blocks + j / pc.block_size];
  if (entry < 0 || uint(entry) >= pc.num_blocks) return;
  const uint dst = ((uint(entry) * pc.block_size + j % pc.block_size) * pc.kv_heads + hk) * pc.head_dim;
  const uint src = r * pc.head_dim;
  const uint dst_w = F16 != 0u ? dst / 2u : dst, src_w = F16 != 0u ? src / 2u : src;
  for (uint w = 0u; w < words; ++w) v_cache[dst_w + w] = v_new[src_w + w];
  if (ROPE != 0u) rotate_row(SRC_K, src, DST_K, dst, false, pos);
  else for (uint w = 0u; w < words; ++w) k_cache[dst_w + w] = k_new[src_w + w];
}

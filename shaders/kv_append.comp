#version 450
// Appends a step's keys and values to a paged KV cache [num_blocks, block_size, kv_heads, row] at
// each sequence's length, in the cache's format (cache_format.glsl), rotating the keys (and, as
// their own rows, the step's queries in place) by RoPE on the way (relpos/kv_cache.hpp). A row
// belongs to one invocation; words a q8_0 or fp8 row shares with its neighbour are written by
// atomics of the row's own bytes. A key whose block entry lies outside the cache or whose position
// lies past the table's capacity is not written; ragged rows past packed_rows are not read.
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
layout(std430, binding = BINDING_CACHE_LENGTHS) buffer Lengths { int cache_lengths[]; };
layout(std430, binding = BINDING_Q) buffer Q { uint q[]; };
layout(std430, binding = BINDING_CONSTANTS) readonly buffer Constants { float constants[]; };  // inv_freq, then 1 / scales
layout(std430, binding = BINDING_NEW_TOKENS) readonly buffer NewTokens { int new_tokens[]; };

#include "relpos/cache_format.glsl"
#include "relpos/rope_angles.glsl"

RELPOS_CACHE_WRITER(kc, k_cache)
RELPOS_CACHE_WRITER(vc, v_cache)

shared uint partial[WG_X];

// Sequence s's new tokens: a ragged count outside [0, tokens] counts as none.
uint count_of(uint s) {
  if (RAGGED == 0u) return pc.tokens;
  const int n = new_tokens[s];
  return n < 0 || uint(n) > pc.tokens ? 0u : uint(n);
}

// Inputs as words: a word is one float32 or two float16 values. WHICH selects the buffer (a literal
// at every call, so each call reads or writes one binding).
const uint SRC_K = 0u, SRC_Q = 1u, SRC_V = 2u;
float load_value(uint which, uint base, uint e) {
  const uint i = F16 != 0u ? (base + e) >> 1 : base + e;
  const uint w = which == SRC_K ? k_new[i] : which == SRC_V ? v_new[i] : q[i];
  return F16 != 0u ? unpackHalf2x16(w)[e & 1u] : uintBitsToFloat(w);
}
void store_q(uint base, uint e, float x) {
  if (F16 != 0u) {
    const uint at = (base + e) >> 1;
    const uint h = packHalf2x16(vec2(x, 0.0)) & 0xffffu;
    q[at] = (e & 1u) == 0u ? (q[at] & 0xffff0000u) | h : (q[at] & 0xffffu) | (h << 16);
  } else {
    q[base + e] = floatBitsToUint(x);
  }
}

// cos and sin of pair k at position pos, times the attention factor.
vec2 rotation(uint k, int pos) {
  precise float a = float(pos) * constants[k];  // HuggingFace's float32 product, one rounding
  vec4 s, c;
  sincos4(vec4(a), s, c);
  return vec2(c.x, s.x) * pc.scale;
}

// Rotates the query row at `base` in place: pairs four at a time, one sincos4 for each four.
void rotate_q(uint base, int pos) {
  const uint half_rot = pc.half_rot;
  for (uint k0 = 0u; k0 < half_rot; k0 += 4u) {
    vec4 f = vec4(constants[k0], constants[min(k0 + 1u, half_rot - 1u)], constants[min(k0 + 2u, half_rot - 1u)],
                  constants[min(k0 + 3u, half_rot - 1u)]);
    precise vec4 a = float(pos) * f;
    vec4 s, c;
    sincos4(a, s, c);
    c *= pc.scale;
    s *= pc.scale;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      const uint k = k0 + i;
      if (k >= half_rot) break;
      const uint ea = GPTJ != 0u ? 2u * k : k, eb = GPTJ != 0u ? 2u * k + 1u : k + half_rot;
      const float x = load_value(SRC_Q, base, ea), y = load_value(SRC_Q, base, eb);
      store_q(base, ea, x * c[i] - y * s[i]);
      store_q(base, eb, x * s[i] + y * c[i]);
    }
  }
}

// Value e of the new row at `src`: a key rotated to position pos, or a value as it is.
float row_value(bool key, uint src, uint e, int pos) {
  if (!key) return load_value(SRC_V, src, e);
  if (ROPE == 0u || e >= 2u * pc.half_rot) return load_value(SRC_K, src, e);
  const uint k = GPTJ != 0u ? e >> 1 : e % pc.half_rot;
  const uint ea = GPTJ != 0u ? 2u * k : k, eb = GPTJ != 0u ? 2u * k + 1u : k + pc.half_rot;
  const float x = load_value(SRC_K, src, ea), y = load_value(SRC_K, src, eb);
  const vec2 cs = rotation(k, pos);
  return e == ea ? x * cs.x - y * cs.y : x * cs.y + y * cs.x;
}

void store(bool key, uint at, uint bits, uint count) {
  if (key) kc_store(at, bits, count); else vc_store(at, bits, count);
}

// Encodes the row into the cache at byte `at` (inv_scale: fp8's 1 / scale).
void write_row(bool key, uint src, uint at, int pos, float inv_scale) {
  const uint D = pc.head_dim;
  if (FORMAT == CACHE_F32) {
    for (uint e = 0u; e < D; ++e) store(key, at + 4u * e, floatBitsToUint(row_value(key, src, e, pos)), 4u);
  } else if (FORMAT == CACHE_F16 || FORMAT == CACHE_BF16) {
    for (uint e = 0u; e < D; e += 2u) {
      const float a = row_value(key, src, e, pos), b = row_value(key, src, e + 1u, pos);
      const uint bits = FORMAT == CACHE_F16 ? cache_encode_f16(a) | (cache_encode_f16(b) << 16)
                                            : cache_encode_bf16(a) | (cache_encode_bf16(b) << 16);
      store(key, at + 2u * e, bits, 4u);
    }
  } else if (FORMAT == CACHE_FP8_E4M3) {
    for (uint e = 0u; e < D; e += 2u) {
      precise float a = row_value(key, src, e, pos) * inv_scale;
      precise float b = row_value(key, src, e + 1u, pos) * inv_scale;
      store(key, at + e, cache_encode_fp8(a) | (cache_encode_fp8(b) << 8), 2u);
    }
  } else {  // q8_0: a block's values twice, for its scale and for its int8
    for (uint blk = 0u; blk < D / 32u; ++blk) {
      const uint e0 = blk * 32u, dst = at + blk * 34u;
      float amax = 0.0;
      bool any_nan = false;
      for (uint j = 0u; j < 32u; ++j) {
        const float x = row_value(key, src, e0 + j, pos);
        amax = max(amax, q8_magnitude(x));
        any_nan = any_nan || q8_is_nan(x);
      }
      const float d = q8_block_scale(amax, any_nan), id = q8_inverse(d);
      store(key, dst, cache_encode_f16(d), 2u);
      for (uint j = 0u; j < 32u; j += 4u) {
        const vec4 x = vec4(row_value(key, src, e0 + j, pos), row_value(key, src, e0 + j + 1u, pos),
                            row_value(key, src, e0 + j + 2u, pos), row_value(key, src, e0 + j + 3u, pos));
        store(key, dst + 2u + j, q8_encode4(x, id), 4u);
      }
    }
  }
}

void main() {
  if (ADVANCE != 0u) {
    const uint s = pc.first_sequence + gl_GlobalInvocationID.x;
    if (s < pc.batch) {
      // Saturated: a length the host never checked that wrapped negative would read as an empty
      // sequence to the attention after it (which clamps lengths into [0, keys]).
      const int length = cache_lengths[s], n = int(count_of(s));
      cache_lengths[s] = length > 0x7fffffff - n ? 0x7fffffff : length + n;
    }
    return;
  }
  const uint b = pc.first_sequence + gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
  // cu: the first input row of sequence b; ragged, the sum of the earlier counts, summed by the
  // whole workgroup (every lane reaches each barrier).
  uint cu = b * pc.tokens;
  if (RAGGED != 0u) {
    uint sum = 0u;
    for (uint i = lane; i < b; i += WG_X) sum += count_of(i);
    partial[lane] = sum;
    barrier();
    [[unroll]] for (uint s = WG_X / 2u; s > 0u; s >>= 1) {
      if (lane < s) partial[lane] += partial[lane + s];
      barrier();
    }
    cu = partial[0];
  }
  const uint n = count_of(b);
  const uint r = pc.first_row + gl_GlobalInvocationID.x;
  const uint kv_rows = pc.kv_heads * n;
  if (r >= kv_rows + pc.with_q * pc.heads * n) return;
  const bool is_q = r >= kv_rows;
  const uint rr = is_q ? r - kv_rows : r;
  const uint h = rr / n, t = rr % n;
  const uint heads = is_q ? pc.heads : pc.kv_heads;
  if (RAGGED != 0u && cu + t >= pc.packed_rows) return;
  const uint src = (RAGGED != 0u ? (cu + t) * heads + h : (b * heads + h) * pc.tokens + t) * pc.head_dim;
  const int pos = cache_lengths[b] - (pc.lengths_include_new != 0u ? int(n) : 0) + int(t);
  if (is_q) {
    if (ROPE != 0u) rotate_q(src, pos);
    return;
  }
  const uint capacity = pc.max_blocks * pc.block_size;
  if (pos < 0 || uint(pos) >= capacity) return;
  const uint j = uint(pos);
  const int entry = block_table[b * pc.max_blocks + j / pc.block_size];
  if (entry < 0 || uint(entry) >= pc.num_blocks) return;
  const uint at = ((uint(entry) * pc.block_size + j % pc.block_size) * pc.kv_heads + h) * cache_row_bytes(FORMAT, pc.head_dim);
  write_row(false, src, at, pos, FORMAT == CACHE_FP8_E4M3 ? constants[pc.scales_at + pc.kv_heads + h] : 1.0);
  write_row(true, src, at, pos, FORMAT == CACHE_FP8_E4M3 ? constants[pc.scales_at + h] : 1.0);
}

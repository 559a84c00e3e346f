// Words of four values in 16-bit storage (uvec2): float16, or bfloat16 (the top half of a
// float32), as RELPOS_STORE_F16 / RELPOS_STORE_BF16 say (relpos_contract/attention.h).
#ifndef RELPOS_STORAGE16_GLSL
#define RELPOS_STORAGE16_GLSL
#include "relpos/cache_format.glsl"

vec4 unpack4(uvec2 u) { return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)); }
vec4 unpack4_bf16(uvec2 u) { return uintBitsToFloat(uvec4(u.x << 16, u.x & 0xffff0000u, u.y << 16, u.y & 0xffff0000u)); }
vec4 unpack4_storage(uint store, uvec2 u) { return store == RELPOS_STORE_BF16 ? unpack4_bf16(u) : unpack4(u); }
// bfloat16 rounded to nearest even (the host's float_to_bf16, bit for bit); float16 by
// packHalf2x16.
uvec2 pack4_storage(uint store, vec4 x) {
  if (store == RELPOS_STORE_BF16)
    return uvec2(cache_encode_bf16(x.x) | (cache_encode_bf16(x.y) << 16), cache_encode_bf16(x.z) | (cache_encode_bf16(x.w) << 16));
  return uvec2(packHalf2x16(x.xy), packHalf2x16(x.zw));
}
#endif

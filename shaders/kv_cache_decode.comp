#version 450
// Decodes cache rows (any cache format) to float32 through cache_format.glsl's readers: the host's
// decode_cache_row, bit for bit, on the device.
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/kv_cache_decode.h"
#include "relpos_push/kv_cache_decode.h"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_KV_CACHE_DECODE)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_KV_CACHE_DECODE)

layout(std430, binding = BINDING_CACHE) readonly buffer Cache { uint cache[]; };
layout(std430, binding = BINDING_SCALES) readonly buffer Scales { float scales[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer Out { float out_values[]; };

#include "relpos/cache_format.glsl"

RELPOS_CACHE_READER(cache_row, cache)

void main() {
  const uint u = pc.first + gl_GlobalInvocationID.x;
  if (u >= pc.units) return;
  const uint row = u / pc.units_per_row, unit = u % pc.units_per_row;
  const uint at = row * cache_row_bytes(FORMAT, pc.head_dim);
  const float scale = FORMAT == CACHE_FP8_E4M3 ? scales[row % pc.kv_heads] : 1.0;
  const uint out_at = row * pc.head_dim;
  if (PAIRS != 0u) {
    const vec2 x = cache_row_decode2(FORMAT, at, unit, scale);
    out_values[out_at + 2u * unit] = x.x;
    out_values[out_at + 2u * unit + 1u] = x.y;
  } else {
    const vec4 x = cache_row_decode4(FORMAT, at, unit, scale);
    for (uint i = 0u; i < 4u; ++i) out_values[out_at + 4u * unit + i] = x[i];
  }
}

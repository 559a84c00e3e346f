// Output side of the per-distance expansion: the output binding seen as quads of f32/i32 (uvec4),
// quads of f16 (uvec2) and single 32-bit words, and the store of one quad in each MODE.
const uint COPY32 = 0, WRITE_F16 = 1, ADD_F32 = 2, ADD_F16 = 3;

layout(std430, binding = BINDING_OUT) buffer Out4 { uvec4 out4[]; };
layout(std430, binding = BINDING_OUT) buffer Out2 { uvec2 out2[]; };
layout(std430, binding = BINDING_OUT) buffer Out1 { uint out1[]; };

// Stores (or adds) the four 32-bit values v at quad q of the output.
void store_quad(uint q, uvec4 v) {
  if (MODE == COPY32) {
    out4[q] = v;
  } else if (MODE == ADD_F32) {
    out4[q] = floatBitsToUint(uintBitsToFloat(out4[q]) + uintBitsToFloat(v));
  } else {
    vec4 f = uintBitsToFloat(v);
    if (MODE == ADD_F16) {
      uvec2 old = out2[q];
      f += vec4(unpackHalf2x16(old.x), unpackHalf2x16(old.y));
    }
    out2[q] = uvec2(packHalf2x16(f.xy), packHalf2x16(f.zw));
  }
}

uint half_bits(float v, uint old_pair, uint lane) {
  uint h = packHalf2x16(vec2(v, 0.0)) & 0xffffu;
  return lane == 0u ? (old_pair & 0xffff0000u) | h : (old_pair & 0xffffu) | (h << 16);
}

// Stores the first n (< 4) values of quad q one by one (the end of a chunk).
void store_partial(uint q, uvec4 v, uint n) {
  for (uint k = 0; k < n; ++k) {  // bounded: n < 4
    uint e = 4u * q + k;
    if (MODE == COPY32) {
      out1[e] = v[k];
    } else if (MODE == ADD_F32) {
      out1[e] = floatBitsToUint(uintBitsToFloat(out1[e]) + uintBitsToFloat(v[k]));
    } else {
      uint w = e >> 1, lane = e & 1u;
      float x = uintBitsToFloat(v[k]);
      if (MODE == ADD_F16) x += unpackHalf2x16(out1[w])[lane];
      out1[w] = half_bits(x, out1[w], lane);
    }
  }
}

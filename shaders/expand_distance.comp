#version 450
// Expands per-distance rows into a [rows, keys] tensor: value(r, j) = row[h][(Q - 1 - i) + j] with
// r = (b, h, i). Each invocation produces whole quads of four consecutive elements of the flat
// output and stores each with one 16-byte (f32, i32) or 8-byte (f16) store; only the last,
// partial quad of a chunk falls back to scalar stores.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/expand.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;  // 0: copy 32-bit values; 1: write f16; 2: add into f32; 3: add into f16
layout(constant_id = 2) const uint QUADS = 4;  // quads per invocation

const uint COPY32 = 0, WRITE_F16 = 1, ADD_F32 = 2, ADD_F16 = 3;

layout(std430, binding = 0) readonly buffer Rows { uint row[]; };
layout(std430, binding = 1) buffer Out4 { uvec4 out4[]; };
layout(std430, binding = 1) buffer Out2 { uvec2 out2[]; };
layout(std430, binding = 1) buffer Out1 { uint out1[]; };

uint row_base(uint r) {
  uint i = r % pc.queries;
  uint h = (r / pc.queries) % pc.heads;
  return h * pc.row_len + (pc.queries - 1u - i);
}

uint half_bits(float v, uint old_pair, uint lane) {
  uint h = packHalf2x16(vec2(v, 0.0)) & 0xffffu;
  return lane == 0u ? (old_pair & 0xffff0000u) | h : (old_pair & 0xffffu) | (h << 16);
}

void store_partial(uint q, uvec4 v, uint n) {
  for (uint k = 0; k < n; ++k) {
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

void main() {
  uint base = gl_WorkGroupID.x * gl_WorkGroupSize.x * QUADS + gl_LocalInvocationID.x;
  for (uint k = 0; k < QUADS; ++k) {
    uint q = base + k * gl_WorkGroupSize.x;
    uint e0 = 4u * q;
    if (e0 >= pc.count) return;
    uint pos = pc.first_col + e0;
    uint r = pc.first_row + pos / pc.keys;
    uint j = pos % pc.keys;
    uvec4 v;
    if (j + 3u < pc.keys) {
      uint b = row_base(r) + j;
      v = uvec4(row[b], row[b + 1u], row[b + 2u], row[b + 3u]);
    } else {
      for (uint l = 0; l < 4u; ++l) {
        v[l] = row[row_base(r) + j];
        if (++j == pc.keys) { j = 0u; ++r; }
      }
    }
    uint n = min(4u, pc.count - e0);
    if (n < 4u) { store_partial(q, v, n); return; }
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
}

#version 450
// Row softmax of f32 logits in place, with the causal and key-padding masks applied: masked
// entries become 0, and a row with every key masked becomes all zeros (never NaN). One
// invocation per row (b, h, i); the max is subtracted before exp. With VEC4 (keys and base
// multiples of 4) the visible keys are read and written a quad at a time: on lavapipe each
// invocation's loads are separate memory operations, so a quad load costs about what one float does.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/softmax.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool VEC4 = false;

layout(std430, binding = 0) buffer Logits { float x[]; };
layout(std430, binding = 0) buffer Logits4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer Lengths { uint key_lengths[]; };

void main() {
  uint row = gl_GlobalInvocationID.x;
  if (row >= pc.rows) return;
  uint g = pc.row0 + row;
  uint i = g % pc.queries;
  uint valid = pc.keys;  // keys [0, valid) are visible
  if (pc.has_lengths != 0u) valid = min(valid, key_lengths[g / (pc.queries * pc.heads)]);
  if (pc.causal != 0u) valid = uint(clamp(int(i) + pc.query_offset + 1, 0, int(valid)));
  uint base = pc.base + row * pc.keys;
  uint whole = VEC4 ? valid / 4u : 0u;  // quads entirely visible
  float mx = -3.402823466e38;
  vec4 mx4 = vec4(mx);
  for (uint q = 0; q < whole; ++q) mx4 = max(mx4, x4[(base >> 2) + q]);
  mx = max(max(mx4.x, mx4.y), max(mx4.z, mx4.w));
  for (uint j = 4u * whole; j < valid; ++j) mx = max(mx, x[base + j]);
  vec4 sum4 = vec4(0.0);
  for (uint q = 0; q < whole; ++q) sum4 += exp(x4[(base >> 2) + q] - mx);
  float sum = (sum4.x + sum4.y) + (sum4.z + sum4.w);
  for (uint j = 4u * whole; j < valid; ++j) sum += exp(x[base + j] - mx);
  float inv = valid > 0u ? 1.0 / sum : 0.0;
  for (uint q = 0; q < whole; ++q) x4[(base >> 2) + q] = exp(x4[(base >> 2) + q] - mx) * inv;
  for (uint j = 4u * whole; j < valid; ++j) x[base + j] = exp(x[base + j] - mx) * inv;
  for (uint j = valid; j < pc.keys; ++j) x[base + j] = 0.0;
}

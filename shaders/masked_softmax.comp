#version 450
// Row softmax of f32 logits in place, with the causal and key-padding masks applied: masked
// entries become 0, and a row with every key masked becomes all zeros (never NaN). One
// invocation per row (b, h, i); the max is subtracted before exp.
#extension GL_GOOGLE_include_directive : require
#include "relpos_push/softmax.h"

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer Logits { float x[]; };
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
  float mx = -3.402823466e38;
  for (uint j = 0; j < valid; ++j) mx = max(mx, x[base + j]);
  float sum = 0.0;
  for (uint j = 0; j < valid; ++j) sum += exp(x[base + j] - mx);
  float inv = valid > 0u ? 1.0 / sum : 0.0;
  for (uint j = 0; j < valid; ++j) x[base + j] = exp(x[base + j] - mx) * inv;
  for (uint j = valid; j < pc.keys; ++j) x[base + j] = 0.0;
}

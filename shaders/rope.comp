#version 450
// Rotary position embedding over strided rows. QUAD = 1 (rot_dim % 8 == 0, head_dim % 4 == 0):
// a unit is four pairs, loaded and stored as 16-byte (f32) or 8-byte (f16) quads, NeoX pairs
// (p, p + d/2) as two quads, GPT-J pairs (2p, 2p + 1) as two neighbouring quads; WIDE f16 units
// are eight pairs in two 16-byte words. QUAD = 0: a unit
// is a whole row, element by element (any even rot_dim; f16 rows of even length own whole words).
// sin and cos come from an exact integer argument reduction and Taylor polynomials, not the
// builtins, whose accuracy Vulkan leaves at 2^-11 and only on [-pi, pi].
#extension GL_GOOGLE_include_directive : require
#include "relpos_contract/rope.h"
#include "relpos_push/rope.h"

// WIDE: f16 with rot_dim % 16 == 0 and head_dim % 8 == 0, a unit is eight pairs, 16-byte loads of
// halves. L_POSITIONS and TAIL say what a dispatch needs, as constants so that lavapipe compiles
// the rest out: it runs both sides of every branch under a lane mask, so a branch no lane takes
// still costs its loads and its sincos. L_POSITIONS: the position changes along l (a position
// buffer with BHSD, l_div != 0); TAIL: units past rot_dim copy the pass-through features (out of
// place, tail_units != 0).
RELPOS_DECLARE_SPEC(RELPOS_SPEC_ROPE)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_ROPE)

layout(std430, binding = BINDING_INV_FREQ) readonly buffer Freq { float inv_freq[]; };
layout(std430, binding = BINDING_X_IN) buffer X4 { uvec4 x4[]; };
layout(std430, binding = BINDING_X_IN) buffer X2 { uvec2 x2[]; };
layout(std430, binding = BINDING_X_IN) buffer X1 { uint x1[]; };
layout(std430, binding = BINDING_OUT) buffer O4 { uvec4 o4[]; };
layout(std430, binding = BINDING_OUT) buffer O2 { uvec2 o2[]; };
layout(std430, binding = BINDING_OUT) buffer O1 { uint o1[]; };
layout(std430, binding = BINDING_POSITIONS) readonly buffer Positions { int positions[]; };

// The push constants the loops use, read once at the start of main: lavapipe turns a push-constant
// read inside a loop or a branch into an 8-lane gather (docs/ARCHITECTURE.md).
uint half_dim, rot_dim, head_dim, units, l_stride, l_div, p_mod, l_mul;
bool use_positions;
int position_offset;
float cos_scale, sin_scale;

#include "relpos/rope_angles.glsl"

int position_of(uint p, uint lb) {
  uint index = (p_mod != 0u ? p % p_mod : p) + lb * l_mul;
  return use_positions ? positions[index] : position_offset + int(index);
}

// cos and sin of four angles pos * f, times scale (and the inverse's sign).
void angles(int pos, vec4 f, out vec4 c, out vec4 s) {
  precise vec4 a = float(pos) * f;  // HuggingFace's float32 product, one rounding
  sincos4(a, s, c);
  c *= cos_scale;
  s *= sin_scale;
}

vec4 freq4(uint k0) { return vec4(inv_freq[k0], inv_freq[k0 + 1u], inv_freq[k0 + 2u], inv_freq[k0 + 3u]); }

vec4 load_quad(uint q) {
  if (F16 != 0u) {
    uvec2 w = x2[q];
    return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  }
  return uintBitsToFloat(x4[q]);
}

void store_quad(uint q, vec4 v) {
  if (F16 != 0u) {
    uvec2 w = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
    if (IN_PLACE != 0u) x2[q] = w; else o2[q] = w;
  } else {
    if (IN_PLACE != 0u) x4[q] = floatBitsToUint(v); else o4[q] = floatBitsToUint(v);
  }
}

float load1(uint e) {
  if (F16 != 0u) return unpackHalf2x16(x1[e >> 1])[e & 1u];
  return uintBitsToFloat(x1[e]);
}

void store1(uint e, float v) {
  if (F16 != 0u) {
    uint old = IN_PLACE != 0u ? x1[e >> 1] : o1[e >> 1];
    uint h = packHalf2x16(vec2(v, 0.0)) & 0xffffu;
    uint w = (e & 1u) == 0u ? (old & 0xffff0000u) | h : (old & 0xffffu) | (h << 16);
    if (IN_PLACE != 0u) x1[e >> 1] = w; else o1[e >> 1] = w;
  } else {
    if (IN_PLACE != 0u) x1[e] = floatBitsToUint(v); else o1[e] = floatBitsToUint(v);
  }
}

// Four pairs held as x and y (NeoX) or interleaved in a = (x0, y0, x1, y1), b = (x2, y2, x3, y3) (GPT-J).
void rotate4(inout vec4 a, inout vec4 b, vec4 c, vec4 s) {
  vec4 x = GPTJ != 0u ? vec4(a.xz, b.xz) : a, y = GPTJ != 0u ? vec4(a.yw, b.yw) : b;
  vec4 xr = x * c - y * s, yr = x * s + y * c;
  a = GPTJ != 0u ? vec4(xr.x, yr.x, xr.y, yr.y) : xr;
  b = GPTJ != 0u ? vec4(xr.z, yr.z, xr.w, yr.w) : yr;
}

// Four pairs of the row starting at element `row` (a multiple of 4): quads q0 and q1.
void rotate_unit(uint row, uint u, vec4 c, vec4 s) {
  uint q0 = GPTJ != 0u ? (row >> 2) + 2u * u : (row >> 2) + u;
  uint q1 = GPTJ != 0u ? q0 + 1u : q0 + (half_dim >> 2);
  vec4 a = load_quad(q0), b = load_quad(q1);
  rotate4(a, b, c, s);
  store_quad(q0, a);
  store_quad(q1, b);
}

// WIDE: eight halves per 16-byte word.
void load8(uint q, out vec4 lo, out vec4 hi) {
  uvec4 w = x4[q];
  lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
}

void store8(uint q, vec4 lo, vec4 hi) {
  uvec4 w = uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
  if (IN_PLACE != 0u) x4[q] = w; else o4[q] = w;
}

// Eight pairs of the row starting at element `row` (a multiple of 8): words w0 and w1.
void rotate_wide(uint row, uint u, vec4 c0, vec4 s0, vec4 c1, vec4 s1) {
  uint w0 = GPTJ != 0u ? (row >> 3) + 2u * u : (row >> 3) + u;
  uint w1 = GPTJ != 0u ? w0 + 1u : w0 + (half_dim >> 3);
  vec4 a0, a1, b0, b1;
  load8(w0, a0, a1);
  load8(w1, b0, b1);
  if (GPTJ != 0u) {  // w0 holds pairs 0-3, w1 pairs 4-7
    rotate4(a0, a1, c0, s0);
    rotate4(b0, b1, c1, s1);
  } else {           // w0 holds x of pairs 0-7, w1 their y
    rotate4(a0, b0, c0, s0);
    rotate4(a1, b1, c1, s1);
  }
  store8(w0, a0, a1);
  store8(w1, b0, b1);
}

void rotate_row_scalar(uint row, int pos) {
  for (uint k = 0u; k < half_dim; ++k) {
    vec4 c, s;
    angles(pos, vec4(inv_freq[k]), c, s);
    uint ea = row + (GPTJ != 0u ? 2u * k : k), eb = row + (GPTJ != 0u ? 2u * k + 1u : k + half_dim);
    float x = load1(ea), y = load1(eb);
    store1(ea, x * c.x - y * s.x);
    store1(eb, x * s.x + y * c.x);
  }
  if (IN_PLACE == 0u)
    for (uint e = rot_dim; e < head_dim; ++e) store1(row + e, load1(row + e));
}

void main() {
  half_dim = pc.half_dim;
  rot_dim = pc.rot_dim;
  head_dim = pc.head_dim;
  units = pc.units;
  l_stride = pc.l_stride;
  l_div = pc.l_div;
  p_mod = pc.p_mod;
  l_mul = pc.l_mul;
  use_positions = pc.use_positions != 0u;
  position_offset = pc.position_offset;
  cos_scale = pc.scale;
  sin_scale = pc.scale * pc.sin_sign;
  uint u = gl_GlobalInvocationID.x;
  uint pl = gl_GlobalInvocationID.y;
  if (u >= pc.units + pc.tail_units || pl >= pc.p_count) return;
  uint p = pc.p_first + pl;
  uint l0 = gl_GlobalInvocationID.z * pc.l_per_invocation;
  uint l1 = min(l0 + pc.l_per_invocation, pc.l_count);
  // b = (l_first + l) / l_div, kept incrementally so the loop divides once.
  uint lg = pc.l_first + l0;
  uint lb = l_div != 0u ? lg / l_div : 0u;
  uint lh = l_div != 0u ? lg - lb * l_div : 0u;
  uint row = pc.base + pl * pc.p_stride + l0 * l_stride;
  bool tail = TAIL != 0u && u >= units;
  int pos = position_of(p, lb);
  const uint pairs = WIDE != 0u ? 8u : 4u;  // per unit
  vec4 c0 = vec4(1.0), s0 = vec4(0.0), c1 = vec4(1.0), s1 = vec4(0.0);
  bool rotating = QUAD != 0u && !tail;
  if (rotating) angles(pos, freq4(pairs * u), c0, s0);
  if (rotating && WIDE != 0u) angles(pos, freq4(pairs * u + 4u), c1, s1);
  for (uint l = l0; l < l1; ++l, row += l_stride) {
    if (QUAD == 0u) {
      rotate_row_scalar(row, pos);
    } else if (TAIL != 0u && tail && WIDE != 0u) {
      uint w = ((row + rot_dim) >> 3) + (u - units);
      o4[w] = x4[w];  // tail units exist out of place only
    } else if (TAIL != 0u && tail) {
      uint q = ((row + rot_dim) >> 2) + (u - units);
      store_quad(q, load_quad(q));
    } else if (WIDE != 0u) {
      rotate_wide(row, u, c0, s0, c1, s1);
    } else {
      rotate_unit(row, u, c0, s0);
    }
    // The next batch's position, unless this was the block's last row: past the last batch
    // there is no position to read.
    if (L_POSITIONS != 0u && ++lh == l_div && l + 1u < l1) {
      lh = 0u;
      ++lb;
      pos = position_of(p, lb);
      if (rotating) angles(pos, freq4(pairs * u), c0, s0);
      if (rotating && WIDE != 0u) angles(pos, freq4(pairs * u + 4u), c1, s1);
    }
  }
}

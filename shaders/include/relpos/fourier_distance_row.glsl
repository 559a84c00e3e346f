// The Fourier bias of every relative position rp = rp_first + r, r < row_len, for the heads
// [first_head, first_head + head_count): row[h][r] = Σ_p a[h,p]·cos(π·rp/w_p) + b[h,p]·sin(π·rp/w_p),
// summed over the features p in [first_feature, first_feature + features). Each invocation takes
// four consecutive r (so each rotation value serves four distances) and up to HEADS_PER_PASS heads
// at a time in registers (so each cos/sin pair serves all of them). The host splits the heads and
// the features into dispatches whose loops stay under RELPOS_MAX_LOOP_ITERATIONS (src/ops/fourier.cpp,
// row_loop_iterations): the first feature chunk writes its partial sums, later ones (ACCUMULATE)
// add theirs in float32.
//
// Included by fourier_distance_row.comp (SUB = 0: each invocation loads every step and rotation
// value it uses) and fourier_distance_row_shuffle.comp (SUB = the subgroup size: the lanes of a
// subgroup load SUB frequencies' values, one frequency each, and hand them round with
// SHARED_LOAD, a subgroupShuffle). The values are the same for every lane, and lavapipe runs each
// storage load as a loop over the lanes, so sharing makes SUB times fewer loads.
#extension GL_EXT_control_flow_attributes : require
#define RELPOS_FOURIER_ROW
#include "relpos_contract/fourier.h"
#include "relpos_push/fourier.h"
#include "relpos/fourier_phase.glsl"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_FOURIER_DISTANCE_ROW)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_FOURIER_DISTANCE_ROW)

layout(std430, binding = BINDING_STEPS) readonly buffer Steps { uvec2 steps[]; };       // [d/2]
layout(std430, binding = BINDING_ROTATION) readonly buffer Rotation { float rot[]; };   // [heads, d] = [a | b]
layout(std430, binding = BINDING_ROWS) buffer Rows { float row[]; };                    // [heads, row_len]

vec4 acc[HEADS_PER_PASS];

// Adds frequency p's terms for the heads h0 .. h0 + n - 1 at rp0 .. rp0 + 3.
void add_terms(int rp0, uvec2 step, float a[HEADS_PER_PASS], float b[HEADS_PER_PASS], uint n) {
  vec2 cs0 = cos_sin_of_position(rp0, step), cs1 = cos_sin_of_position(rp0 + 1, step);
  vec2 cs2 = cos_sin_of_position(rp0 + 2, step), cs3 = cos_sin_of_position(rp0 + 3, step);
  vec4 c = vec4(cs0.x, cs1.x, cs2.x, cs3.x), s = vec4(cs0.y, cs1.y, cs2.y, cs3.y);
  [[unroll]] for (uint k = 0u; k < HEADS_PER_PASS; ++k)
    if (k < n) acc[k] += a[k] * c + b[k] * s;
}

void main() {
  // Push constants read once: inside the loops lavapipe would gather each over the lanes.
  uint row_len = pc.row_len, dim = pc.dim;
  uint h_end = pc.first_head + pc.head_count;
  uint p_first = pc.first_feature, p_end = pc.first_feature + pc.features;
  uint half_dim = dim / 2u;
  uint r0 = pc.first + 4u * gl_GlobalInvocationID.x;
  // With SUB every lane of a subgroup takes part in the shuffles; lanes past the row store nothing.
  if (SUB == 0u && r0 >= row_len) return;
  uint valid = r0 < row_len ? min(4u, row_len - r0) : 0u;
  int rp0 = pc.rp_first + int(r0);  // rp0 + 3 may pass the last rp; those lanes are not stored
  // Bounded: ceil(head_count / HEADS_PER_PASS) passes, each over `features` features, planned by
  // the host (row_loop_iterations) to stay under RELPOS_MAX_LOOP_ITERATIONS in all.
  for (uint h0 = pc.first_head; h0 < h_end; h0 += HEADS_PER_PASS) {
    uint n = min(HEADS_PER_PASS, h_end - h0);
    [[unroll]] for (uint k = 0u; k < HEADS_PER_PASS; ++k) acc[k] = vec4(0.0);
    float a[HEADS_PER_PASS], b[HEADS_PER_PASS];
    if (SUB == 0u) {
      for (uint p = p_first; p < p_end; ++p) {  // bounded: `features` iterations (host-planned)
        [[unroll]] for (uint k = 0u; k < HEADS_PER_PASS; ++k) {
          uint base = (h0 + k) * dim + p;
          a[k] = k < n ? rot[base] : 0.0;
          b[k] = k < n ? rot[base + half_dim] : 0.0;
        }
        add_terms(rp0, steps[p], a, b, n);
      }
    } else {
      // Bounded: ceil(features / SUB) blocks of at most SUB shuffled frequencies (host-planned).
      for (uint p0 = p_first; p0 < p_end; p0 += SUB) {
        uint mine = min(p0 + LANE_IN_SUBGROUP, p_end - 1u);  // this lane's frequency to load
        uvec2 my_step = steps[mine];
        float my_a[HEADS_PER_PASS], my_b[HEADS_PER_PASS];
        [[unroll]] for (uint k = 0u; k < HEADS_PER_PASS; ++k) {
          uint base = (h0 + k) * dim + mine;
          my_a[k] = k < n ? rot[base] : 0.0;
          my_b[k] = k < n ? rot[base + half_dim] : 0.0;
        }
        uint count = min(SUB, p_end - p0);
        for (uint j = 0u; j < SUB; ++j) {
          if (j >= count) break;  // uniform: every lane leaves together
          [[unroll]] for (uint k = 0u; k < HEADS_PER_PASS; ++k) {
            a[k] = SHARED_LOAD(my_a[k], j);
            b[k] = SHARED_LOAD(my_b[k], j);
          }
          add_terms(rp0, SHARED_LOAD(my_step, j), a, b, n);
        }
      }
    }
    // Bounded: at most HEADS_PER_PASS x 4 stores, counted by the host's plan.
    for (uint k = 0u; k < n; ++k)
      for (uint i = 0u; i < valid; ++i) {
        uint at = (h0 + k) * row_len + r0 + i;
        row[at] = ACCUMULATE != 0u ? row[at] + acc[k][i] : acc[k][i];
      }
  }
}

#version 450
// Log-sum-exp merge of attention computed over disjoint key blocks: PART_LANES invocations per
// 4-element word of the merged output, each merging every PART_LANES-th chunk of the parts, met
// through shared memory. Parts with lse = -inf (every key masked) weigh nothing; a row masked in
// every part gives zeros and -inf. A part whose lse is NaN (a NaN among its inputs) makes the row
// NaN, out and lse, as attention over the whole key range gives: max() may drop a NaN, and a
// comparison with -inf would have taken it for a masked part. Parts whose lse are relative to a
// reference (pc.reference) get it subtracted once, from the merged lse, or keep it (OUT_RELATIVE).
//
// Each part's own reference (PART_REFERENCES: blocks of ring attention, each over its own keys):
// a part's lse l is relative to its reference r (ALiBi's bias of its nearest key), its true lse
// l - r too large for float32 to hold q·k's digits beside it (slope·|rp| ~ 1e6). The running state
// keeps its maximum relative to the reference of the part that set it, and a part is weighed by
// l - (r - R) against that reference R: r - R is exact where the two are within a factor of two
// (Sterbenz), and rounded by at most 2^-24·|r - R| otherwise. A part's relative lse is about its
// scores' spread (plus the log of its keys), so two parts both weigh only where |r - R| is within
// that spread, and then that rounding is as small as the scores' own; where it is larger, one of
// them weighs exp(-large) = 0 beside the other. So the weights are as exact as one call's splits
// (which share one reference a row), and the lse is rounded once, at the end.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "relpos_contract/attention.h"
#include "relpos_push/attention_merge.h"
#include "relpos/storage16.glsl"

RELPOS_DECLARE_SPEC(RELPOS_SPEC_ATTENTION_MERGE)
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_ATTENTION_MERGE)

layout(std430, binding = BINDING_PARTS) readonly buffer In32 { vec4 in32[]; };
layout(std430, binding = BINDING_PARTS) readonly buffer In16 { uvec2 in16[]; };
layout(std430, binding = BINDING_PARTS_LSE) readonly buffer InLse { float in_lse[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer O32 { vec4 o32[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer O16 { uvec2 o16[]; };
layout(std430, binding = BINDING_LSE) writeonly buffer OutLse { float out_lse[]; };

vec4 load_part(uint w) { return IN_HALF != RELPOS_STORE_F32 ? unpack4_storage(IN_HALF, in16[w]) : in32[w]; }

// Each lane's running maximum and sum, and its sums of the parts, for the lanes of its word
// (PART_LANES > 1; with PART_REFERENCES the host takes one lane a word: such merges have a few
// parts).
const uint WORDS = WG_X / PART_LANES;  // words a workgroup
shared vec2 lane_stats[WG_X];
shared vec4 lane_acc[WG_X];

float part_reference(uint n, uint row) {
  return in_lse[n * pc.reference_part_stride + row * pc.lse_row_stride + pc.reference_at - pc.lse_shift];
}

// PART_REFERENCES: takes a part into the running state (M relative to R, S, A): its lse m relative
// to its reference r, its sum s (1), its output a. The state moves to the reference of whichever
// is larger (see the top of the file).
void absorb(inout float M, inout float S, inout float R, inout vec4 A, float m, float s, float r, vec4 a) {
  if (M == uintBitsToFloat(0xff800000u)) {
    M = m;
    S = s;
    R = r;
    A = a;
    return;
  }
  precise const float shift = r - R;
  precise const float x = m - shift;  // m relative to R
  if (x > M) {
    const float c = exp(M - x);
    A = A * c + a;
    S = S * c + s;
    M = m;
    R = r;
  } else {
    const float c = exp(x - M);
    A += c * a;
    S += c * s;
  }
}

void main() {
  const float NEG_INF = uintBitsToFloat(0xff800000u), POS_INF = uintBitsToFloat(0x7f800000u), NAN = uintBitsToFloat(0x7fc00000u);
  // Lane t takes word t % WORDS of the workgroup's (consecutive lanes read consecutive words of a
  // part) and every PART_LANES-th chunk of its parts from chunk t / WORDS.
  const uint t = gl_LocalInvocationID.x, share = t / WORDS;
  const uint w = pc.first + gl_WorkGroupID.x * WORDS + t % WORDS;
  const bool live = w < pc.end;  // (no early return: the lanes meet at a barrier)
  const uint row = w / D4, d = w % D4;
  // One pass over the parts, CHUNK at a time, rescaled where the maximum rises: each part's lse is
  // read once (a packed call's prefill rows hold a few parts of many, the rest -inf: their reads
  // were most of the merge on lavapipe), and a chunk's lse loads, then its parts' loads, are issued
  // together, so that the loop waits on memory twice a chunk, not twice a part (a decoding step's
  // 128 parts a row, one at a time, were most of that step on an H100).
  const uint CHUNK = 8u;
  float m = NEG_INF, sum = 0.0, ref = 0.0;  // PART_REFERENCES: m relative to ref
  vec4 acc = vec4(0.0);
  bool poisoned = false;  // a part's lse was NaN
  if (PART_REFERENCES != 0u) {
    // Few parts (a ring's two, a sharded call's ranks): one at a time, one lane a word.
    for (uint n = 0u; live && n < pc.parts; ++n) {
      const float l = in_lse[n * pc.lse_part_stride + row * pc.lse_row_stride - pc.lse_shift];
      poisoned = poisoned || isnan(l);
      if (l == NEG_INF || isnan(l)) continue;
      absorb(m, sum, ref, acc, l, 1.0, part_reference(n, row), load_part(n * pc.part_stride + row * pc.row_stride + d - pc.in_shift));
    }
  }
  for (uint n0 = share * CHUNK; PART_REFERENCES == 0u && live && n0 < pc.parts; n0 += CHUNK * PART_LANES) {
    float l[CHUNK];
    [[unroll]] for (uint i = 0u; i < CHUNK; ++i)
      l[i] = n0 + i < pc.parts ? in_lse[(n0 + i) * pc.lse_part_stride + row * pc.lse_row_stride - pc.lse_shift] : NEG_INF;
    // A part whose keys were all masked (or that had none) may hold anything: never read.
    vec4 v[CHUNK];
    [[unroll]] for (uint i = 0u; i < CHUNK; ++i)
      v[i] = l[i] == NEG_INF ? vec4(0.0) : load_part((n0 + i) * pc.part_stride + row * pc.row_stride + d - pc.in_shift);
    [[unroll]] for (uint i = 0u; i < CHUNK; ++i) poisoned = poisoned || isnan(l[i]);
    float top = l[0];
    [[unroll]] for (uint i = 1u; i < CHUNK; ++i) top = max(top, l[i]);
    if (top == NEG_INF) continue;
    if (top > m) {
      const float c = m == NEG_INF ? 0.0 : exp(m - top);
      acc *= c;
      sum *= c;
      m = top;
    }
    [[unroll]] for (uint i = 0u; i < CHUNK; ++i) {
      const float e = l[i] == NEG_INF ? 0.0 : exp(l[i] - m);
      sum += e;
      acc += e * v[i];
    }
  }
  // A poisoned lane's stats: m = +inf, so that it is the maximum (max() of +inf is defined), and
  // a NaN sum and sums, which every rescale keeps NaN (exp(+inf - +inf) is NaN too).
  if (poisoned) {
    m = POS_INF;
    sum = NAN;
    acc = vec4(NAN);
  }
  if (PART_LANES > 1u && PART_REFERENCES == 0u) {
    // Each lane writes its own slot; after the barrier the first lane of each word reads the
    // slots of its word's other lanes, which nothing writes again.
    lane_stats[t] = vec2(m, sum);
    lane_acc[t] = acc;
    barrier();
    if (share != 0u) return;
    float top = m;
    [[unroll]] for (uint j = 1u; j < PART_LANES; ++j) top = max(top, lane_stats[t + j * WORDS].x);
    if (top != NEG_INF) {
      acc = vec4(0.0);
      sum = 0.0;
      [[unroll]] for (uint j = 0u; j < PART_LANES; ++j) {
        const vec2 ms = lane_stats[t + j * WORDS];
        if (ms.x == NEG_INF) continue;
        const float c = exp(ms.x - top);
        sum += ms.y * c;
        acc += lane_acc[t + j * WORDS] * c;
      }
    }
    m = top;
  }
  if (!live) return;
  if (m != NEG_INF) acc /= sum;
  if (OUT_HALF != RELPOS_STORE_F32) o16[w - pc.out_shift] = pack4_storage(OUT_HALF, acc);
  else o32[w - pc.out_shift] = acc;
  if (d != 0u) return;
  // The reference of the merged lse: the one of the part that set the maximum, or the row's.
  const float reference = PART_REFERENCES != 0u ? ref : pc.reference != 0u ? part_reference(0u, row) : 0.0;
  // out_relative: rows of the lse relative to the reference, then the reference.
  const bool relative = OUT_RELATIVE != 0u;
  precise const float merged = (m + log(sum)) - (relative ? 0.0 : reference);  // as written (attention_bindings.glsl's alibi_score)
  const uint at = (relative ? 2u * row : row) - pc.lse_out_shift;
  out_lse[at] = m == NEG_INF ? NEG_INF : merged;
  if (relative) out_lse[at + 1u] = reference;
}

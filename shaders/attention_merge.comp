#version 450
// Log-sum-exp merge of attention computed over disjoint key blocks: one invocation per 4-element
// word of the merged output. Parts with lse = -inf (every key masked) weigh nothing; a row masked
// in every part gives zeros and -inf.
#extension GL_GOOGLE_include_directive : require
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

void main() {
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  const uint w = pc.first + gl_GlobalInvocationID.x;
  if (w >= pc.end) return;
  const uint row = w / D4, d = w % D4;
  // One pass, rescaled where the maximum rises: each part's lse is read once (a packed call's
  // prefill rows hold a few parts of many, the rest -inf: their reads were most of the merge on
  // lavapipe).
  float m = NEG_INF, sum = 0.0;
  vec4 acc = vec4(0.0);
  for (uint n = 0u; n < pc.parts; ++n) {
    const float l = in_lse[n * pc.lse_part_stride + row * pc.lse_row_stride - pc.lse_shift];
    if (l == NEG_INF) continue;
    if (l > m) {
      const float c = m == NEG_INF ? 0.0 : exp(m - l);
      acc *= c;
      sum *= c;
      m = l;
    }
    const float e = exp(l - m);
    sum += e;
    acc += e * load_part(n * pc.part_stride + row * pc.row_stride + d - pc.in_shift);
  }
  if (m != NEG_INF) acc /= sum;
  if (OUT_HALF != RELPOS_STORE_F32) o16[w - pc.out_shift] = pack4_storage(OUT_HALF, acc);
  else o32[w - pc.out_shift] = acc;
  if (d == 0u) out_lse[row - pc.lse_out_shift] = m == NEG_INF ? NEG_INF : m + log(sum);
}

// The skeleton of every per-distance bias row (T5, ALiBi, KERPLE): one invocation per relative
// position rp = rp_first + r of a [Q, K] window, writing the bias of the dispatch's heads into
// rows [heads, row_len] (binding 1), -inf for rp > 0 under `causal`.
//
// The family's shader declares its push block (RELPOS_DISTANCE_ROW_FIELDS first) and its bindings
// (relpos_contract/distance_row.h: PARAMS, its parameters, and with some families CONSTANTS), defines
//   float bias_at(uint h, int rp)        the bias of head h at relative position rp
// and then includes this file. Optional hooks, each enabled by defining its macro first:
//   RELPOS_ROW_PREPARE  void row_prepare(int rp) runs once per rp before its heads (shared work);
//   RELPOS_ROW_BITS     uint row_bits(uint h, int rp) is stored instead of bias_at's float bits.
RELPOS_DECLARE_SPEC(RELPOS_SPEC_WORKGROUP)

layout(std430, binding = BINDING_ROWS) writeonly buffer Rows { uint row[]; };  // [heads, row_len]

void main() {
  uint r = pc.first + gl_GlobalInvocationID.x;
  if (r >= pc.row_len) return;
  int rp = pc.rp_first + int(r);
  bool masked = pc.causal != 0u && rp > 0;
#ifdef RELPOS_ROW_PREPARE
  row_prepare(rp);
#endif
  // Bounded: the host gives each dispatch at most half the loop bound of heads
  // (detail::record_distance_rows), leaving the rest to the family's own loops.
  uint row_len = pc.row_len, h_end = pc.first_head + pc.head_count;
  for (uint h = pc.first_head; h < h_end; ++h) {
#ifdef RELPOS_ROW_BITS
    uint bits = row_bits(h, rp);
#else
    uint bits = floatBitsToUint(bias_at(h, rp));
#endif
    row[h * row_len + r] = masked ? 0xff800000u : bits;
  }
}

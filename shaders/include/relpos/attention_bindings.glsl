// The bindings of fused attention (attention_fused.glsl, attention_tiled.glsl; the same nine in both
// kernel classes, relpos_contract/attention.h). Needs D4, IN_HALF and PAGED declared before, and
// the push constants.
// float32 storage is read as vec4 words, float16 as uvec2 words (four halves); both views alias.
RELPOS_DECLARE_BINDINGS(RELPOS_BINDINGS_ATTENTION)
layout(std430, binding = BINDING_Q) readonly buffer Q32 { vec4 q32[]; };
layout(std430, binding = BINDING_Q) readonly buffer Q16 { uvec2 q16[]; };
layout(std430, binding = BINDING_K) readonly buffer K32 { vec4 k32[]; };
layout(std430, binding = BINDING_K) readonly buffer K16 { uvec2 k16[]; };
layout(std430, binding = BINDING_V) readonly buffer V32 { vec4 v32[]; };
layout(std430, binding = BINDING_V) readonly buffer V16 { uvec2 v16[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer O32 { vec4 o32[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer O16 { uvec2 o16[]; };
layout(std430, binding = BINDING_LSE) writeonly buffer Lse { float lse[]; };
layout(std430, binding = BINDING_BIAS) readonly buffer Bias { float bias[]; };
layout(std430, binding = BINDING_BIAS) readonly buffer RelValues { vec4 rel_values[]; };  // Shaw
layout(std430, binding = BINDING_REL_KEYS) readonly buffer RelKeys { vec4 rel_keys[]; };
layout(std430, binding = BINDING_LENGTHS) readonly buffer KeyLengths { uint key_lengths[]; };
layout(std430, binding = BINDING_LENGTHS) readonly buffer CacheLengths { int cache_lengths[]; };  // PAGED
layout(std430, binding = BINDING_BLOCK_TABLE) readonly buffer BlockTable { int block_table[]; };  // PAGED
layout(std430, binding = BINDING_QUERY_LENGTHS) readonly buffer QueryLengths { int query_lengths[]; };  // packed

vec4 unpack4(uvec2 u) { return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y)); }
vec4 load_q(uint w) { return IN_HALF != 0u ? unpack4(q16[w]) : q32[w]; }
vec4 load_k(uint w) { return IN_HALF != 0u ? unpack4(k16[w]) : k32[w]; }
vec4 load_v(uint w) { return IN_HALF != 0u ? unpack4(v16[w]) : v32[w]; }

// Word of dims 0..3 of key j of batch b, kv head hk: in the slab that starts at slab_word
// ([keys, D4] words), or, PAGED, in the block the table names. An entry outside the cache is
// clamped into it: a wrong table on the device gives wrong numbers, never a read past k and v.
// PAGED (a specialisation constant): 0 contiguous; 1 any block size (pc.block_size, divided by);
// n >= 4 blocks of 2^n keys, found by shifts: a CPU device has no vector integer division, and a
// GPU's takes a dozen instructions.
uint key_word(uint slab_word, uint b, uint hk, uint j) {
  if (PAGED == 0u) return slab_word + j * D4;
  const uint n = PAGED > 1u ? j >> PAGED : j / pc.block_size;
  const uint r = PAGED > 1u ? j & ((1u << PAGED) - 1u) : j % pc.block_size;
  const uint block = uint(clamp(block_table[b * pc.max_blocks + n], 0, int(pc.num_blocks) - 1));
  return ((block * pc.block_size + r) * pc.kv_heads + hk) * D4;
}

// The keys of sequence b (a bound on j) and the position of its query 0: the push constants', cut
// by key_lengths; PAGED, its cache length (clamped into [0, keys]) and the queries ending there.
uint sequence_keys(uint b) {
  if (PAGED != 0u) return uint(clamp(cache_lengths[b], 0, int(pc.keys)));
  return pc.has_lengths != 0u ? min(pc.keys, key_lengths[b]) : pc.keys;
}
// Paged, pc.query_offset is keys - queries + the call's query_offset (the rows' layout), so a
// sequence's queries end query_offset past its seq_keys keys.
int sequence_query_offset(uint seq_keys) { return PAGED != 0u ? int(seq_keys) - int(pc.keys) + pc.query_offset : pc.query_offset; }

// Packed queries (pc.total_queries != 0): sequence b's n = query_lengths[b] queries (clamped into
// [0, queries]) are the last n of the envelope's queries, rows x = queries - n ... queries - 1, so
// that positions, masks and biases are those of the unpacked call; their tokens start at y, the
// sum of the earlier sequences' lengths (a loop over the batch, which the host bounds). Unpacked:
// (0, 0), every row the sequence's.
uvec2 sequence_rows(uint b) {
  if (pc.total_queries == 0u) return uvec2(0u);
  uint first = 0u;
  for (uint c = 0u; c < b; ++c) first += uint(clamp(query_lengths[c], 0, int(pc.queries)));
  return uvec2(pc.queries - uint(clamp(query_lengths[b], 0, int(pc.queries))), first);
}
// The row of q, out and lse that query i (>= seq.x) of (batch, head) bh takes: [B, H, Q] or, packed,
// token seq.y + i - seq.x of [total_queries, H], clamped into the buffers (stored() says whether it
// is the query's own: lengths on the device that add up past total_queries give wrong numbers, never a
// write past out).
uint query_row(uint bh, uint h, uint i, uvec2 seq) {
  if (pc.total_queries == 0u) return bh * pc.queries + i;
  return min(seq.y + i - seq.x, pc.total_queries - 1u) * pc.heads + h;
}
bool query_stored(uint i, uvec2 seq) {
  return i < pc.queries && i >= seq.x && (pc.total_queries == 0u || seq.y + i - seq.x < pc.total_queries);
}

// The bindings of fused attention (attention_fused.glsl, attention_tiled.glsl): the same nine in
// both kernel classes, so that one host path binds either. Needs D4, IN_HALF and PAGED declared
// before, and the push constants.
// float32 storage is read as vec4 words, float16 as uvec2 words (four halves); both views alias.
layout(std430, binding = 0) readonly buffer Q32 { vec4 q32[]; };
layout(std430, binding = 0) readonly buffer Q16 { uvec2 q16[]; };
layout(std430, binding = 1) readonly buffer K32 { vec4 k32[]; };
layout(std430, binding = 1) readonly buffer K16 { uvec2 k16[]; };
layout(std430, binding = 2) readonly buffer V32 { vec4 v32[]; };
layout(std430, binding = 2) readonly buffer V16 { uvec2 v16[]; };
layout(std430, binding = 3) writeonly buffer O32 { vec4 o32[]; };
layout(std430, binding = 3) writeonly buffer O16 { uvec2 o16[]; };
layout(std430, binding = 4) writeonly buffer Lse { float lse[]; };
// Shaw has no other bias input: its rel_values take the bias binding (one binding fewer for every
// shader: the runtime binds Device::kMaxBindings = 9 at most).
layout(std430, binding = 5) readonly buffer Bias { float bias[]; };
layout(std430, binding = 5) readonly buffer RelValues { vec4 rel_values[]; };
layout(std430, binding = 6) readonly buffer RelKeys { vec4 rel_keys[]; };
layout(std430, binding = 7) readonly buffer KeyLengths { uint key_lengths[]; };
layout(std430, binding = 7) readonly buffer CacheLengths { int cache_lengths[]; };  // PAGED
layout(std430, binding = 8) readonly buffer BlockTable { int block_table[]; };      // PAGED

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

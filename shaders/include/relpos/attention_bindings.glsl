// The bindings of fused attention (attention_fused.glsl, attention_tiled.glsl; the same twelve in both
// kernel classes, relpos_contract/attention.h). Needs D4, IN_HALF, KV_FORMAT and PAGED declared
// before, and the push constants.
// float32 storage is read as vec4 words, float16 and bfloat16 as uvec2 words (four halves); the
// views alias. q8_0 and fp8 caches are read as uint words by cache_format.glsl's decoders.
#include "relpos/cache_format.glsl"
#include "relpos/storage16.glsl"
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
layout(std430, binding = BINDING_K) readonly buffer KWords { uint k_words[]; };
layout(std430, binding = BINDING_V) readonly buffer VWords { uint v_words[]; };
layout(std430, binding = BINDING_KV_SCALES) readonly buffer KvScales { float kv_scales[]; };  // fp8: [2, kv_heads]
layout(std430, binding = BINDING_WORK) buffer Work { uint work[]; };  // decoding's counters (attention_fused)
RELPOS_CACHE_READER(k_cache, k_words)
RELPOS_CACHE_READER(v_cache, v_words)

vec4 load_q(uint w) { return IN_HALF != RELPOS_STORE_F32 ? unpack4_storage(IN_HALF, q16[w]) : q32[w]; }
// Word w of out (in OUT_HALF's storage).
void store_out(uint w, vec4 x) {
  if (OUT_HALF != RELPOS_STORE_F32) o16[w] = pack4_storage(OUT_HALF, x);
  else o32[w] = x;
}

// The caches are addressed in words of 4 values whatever their format: w = row * D4 + d4, row the
// cache row (key slot and kv head). f32, f16 and bf16 rows are whole words; a q8_0 or fp8 row is
// KV_ROW_BYTES bytes (their caches are bound whole, so w is never shifted), decoded with the kv
// head's scale (fp8), which set_kv_scales() reads once per invocation.
const uint KV_ROW_BYTES = KV_FORMAT == CACHE_Q8_0 ? D4 / 8u * 34u : 4u * D4;  // (quantised formats)
float k_row_scale = 1.0, v_row_scale = 1.0;
void set_kv_scales(uint hk) {
  if (KV_FORMAT == CACHE_FP8_E4M3) {
    k_row_scale = kv_scales[hk];
    v_row_scale = kv_scales[pc.kv_heads + hk];
  }
}
// q8_0 with head_dim a multiple of 64: a row is an even number of 34-byte blocks and starts on a
// word, so its even blocks start on a word and its odd ones 2 bytes into one (load_kv and
// load_kv_row read whole words at known shifts). (No && or ||: glslang makes a specialisation
// constant's a branch, outside any function.)
const bool Q8_ROWS_ON_WORDS = (KV_FORMAT == CACHE_Q8_0 ? 1u : 0u) * (D4 % 16u == 0u ? 1u : 0u) != 0u;
// Word w of k or v in two halves: kv_fetch issues its loads and keeps their bits (up to 4 words),
// kv_decode makes the four floats of them (w again: where a q8_0 word lies in its block). The
// decoding kernel fetches a step's values with its keys and decodes each where it is used: a word
// decoded where it is loaded makes the compiler wait for the load there.
uvec4 kv_fetch(uint w, bool values) {
  if (KV_FORMAT == CACHE_F32) return floatBitsToUint(values ? v32[w] : k32[w]);
  if (KV_FORMAT == CACHE_F16 || KV_FORMAT == CACHE_BF16) return uvec4(values ? v16[w] : k16[w], 0u, 0u);
  if (KV_FORMAT == CACHE_FP8_E4M3) return uvec4(values ? v_words[w] : k_words[w], 0u, 0u, 0u);  // a row: D4 words
  if (Q8_ROWS_ON_WORDS) {
    // Block k = d4 / 8 starts in word `first` (2 bytes in where k is odd); its scale is that
    // word's low (even) or high (odd) half, and value word t = d4 % 8 is word first + t + 1
    // (odd) or the high half of first + t and the low half of first + t + 1 (even).
    const uint d4 = w % D4, k = d4 / 8u, t = d4 % 8u;
    const uint first = (w / D4) * (KV_ROW_BYTES / 4u) + (k * 34u) / 4u;
    return values ? uvec4(v_words[first], v_words[first + t], v_words[first + t + 1u], 0u)
                  : uvec4(k_words[first], k_words[first + t], k_words[first + t + 1u], 0u);
  }
  // Other q8_0 rows: the word holding the scale, and the one or two holding the 4 int8 (a block
  // starts on an even byte: where it starts on a word, its int8 start 2 bytes into one and take a
  // second word, of the same block; where it starts 2 bytes in, theirs are one whole word, and the
  // word after it, which may lie past the cache, is not read).
  const uint blk = (w / D4) * KV_ROW_BYTES + (w % D4 / 8u) * 34u, at = blk + 2u + (w % D4 % 8u) * 4u;
  const uint x0 = values ? v_words[blk >> 2] : k_words[blk >> 2];
  const uint lo = values ? v_words[at >> 2] : k_words[at >> 2];
  const uint hi = (at & 3u) == 0u ? 0u : values ? v_words[(at >> 2) + 1u] : k_words[(at >> 2) + 1u];
  return uvec4(x0, lo, hi, 0u);
}
vec4 kv_decode(uvec4 r, uint w, bool values) {
  if (KV_FORMAT == CACHE_F32) return uintBitsToFloat(r);
  if (KV_FORMAT == CACHE_F16) return unpack4(r.xy);
  if (KV_FORMAT == CACHE_BF16) return unpack4_bf16(r.xy);
  if (KV_FORMAT == CACHE_FP8_E4M3)
    return vec4(cache_decode_fp8x2(r.x & 0xffffu), cache_decode_fp8x2(r.x >> 16)) * (values ? v_row_scale : k_row_scale);
  float d;
  uint q;
  if (Q8_ROWS_ON_WORDS) {
    const bool odd = ((w % D4 / 8u) & 1u) != 0u;
    d = cache_decode_f16(odd ? r.x >> 16 : r.x);
    q = odd ? r.z : (r.y >> 16) | (r.z << 16);
  } else {
    const uint blk = (w / D4) * KV_ROW_BYTES + (w % D4 / 8u) * 34u;
    d = cache_decode_f16(r.x >> ((blk & 2u) * 8u));
    q = (blk & 2u) != 0u ? r.y : (r.y >> 16) | (r.z << 16);  // the int8 start on a word where the block does not
  }
  return d * vec4(q8_value(q, 0u), q8_value(q, 1u), q8_value(q, 2u), q8_value(q, 3u));
}
vec4 load_kv(uint w, bool values) { return kv_decode(kv_fetch(w, values), w, values); }
vec4 load_k(uint w) { return load_kv(w, false); }
vec4 load_v(uint w) { return load_kv(w, true); }

// A whole row (a key or a value) of the cache from word w (a row's first, row * D4), decoded with
// fewer or wider loads than word by word where the format allows: a CPU device (lavapipe) gathers
// each 32-bit component of a load lane by lane in a loop, so its loads are most of a decoding
// step's cost there.
//   f16, bf16 (D4 even): 16-byte loads, two words each. A row's first word (counted from the
//     binding's start) is even: a chunk's binding starts a multiple of 16 bytes into the buffer
//     (planner.hpp's bound_bytes, so kv_shift is even), a whole one at the buffer's start, and
//     rows are D4 words.
//   fp8 (head_dim a multiple of 16): 16-byte loads, 16 values each (rows of head_dim bytes start
//     on 16 bytes, the cache bound whole).
//   q8_0 with rows on words (Q8_ROWS_ON_WORDS): the row's words, 8 bytes a load where rows are a
//     multiple of 8 bytes (head_dim a multiple of 128: 17 loads for 128 values), else one word a
//     load (each block the 9 words it overlaps), then each block decoded from them.
//   Others word by word (load_kv).
// (No && or ||: glslang makes a specialisation constant's a branch, outside any function.)
const bool KV_PAIRS = (KV_FORMAT == CACHE_F16 ? 1u : KV_FORMAT == CACHE_BF16 ? 1u : 0u) * (D4 % 2u == 0u ? 1u : 0u) != 0u;
const bool FP8_QUADS = (KV_FORMAT == CACHE_FP8_E4M3 ? 1u : 0u) * (D4 % 4u == 0u ? 1u : 0u) != 0u;
const bool Q8_ROWS_ON_PAIRS = (Q8_ROWS_ON_WORDS ? 1u : 0u) * (KV_ROW_BYTES % 8u == 0u ? 1u : 0u) != 0u;
layout(std430, binding = BINDING_K) readonly buffer KPairs { uvec4 k_pairs[]; };
layout(std430, binding = BINDING_V) readonly buffer VPairs { uvec4 v_pairs[]; };
void load_kv_row(uint w, bool values, out vec4 row[D4]) {
  if (KV_PAIRS) {
    [[unroll]] for (uint d = 0u; d < D4; d += 2u) {
      const uvec4 u = values ? v_pairs[(w + d) / 2u] : k_pairs[(w + d) / 2u];
      row[d] = kv_decode(uvec4(u.xy, 0u, 0u), w + d, values);
      row[d + 1u] = kv_decode(uvec4(u.zw, 0u, 0u), w + d + 1u, values);
    }
  } else if (FP8_QUADS) {
    [[unroll]] for (uint d = 0u; d < D4; d += 4u) {
      const uvec4 u = values ? v_pairs[(w + d) / 4u] : k_pairs[(w + d) / 4u];
      [[unroll]] for (uint i = 0u; i < 4u; ++i) row[d + i] = kv_decode(uvec4(u[i], 0u, 0u, 0u), w + d + i, values);
    }
  } else if (Q8_ROWS_ON_WORDS) {
    const uint row_word = (w / D4) * (KV_ROW_BYTES / 4u);
    uint x[KV_ROW_BYTES / 4u];
    if (Q8_ROWS_ON_PAIRS) {
      [[unroll]] for (uint t = 0u; t < KV_ROW_BYTES / 8u; ++t) {
        const uvec2 u = values ? v16[row_word / 2u + t] : k16[row_word / 2u + t];
        x[2u * t] = u.x;
        x[2u * t + 1u] = u.y;
      }
    } else {
      [[unroll]] for (uint t = 0u; t < KV_ROW_BYTES / 4u; ++t) x[t] = values ? v_words[row_word + t] : k_words[row_word + t];
    }
    [[unroll]] for (uint k = 0u; k < D4 / 8u; ++k) {
      const uint first = (k * 34u) / 4u;  // the row's word holding the block's first byte
      // kv_decode's q8_0 words, the scale decoded once for the block's 8.
      const bool odd = (k & 1u) != 0u;  // the block starts 2 bytes into word `first`
      const float d = cache_decode_f16(odd ? x[first] >> 16 : x[first]);
      [[unroll]] for (uint t = 0u; t < 8u; ++t) {
        const uint q = odd ? x[first + t + 1u] : (x[first + t] >> 16) | (x[first + t + 1u] << 16);
        row[k * 8u + t] = d * vec4(q8_value(q, 0u), q8_value(q, 1u), q8_value(q, 2u), q8_value(q, 3u));
      }
    }
  } else {
    [[unroll]] for (uint d = 0u; d < D4; ++d) row[d] = load_kv(w + d, values);
  }
}

// Entry n of batch b's block table, clamped into the cache: a wrong table on the device gives
// wrong numbers, never a read past k and v.
uint cache_block(uint b, uint n) { return uint(clamp(block_table[b * pc.max_blocks + n], 0, int(pc.num_blocks) - 1)); }
// Word of dims 0..3 of key j of batch b, kv head hk: in the slab that starts at slab_word
// ([keys, D4] words), or, PAGED, in the block the table names (cache_block).
// PAGED (a specialisation constant): 0 contiguous; 1 any block size (pc.block_size, divided by);
// n >= 4 blocks of 2^n keys, found by shifts: a CPU device has no vector integer division, and a
// GPU's takes a dozen instructions.
uint key_word(uint slab_word, uint b, uint hk, uint j) {
  if (PAGED == 0u) return slab_word + j * D4;
  const uint n = PAGED > 1u ? j >> PAGED : j / pc.block_size;
  const uint r = PAGED > 1u ? j & ((1u << PAGED) - 1u) : j % pc.block_size;
  return ((cache_block(b, n) * pc.block_size + r) * pc.kv_heads + hk) * D4;
}
// Blocks of 2^PAGED keys (PAGED >= 4): the first word of block n of batch b, kv head hk, from which
// the GPU kernels find a tile's or a decoding step's keys without a table load per key.
uint block_base(uint b, uint hk, uint n) { return ((cache_block(b, n) << PAGED) * pc.kv_heads + hk) * D4; }

// The keys of sequence b (a bound on j) and the position of its query 0: the push constants', cut
// by key_lengths; PAGED, its cache length (clamped into [0, keys]) and the queries ending there.
uint sequence_keys(uint b) {
  if (PAGED != 0u) return uint(clamp(cache_lengths[b], 0, int(pc.keys)));
  return (pc.flags & RELPOS_ATTN_HAS_LENGTHS) != 0u ? min(pc.keys, key_lengths[b]) : pc.keys;
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
// token seq.y + i - seq.x of [total_queries, H], clamped into the buffers (query_stored() says whether
// it is the query's own: lengths on the device that add up past total_queries give wrong numbers, never a
// write past out).
uint query_row(uint bh, uint h, uint i, uvec2 seq) {
  if (pc.total_queries == 0u) return bh * pc.queries + i;
  return min(seq.y + i - seq.x, pc.total_queries - 1u) * pc.heads + h;
}
bool query_stored(uint i, uvec2 seq) {
  return i < pc.queries && i >= seq.x && (pc.total_queries == 0u || seq.y + i - seq.x < pc.total_queries);
}
// Decoding grouped-query heads, a workgroup takes a slab of up to `slab` consecutive query heads of
// one kv head (slab 1: one (batch, head) row); a group of heads that `slab` does not divide ends in
// a smaller slab. The first (batch, head) row of the dispatch's slab n (a dispatch starts at a
// group, or at a slab where `slab` divides the group: then this is bh_first + n·slab):
uint slab_first_row(uint n, uint slab) {
  if (slab == 1u) return pc.bh_first + n;  // a constant where `slab` is: no division
  const uint per_group = (pc.kv_group + slab - 1u) / slab;
  return pc.bh_first + n / per_group * pc.kv_group + n % per_group * slab;
}
// The heads of the slab whose first is head h: the rows after them shadow its last head and store
// nothing.
uint slab_heads_of(uint h, uint slab) { return min(slab, pc.kv_group - h % pc.kv_group); }
// RELPOS_ATTN_ROW: the first index of query i's values of head h in the per-distance rows, so that
// key j >= M takes bias[row_bias_start(h, i, q_off) + j] (bias[h·(Q + K − 1) + (Q − 1 − i) + j − M]).
// The rows are laid out for pc.query_offset: a paged sequence's values lie further in (q_off its
// own, sequence_query_offset). uint arithmetic: a start that wraps comes back when j is added.
uint row_bias_start(uint h, uint i, int q_off) {
  return h * (pc.queries + pc.keys - 1u) + (pc.queries - 1u) - i + uint(pc.query_offset - q_off) - pc.memory_prefix - pc.bias_shift;
}
// The end of the keys of a query at absolute position i_abs (its sequence's seq_keys, cut by
// causality; memory keys stay visible).
uint row_keys(uint seq_keys, int i_abs) { return (pc.flags & RELPOS_ATTN_CAUSAL) != 0u ? min(seq_keys, pc.memory_prefix + uint(max(i_abs + 1, 0))) : seq_keys; }
// ALiBi: a row's scores carry the bias relative to that of its nearest key among all its keys
// [0, row_end) (rp = j + rp_base), the same in every split of them, so a far query (slope·|rp| near
// 2^31) keeps q·k in float32 (the difference of two near float32 biases is exact), and each split
// scores its keys as one call over them all would. slope · the smallest |rp|; 0 where the keys
// include memories (no bias) or there are none.
float alibi_near_bias(float slope, uint row_end, int rp_base) {
  const int rp_hi = int(row_end) - 1 + rp_base;  // (rp_base: that of key 0)
  const int near = pc.memory_prefix != 0u || row_end == 0u ? 0 : rp_base > 0 ? rp_base : rp_hi < 0 ? -rp_hi : 0;
  precise const float b = slope * float(near);
  return b;
}
// ALiBi: the score s of a key at rp less its bias relative to `near` (alibi_near_bias): the bias is
// the float32 slope·|rp|, as the reference defines it, and near it the difference is exact
// (Sterbenz). Every step is `precise`, computed as written: NVIDIA's compiler (H100, driver 580,
// 2026-11-27) rearranged s - (b - near) unless the last subtraction was precise, which lost q·k
// beside the bias (out errors of 2e-3 at a query offset of 1e8, 4e-2 near 2^31, with slopes that
// are not powers of two); a fused product would leave the bias unrounded (up to half its ulp).
float alibi_score(float s, float slope, int rp, float near) {
  precise const float b = slope * float(abs(rp));
  precise const float d = b - near;
  precise const float x = s - d;
  return x;
}
// Whether a row's lse parts stay relative to its near bias: ALiBi where the keys are split (parts
// merged by attention_merge.comp), or where the caller merges the call with others (a ring's
// blocks: RELPOS_ATTN_LSE_WITH_REFERENCE). Its lse is m + log(l) - near, and at near's magnitude
// float32 rounds it by up to 2^-24 · slope·|rp| (64 at slope·|rp| ~ 2^30): the merge would weigh
// the parts by those roundings. Relative, a part's lse is near the logits' own magnitude, and the
// merge subtracts near once, so the row's lse is rounded once, as where the keys are not split.
bool lse_relative() {
  return RELPOS_ATTN_LSE_REFERENCE(BIAS_MODE) && (pc.part_stride > 1u || (pc.flags & RELPOS_ATTN_LSE_WITH_REFERENCE) != 0u);
}
// Stores part `split`'s lse of output row `row`, from the running max m and sum l of scores taken
// relative to the bias `near` (0 but for ALiBi). With lse_relative a row holds part_stride lse and
// then `near`, written by split 0 (attention_partials in src/ops/attention_launch.hpp).
void store_lse(uint row, uint split, float m, float l, float near) {
  const uint at = row * (pc.part_stride + (lse_relative() ? 1u : 0u)) - pc.lse_shift;
  precise const float x = (m + log(l)) - (lse_relative() ? 0.0 : near);  // (alibi_score: as written)
  lse[at + split] = l == 0.0 ? uintBitsToFloat(0xff800000u) : x;
  if (lse_relative() && split == 0u) lse[at + pc.part_stride] = near;
}


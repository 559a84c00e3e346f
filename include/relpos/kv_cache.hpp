#pragma once
// Appending a step's keys and values to a paged KV cache (docs/paged_attention.md): kv_append
// writes k and v [batch, kv_heads, new_tokens, head_dim] at each sequence's current length, with
// RoPE on the keys on the way (any style and scaling rope() supports) and, optionally, the same
// rotation of the step's queries in place, in one dispatch. A decode step of an engine is then
// kv_append (q, k, v) + paged attention(), both recorded into one command buffer.
#include <cstdint>
#include <span>

#include "relpos/attention.hpp"
#include "relpos/dtype.hpp"
#include "relpos/rope.hpp"

namespace relpos {

class Buffer;
class Recorder;

struct KvAppendParams {
  std::uint32_t batch = 1;
  std::uint32_t heads = 1;       // query heads (for q; a multiple of kv_heads)
  std::uint32_t kv_heads = 1;
  std::uint32_t new_tokens = 1;  // T: keys each sequence gains
  std::uint32_t head_dim = 0;    // even, at most AttentionParams::kMaxHeadDim
  DType dtype = DType::F32;      // of the caches, k, v and q (f32 or f16)
  PagedKv paged{};               // the cache: [num_blocks, block_size, kv_heads, head_dim]; required
  // RoPE of new key t of sequence b (and its query t) at position cache_lengths[b] + t: rope's
  // style, base, rotary_dim and scaling (a dynamic NTK scaling needs its seq_len); its batch, seq,
  // heads, head_dim, layout, position_offset and inverse are ignored.
  bool apply_rope = false;
  RopeParams rope{};

  std::uint32_t capacity() const { return paged.max_blocks * paged.block_size; }  // keys one sequence may hold
  // rope's parameters for x [batch, x_heads, new_tokens, head_dim] (BHSD) at positions from a buffer.
  RopeParams rope_params(std::uint32_t x_heads) const;
  // Throws InvalidArgument naming the parameter and the limit.
  void validate() const;
};

// Checks a block table and cache lengths held on the host before an append: every length in
// [0, capacity - new_tokens], every entry the new keys land in (blocks length / block_size to
// (length + new_tokens - 1) / block_size of the row) in [0, num_blocks). InvalidArgument names the
// sequence and the entry. On the device, a key whose entry lies outside the cache, or whose
// position lies past the capacity, is not written (nothing outside the caches is touched).
void check_append_table(const KvAppendParams& p, std::span<const std::int32_t> block_table, std::span<const std::int32_t> cache_lengths);

// ---- CPU reference ------------------------------------------------------------------------
// The caches are updated in place; q (empty: none) [batch, heads, new_tokens, head_dim] is
// rotated in place when apply_rope. Rotations as rope_reference's.
struct KvAppendHostData {
  std::span<float> k_cache, v_cache;
  std::span<const float> k, v;  // [batch, kv_heads, new_tokens, head_dim]
  std::span<const std::int32_t> block_table, cache_lengths;
  std::span<float> q;
};
void kv_append_reference(const KvAppendParams& p, const KvAppendHostData& d);

// ---- GPU operation ------------------------------------------------------------------------
struct KvAppendBuffers {
  const Buffer* k_cache = nullptr;  // written
  const Buffer* v_cache = nullptr;  // written
  const Buffer* k = nullptr;
  const Buffer* v = nullptr;
  const Buffer* block_table = nullptr;    // int32 [batch, max_blocks]
  const Buffer* cache_lengths = nullptr;  // int32 [batch]: the lengths before this append (not changed)
  const Buffer* q = nullptr;              // optional, rotated in place (apply_rope only)
};
// Records the append (one dispatch). Buffers are checked first (InvalidArgument). The lengths are
// read, not advanced: the attention that follows takes lengths + new_tokens (an application keeps
// the two, or advances its own after the step).
void kv_append(Recorder& r, const KvAppendParams& p, const KvAppendBuffers& b);

}  // namespace relpos

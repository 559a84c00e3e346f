#pragma once
// Appending a step's keys and values to a paged KV cache (docs/paged_attention.md): kv_append
// writes k and v [batch, kv_heads, new_tokens, head_dim] at each sequence's current length, with
// RoPE on the keys on the way (any style and scaling rope() supports) and, optionally, the same
// rotation of the step's queries in place, in one dispatch. A decode step of an engine is then
// kv_append (q, k, v) + paged attention(), both recorded into one command buffer. Ragged batches
// (each sequence its own number of new tokens, read from a buffer, the rows packed token-major),
// caches in any CacheFormat (converted on the way in) and lengths advanced on the device are
// opt-ins; KvAppendPlan records steps that create nothing.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "relpos/attention.hpp"
#include "relpos/cache_format.hpp"
#include "relpos/dtype.hpp"
#include "relpos/rope.hpp"

namespace relpos {

class Buffer;
class Context;
class Recorder;

struct KvAppendParams {
  std::uint32_t batch = 1;
  std::uint32_t heads = 1;       // query heads (for q; a multiple of kv_heads)
  std::uint32_t kv_heads = 1;
  std::uint32_t new_tokens = 1;  // T: keys each sequence gains (ragged: the most any sequence gains)
  std::uint32_t head_dim = 0;    // even, at most AttentionParams::kMaxHeadDim
  DType dtype = DType::F32;      // of k, v and q (f32 or f16); of the caches too unless cache_format
  PagedKv paged{};               // the cache: [num_blocks, block_size, kv_heads, row]; required
  // The caches' format (relpos/cache_format.hpp): rows of cache_row_bytes(format, head_dim) bytes.
  // Unset: dtype's own (f32 or f16). Values are converted on the way in.
  std::optional<CacheFormat> cache_format{};
  // fp8_e4m3: one float32 scale per kv head for the keys and one for the values (finite, > 0);
  // empty for every other format.
  std::vector<float> k_scales{}, v_scales{};
  // Ragged batches: sequence b gains new_tokens[b] keys (a device buffer, int32 [batch], each in
  // [0, new_tokens]), its rows packed token-major: k and v [packed_tokens, kv_heads, head_dim] (q
  // [packed_tokens, heads, head_dim]), sequence b's at rows cu[b] .. cu[b+1]-1, cu the prefix sums
  // of new_tokens. packed_tokens: the rows k and v hold, in [1, batch * new_tokens]; rows past it
  // are never read. At most AttentionParams::kMaxPackedBatch sequences, as packed attention.
  bool ragged = false;
  std::uint32_t packed_tokens = 0;
  // After the append, cache_lengths[b] += the keys sequence b gained (on the device, in the same
  // recording): an engine keeps one length buffer, and the attention after the append reads it.
  // The sum saturates at INT32_MAX (a length the host never checked does not wrap negative).
  bool advance_lengths = false;
  // cache_lengths already count this append's keys (they were advanced by an earlier append of
  // the step, another layer's): sequence b's new keys go to positions cache_lengths[b] - n + t.
  // Not with advance_lengths.
  bool lengths_include_new = false;
  // RoPE of new key t of sequence b (and its query t) at position cache_lengths[b] + t: rope's
  // style, base, rotary_dim and scaling (dynamic NTK and LongRoPE need its seq_len); its batch, seq,
  // heads, head_dim, layout, position_offset and inverse are ignored.
  bool apply_rope = false;
  RopeParams rope{};

  std::uint32_t capacity() const { return paged.max_blocks * paged.block_size; }  // keys one sequence may hold
  CacheFormat cache() const { return cache_format ? *cache_format : dtype == DType::F16 ? CacheFormat::F16 : CacheFormat::F32; }
  std::uint64_t cache_bytes() const;  // of k_cache (and of v_cache)
  std::uint64_t input_rows() const;   // rows of k, v (and q) per head: batch * new_tokens, or packed_tokens
  // rope's parameters for x [batch, x_heads, new_tokens, head_dim] (BHSD) at positions from a buffer.
  RopeParams rope_params(std::uint32_t x_heads) const;
  // Throws InvalidArgument naming the parameter and the limit.
  void validate() const;
};

// Checks a block table and cache lengths held on the host before an append: every length in
// [0, capacity - new_tokens], every entry the new keys land in (blocks length / block_size to
// (length + new_tokens - 1) / block_size of the row) in [0, num_blocks). InvalidArgument names the
// sequence and the entry. Ragged: new_tokens[b] in [0, p.new_tokens] for sequence b, their sum at
// most packed_tokens. On the device, a key whose entry lies outside the cache, or whose position
// lies past the capacity, is not written (nothing outside the caches is touched), a count outside
// [0, p.new_tokens] counts as 0, rows past packed_tokens are not read, and an advanced length
// saturates at INT32_MAX.
void check_append_table(const KvAppendParams& p, std::span<const std::int32_t> block_table, std::span<const std::int32_t> cache_lengths,
                        std::span<const std::int32_t> new_tokens = {});

// ---- CPU reference ------------------------------------------------------------------------
// The caches are updated in place; q (empty: none) [batch, heads, new_tokens, head_dim] (ragged:
// [packed_tokens, heads, head_dim]) is rotated in place when apply_rope. Rotations as
// rope_reference's; conversions as encode_cache_row's.
struct KvAppendHostData {
  std::span<float> k_cache, v_cache;  // as values (without cache_format): f16 caches hold f16 values
  std::span<const float> k, v;        // [batch, kv_heads, new_tokens, head_dim]; ragged [packed_tokens, kv_heads, head_dim]
  std::span<const std::int32_t> block_table, cache_lengths;
  std::span<float> q;
  std::span<std::uint8_t> k_cache_bytes{}, v_cache_bytes{};  // with cache_format: the caches' bytes (cache_bytes() each)
  std::span<const std::int32_t> new_tokens{};             // ragged: [batch]
  std::span<std::int32_t> advanced_lengths{};             // advance_lengths: [batch], written cache_lengths + gained
};
void kv_append_reference(const KvAppendParams& p, const KvAppendHostData& d);

// ---- GPU operation ------------------------------------------------------------------------
struct KvAppendBuffers {
  const Buffer* k_cache = nullptr;  // written: cache_bytes()
  const Buffer* v_cache = nullptr;  // written
  const Buffer* k = nullptr;
  const Buffer* v = nullptr;
  const Buffer* block_table = nullptr;    // int32 [batch, max_blocks]
  const Buffer* cache_lengths = nullptr;  // int32 [batch]: the lengths before this append (advance_lengths: advanced;
                                          // lengths_include_new: after it)
  const Buffer* q = nullptr;              // optional, rotated in place (apply_rope only)
  const Buffer* new_tokens = nullptr;     // ragged: int32 [batch]
};
// Records the append (one dispatch; a second, after a barrier, advances the lengths). Buffers are
// checked first (InvalidArgument). Without advance_lengths the lengths are read, not advanced: the
// attention that follows takes lengths + new_tokens (an application keeps the two, or advances its
// own after the step).
void kv_append(Recorder& r, const KvAppendParams& p, const KvAppendBuffers& b);

// Decodes cache rows to float32 on the device (inspection, tools; the shaders' decoders of
// cache_format.glsl against the host's): `cache` holds `rows` rows of head_dim values in `format`,
// row i belonging to kv head i % kv_heads (the cache's [num_blocks, block_size, kv_heads] order);
// out float32 [rows, head_dim]. decode_cache_reference gives the same values on the host.
struct CacheDecodeParams {
  CacheFormat format = CacheFormat::F32;
  std::uint32_t rows = 1;
  std::uint32_t kv_heads = 1;
  std::uint32_t head_dim = 0;
  std::vector<float> scales;  // fp8_e4m3: [kv_heads]; empty otherwise
  std::uint64_t cache_bytes() const { return std::uint64_t{rows} * cache_row_bytes(format, head_dim); }
  void validate() const;  // InvalidArgument naming the parameter and the limit
};
void decode_cache(Recorder& r, const CacheDecodeParams& p, const Buffer& cache, const Buffer& out);
void decode_cache_reference(const CacheDecodeParams& p, std::span<const std::uint8_t> cache, std::span<float> out);

// Appends for hot loops: built once for its params (the envelope), it holds the pipelines, the
// frequency and scale table and descriptor sets, so that recording a step -- the same params, new
// buffers (and, through them, new lengths, tables and tokens) -- creates no Vulkan object once
// steps have executed (AttentionPlan's rules for pending steps and for its lifetime hold here).
// record() gives what kv_append() gives, bit for bit.
class KvAppendPlan {
 public:
  KvAppendPlan(Context& ctx, const KvAppendParams& params);
  ~KvAppendPlan();
  KvAppendPlan(KvAppendPlan&&) noexcept;
  KvAppendPlan& operator=(KvAppendPlan&&) noexcept;
  KvAppendPlan(const KvAppendPlan&) = delete;
  KvAppendPlan& operator=(const KvAppendPlan&) = delete;

  const KvAppendParams& params() const;
  void record(Recorder& r, const KvAppendBuffers& b);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace relpos

#pragma once
// Fused attention with a relative position bias (docs/fused_attention.md): softmax(q·kᵀ·s + bias + mask)·v with
// the bias computed tile by tile inside one kernel and an online softmax; the [queries, keys]
// score matrix is never written. Plus the log-sum-exp merge of partial results over key blocks.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "relpos/cache_format.hpp"
#include "relpos/dtype.hpp"
#include "relpos/kerple.hpp"
#include "relpos/t5.hpp"

namespace relpos {

class Buffer;
class Recorder;

// The position bias families fused attention takes (docs/fused_attention.md, "Semantics" and docs/ARCHITECTURE.md, "The bias registry"). What
// each one's input holds: attention_bias_info(bias).input.
enum class AttentionBias : std::uint32_t {
  None = 0,
  T5 = 1,        // [num_buckets, heads] table, buckets of T5Params (its scale multiplies the bias)
  Distance = 2,  // float32 [heads, queries + keys - 1]: value for rp at index rp + row_query_offset() + queries - 1
  Alibi = 3,     // float32 [heads] slopes: bias = -slope[h] * |rp|; finite (the reference checks; a GPU buffer is not read back)
  Shaw = 4,      // rel_keys, rel_values [2k + 1, head_dim] (float32), k = max_relative_position
  Dense = 5,     // float32 [heads, queries, keys], the general fallback
  Kerple = 6,    // float32 [2, heads]: r1 then r2 of KerpleParams (variant kerple_variant); the reference checks their ranges
  Sandwich = 7,  // float32 [heads] scales of SandwichParams (dimension sandwich_dim); the reference checks they are finite
};

// What the library says of a bias family: every family fused attention takes is listed by
// attention_biases(), in a fixed order, so that an application (or a CLI) can offer them all.
struct AttentionBiasInfo {
  AttentionBias bias = AttentionBias::None;
  std::string_view name;   // "t5", "alibi", ...: what `relpos run attention --bias` takes
  std::string_view input;  // what AttentionBuffers::bias holds (float32); empty: no bias buffer
  bool rel_tables = false;  // takes rel_keys and rel_values (float32 [2k + 1, head_dim]) instead
  // The bias of (query, key) is a function of the head and their relative position only, so any
  // window of queries and keys takes the same parameters at its own query_offset (every family but
  // dense).
  bool relative = true;
};
std::span<const AttentionBiasInfo> attention_biases();
// InvalidArgument naming `bias` for a value that is no family.
const AttentionBiasInfo& attention_bias_info(AttentionBias bias);
std::optional<AttentionBias> attention_bias_named(std::string_view name);

// A paged KV cache in place of contiguous k and v (FlashAttention's flash_attn_with_kvcache and
// vLLM's layout, docs/paged_attention.md): k and v are [num_blocks, block_size, kv_heads, head_dim];
// key j of sequence b is row j % block_size of block block_table[b][j / block_size]; block_table
// is int32 [batch, max_blocks], cache_lengths int32 [batch] (the keys sequence b holds). Query i of
// sequence b sits at position cache_lengths[b] - queries + i + query_offset (query_offset is
// usually 0; a slice of a sequence held across several devices is followed by keys it does not
// hold), so rp and the causal mask are per sequence. AttentionParams::keys must be
// max_blocks * block_size: the longest sequence the table can hold, which sizes the distance rows
// ([heads, queries + keys - 1] laid out as for query_offset = keys - queries + query_offset) and
// the dense bias ([heads, queries, keys]).
struct PagedKv {
  std::uint32_t block_size = 0;  // keys per block: 0 (contiguous k and v), or a multiple of 16
  std::uint32_t num_blocks = 0;  // blocks in the cache
  std::uint32_t max_blocks = 0;  // columns of the block table
  bool enabled() const { return block_size != 0; }
  std::uint64_t cache_elements(std::uint32_t kv_heads, std::uint32_t head_dim) const {
    return std::uint64_t{num_blocks} * block_size * kv_heads * head_dim;
  }
};

struct AttentionParams {
  std::uint32_t batch = 1;
  std::uint32_t heads = 1;     // H, query heads
  std::uint32_t kv_heads = 1;  // Hkv: H must be a multiple (grouped-query attention)
  std::uint32_t queries = 0;
  std::uint32_t keys = 0;
  std::uint32_t head_dim = 0;  // D: a multiple of 4, at most kMaxHeadDim
  DType dtype = DType::F32;    // storage of q and out (F32, F16 or BF16), and of k and v unless cache_format; accumulation is float32
  std::optional<float> scale{};  // multiplies q·kᵀ; default 1/sqrt(head_dim) (T5 models pass 1)
  // Query i sits at absolute position i + query_offset among the local (non-memory) keys.
  std::int64_t query_offset = 0;
  bool causal = false;  // local key j (position j - memory_prefix) is masked when it lies after the query
  // The first memory_prefix keys are retrieved memories: no position bias, never causally masked.
  // Local key j >= memory_prefix sits at position j - memory_prefix: rp = j - memory_prefix - (i + query_offset).
  std::uint32_t memory_prefix = 0;
  AttentionBias bias = AttentionBias::None;
  T5Params t5{};  // bucket configuration and bias scale (its queries/keys/heads/offset are ignored)
  std::uint32_t max_relative_position = 0;  // Shaw's k
  KerpleVariant kerple_variant = KerpleVariant::Log;
  std::uint32_t sandwich_dim = 0;  // Sandwich: the dimension d' of its sinusoids
  std::uint32_t sandwich_first_frequency = 0;  // Sandwich: SandwichParams::first_frequency (0 or 1)
  // Split the keys of each row across this many workgroups (0: chosen from the shape). A split holds
  // at most kMaxKeysPerSplit keys, so long rows always take several; at most
  // AttentionMergeParams::kMaxParts splits are merged.
  std::uint32_t key_splits = 0;
  // A paged cache (paged.enabled()): memory_prefix must be 0 and key lengths absent
  // (cache_lengths take their place); query_offset shifts every sequence's queries alike.
  PagedKv paged{};
  // Storage of out: dtype when unset. F32 with f16 inputs keeps the result unrounded, for a
  // partial result that attention_merge combines later (ring attention's blocks).
  std::optional<DType> out_dtype{};
  // Packed (ragged) queries with a paged cache, FlashAttention's varlen layout: 0, or the number of
  // query tokens of the call. q and out are then token-major [total_queries, heads, head_dim] and
  // lse [total_queries, heads]; query_lengths (int32 [batch], summing to total_queries) says how many
  // of them each sequence owns, in order: sequence b's are tokens cu[b] ... cu[b+1] - 1 (cu the
  // prefix sums), a length of 0 allowed. They are its last query_lengths[b] positions: query i of b
  // sits at cache_lengths[b] - query_lengths[b] + i + query_offset, exactly as row
  // queries - query_lengths[b] + i of the unpacked paged call, which `queries` (the longest
  // sequence's count, at most) is the envelope of: the launch covers it, the per-distance rows and
  // the dense bias are laid out for it. Mixed prefill and decode sequences share one call.
  std::uint32_t total_queries = 0;
  // The k and v caches' format (relpos/cache_format.hpp, docs/fused_attention.md "Cache formats"),
  // contiguous or paged: unset, dtype's own; otherwise any CacheFormat (bf16, ggml's q8_0 blocks,
  // fp8 e4m3 with scales), each row decoded to float32 as it is read, q and out staying dtype.
  std::optional<CacheFormat> cache_format{};
  // fp8_e4m3: float32 [kv_heads], the keys' and the values' scale per kv head (finite, > 0);
  // empty for every other format.
  std::vector<float> k_scales{}, v_scales{};

  static constexpr std::uint32_t kMaxHeadDim = 256;
  // Keys one invocation walks at most: the shader's loops run at most 3 iterations per key, within
  // the bound on any invocation's loops (docs/ARCHITECTURE.md, "Bounded loops").
  static constexpr std::uint32_t kMaxKeysPerSplit = 8192;
  // Sequences of a packed call at most: each workgroup sums the lengths of the sequences before its
  // own, a loop of up to batch iterations that the bound on an invocation's loops makes room for
  // (docs/ARCHITECTURE.md, "Bounded loops").
  static constexpr std::uint32_t kMaxPackedBatch = 4096;

  float effective_scale() const;
  bool packed() const { return total_queries != 0; }
  CacheFormat cache() const {
    return cache_format ? *cache_format : dtype == DType::F16 ? CacheFormat::F16 : dtype == DType::BF16 ? CacheFormat::BF16 : CacheFormat::F32;
  }
  // Bytes of k (and of v): its rows (batch * kv_heads * keys, or a paged cache's num_blocks *
  // block_size * kv_heads) of cache_row_bytes(cache(), head_dim) each.
  std::uint64_t kv_bytes() const;
  // The kv head of cache row `row` (rows are [num_blocks, block_size, kv_heads] paged, [batch,
  // kv_heads, keys] contiguous): whose scale an fp8 row takes.
  std::uint32_t cache_row_kv_head(std::uint64_t row) const {
    return static_cast<std::uint32_t>(paged.enabled() ? row % kv_heads : (row / keys) % kv_heads);
  }
  // Rows of q, out and lse: batch * heads * queries, or total_queries * heads when packed.
  // (batch · heads · queries, or total_queries · heads packed; 2^64 - 1 where that would not fit, which validate() refuses.)
  std::uint64_t rows() const;
  DType output_dtype() const { return out_dtype.value_or(dtype); }
  // The shape of the bias input's floats for this mode, outermost first (empty for None and Shaw),
  // and their number (0 for those).
  std::vector<std::uint64_t> bias_shape() const;
  std::uint64_t bias_elements() const;
  // The query offset the per-distance rows are laid out for: query_offset, or keys - queries +
  // query_offset with a paged cache (whose sequences' offsets lie at or below it, so that their rp
  // fall in the rows).
  std::int64_t row_query_offset() const { return paged.enabled() ? std::int64_t{keys} - queries + query_offset : query_offset; }
  // T5Params for the bucket row of this shape.
  T5Params t5_row_params() const;
  // Throws InvalidArgument naming the parameter and the limit.
  void validate() const;
};

// Host inputs of the reference. q [B, H, Q, D], k and v [B, Hkv, K, D] (paged: [num_blocks,
// block_size, Hkv, D]); bias as bias_elements(); key_lengths [B] (empty: no padding; keys
// j >= key_lengths[b] are masked). Paged: block_table [B, max_blocks] and cache_lengths [B]; packed
// (p.total_queries): q [total_queries, H, D] and query_lengths [B]. A cache_format: k_bytes and
// v_bytes hold the caches' bytes (kv_bytes() each) in place of k and v.
struct AttentionHostInputs {
  std::span<const float> q, k, v;
  std::span<const float> bias;
  std::span<const float> rel_keys, rel_values;
  std::span<const std::uint32_t> key_lengths;
  std::span<const std::int32_t> block_table, cache_lengths;
  std::span<const std::int32_t> query_lengths{};
  std::span<const std::uint8_t> k_bytes{}, v_bytes{};
};

// Checks a paged cache's block table and lengths held on the host (the reference and the tool call
// it; an application calls it before uploading them): every length in [0, keys], every entry a
// sequence reads (the first ceil(length / block_size)) in [0, num_blocks). InvalidArgument names
// the sequence and the entry. The GPU op cannot read a table that is device data before it runs:
// there it clamps each entry into the cache instead, so a bad table gives wrong numbers for that
// sequence but never reads outside k and v.
void check_block_table(const AttentionParams& p, std::span<const std::int32_t> block_table, std::span<const std::int32_t> cache_lengths);
// Packed queries' lengths held on the host (the reference and the tool call it; an application
// before uploading them): each in [0, min(queries, cache_lengths[b])], their sum total_queries.
// InvalidArgument names the sequence, its length and the limit. The GPU op clamps each length into
// [0, queries] and stores no row past total_queries instead. It checks a call over whole sequences:
// a sharded rank's slice may hold fewer keys than a chunk has queries (docs/ring_attention.md), so
// check the lengths against the whole sequences' there.
void check_query_lengths(const AttentionParams& p, std::span<const std::int32_t> query_lengths, std::span<const std::int32_t> cache_lengths);

struct AttentionResult {
  std::vector<float> out;  // [B, H, Q, D] (packed: [total_queries, H, D])
  std::vector<float> lse;  // [B, H, Q] (packed: [total_queries, H]): log Σ_j exp(logit_ij); -inf for a fully masked row (out = 0), NaN where a visible key's input is NaN
};

// ---- CPU reference ------------------------------------------------------------------------

// The position bias as a dense float32 [H, Q, K] (memory keys 0), what the unfused pipeline adds.
// Reads only in.bias.
std::vector<float> attention_bias_reference(const AttentionParams& p, const AttentionHostInputs& in);
// Logits [B, H, Q, K] = s·q·k (+ s·q·rel_keys[idx] for Shaw) + bias, -inf where masked.
std::vector<double> attention_logits_reference(const AttentionParams& p, const AttentionHostInputs& in);
// The materialised bias, then a float64 softmax.
AttentionResult attention_reference(const AttentionParams& p, const AttentionHostInputs& in);

// ---- GPU operation ------------------------------------------------------------------------

struct AttentionBuffers {
  const Buffer* q = nullptr;
  const Buffer* k = nullptr;
  const Buffer* v = nullptr;
  const Buffer* out = nullptr;          // [B, H, Q, D] of dtype
  const Buffer* lse = nullptr;          // optional float32 [B, H, Q]
  const Buffer* bias = nullptr;         // T5 table, distance rows, slopes, KERPLE [r1; r2] or dense bias (float32)
  const Buffer* rel_keys = nullptr;     // Shaw, float32 [2k + 1, D]
  const Buffer* rel_values = nullptr;
  const Buffer* key_lengths = nullptr;  // optional uint32 [B]
  // Paged cache (p.paged): k and v are the caches; these are required.
  const Buffer* block_table = nullptr;    // int32 [B, max_blocks]
  const Buffer* cache_lengths = nullptr;  // int32 [B]
  // Packed queries (p.total_queries): required then, null otherwise.
  const Buffer* query_lengths = nullptr;  // int32 [B]
};

// Records the fused op. Everything is checked first (InvalidArgument).
void attention(Recorder& r, const AttentionParams& p, const AttentionBuffers& b);

// The same attention unfused, from the library's blocks: q·kᵀ·scale into `logits` (float32
// [B, H, Q, K], attention_unfused_logits_bytes()), the bias added there by its family's own op,
// the masked softmax, then weights·v. For the modes attention_unfused_takes() (none, t5),
// kv_heads == heads, no memory prefix or key lengths: the baseline the fused op is tested and
// benchmarked against.
std::uint64_t attention_unfused_logits_bytes(const AttentionParams& p);
bool attention_unfused_takes(AttentionBias bias);
void attention_unfused(Recorder& r, const AttentionParams& p, const AttentionBuffers& b, const Buffer& logits);

// ---- Log-sum-exp merge of partial attention over key blocks ------------------------------
// parts results over disjoint key blocks: out [parts, rows, D], lse [parts, rows] (rows = B·H·Q).
// merged lse = log Σ_n exp(lse_n); out = Σ_n exp(lse_n - lse) · out_n. Blocks with lse = -inf
// (fully masked) contribute nothing; rows masked in every block give zeros and -inf; a block
// whose lse is NaN (a NaN input) makes the row NaN, out and lse.
struct AttentionMergeParams {
  std::uint32_t parts = 1;
  std::uint64_t rows = 0;
  std::uint32_t head_dim = 0;  // a multiple of 4, at most AttentionParams::kMaxHeadDim
  DType dtype = DType::F32;    // of the partial and merged outputs: F32, F16 or BF16 (lse is always float32)
  // The GPU merge loops over the parts in each invocation: half the shader loop bound.
  static constexpr std::uint32_t kMaxParts = 16384;
  void validate() const;
};

AttentionResult attention_merge_reference(const AttentionMergeParams& p, std::span<const float> out,
                                          std::span<const float> lse);
// At most AttentionMergeParams::kMaxParts parts on the GPU: more give InvalidArgument.
void attention_merge(Recorder& r, const AttentionMergeParams& p, const Buffer& partial_out, const Buffer& partial_lse,
                     const Buffer& out, const Buffer* lse = nullptr);

}  // namespace relpos

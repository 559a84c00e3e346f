#pragma once
// The one path of fused attention: attention() and AttentionPlan::record check a call's buffers,
// schedule it and record it through these, the plan with its own scratch and descriptor sets
// (made once for its envelope), attention() with the recording's.
#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "bias/bias_family.hpp"
#include "ops/distance_bias.hpp"
#include "ops/attention_launch.hpp"
#include "relpos/attention.hpp"

namespace relpos::detail {

class DescriptorSource;
class OpStorage;

// The buffers fused attention needs besides the caller's, made for the largest call it records.
// Counters of attention_fused's decoding dispatches (binding WORK), zeroed before a step's first
// dispatch (each record_attention) and again after every kAttentionWorkSlots dispatches.
inline constexpr std::uint32_t kAttentionWorkSlots = 16;
struct AttentionScratch {
  const Buffer* dummy = nullptr;        // bound where a mode reads nothing
  const Buffer* partial_out = nullptr;  // float32 [rows, splits, D]: the key splits' results (null: no splits)
  const Buffer* partial_lse = nullptr;  // float32 [rows, lse_stride] (attention_partials)
  const Buffer* lse = nullptr;          // float32 [rows]: the log-sum-exp when the caller takes none
  const Buffer* rows = nullptr;         // the per-distance rows the family computes (null: none)
  const Buffer* kv_scales = nullptr;    // an fp8 cache's scales, float32 [2, kv_heads] (null: none)
  const Buffer* work = nullptr;         // uint32 [kAttentionWorkSlots]: lane-split dispatches' item counters (null: no splits)
  bool kv_scales_written = false;       // a plan wrote them once (its steps' are the envelope's)
  std::unique_ptr<DistanceRows> bias_rows;
};
// Records the update of an fp8 cache's scales buffer (float32 [2, kv_heads]: k's, then v's).
void write_kv_scales(Recorder& r, const AttentionParams& p, const Buffer& kv_scales);
// For calls up to `envelope`; partials: the most of a call with splits (none: no splits).
AttentionScratch make_attention_scratch(Context& ctx, const AttentionParams& envelope, const AttentionPartials& partials, OpStorage& storage);

// How the caller's buffers must fit: attention() takes each exactly for its call; a plan's step
// takes k and v (and a paged cache) of its envelope and the rest at least the step's, every buffer
// bound whole.
enum class BufferFit { Exact, Step };
// lse_with_reference: lse rows of 2 floats (record_attention_with_lse_reference).
void check_attention_buffers(Recorder& r, const AttentionParams& p, const AttentionParams& envelope, const AttentionBuffers& b,
                             BufferFit fit, bool lse_with_reference = false);
// Every buffer given is of `r`'s Context, and out and lse share no byte with another (InvalidArgument
// naming it otherwise).
void require_own_buffers(Recorder& r, const AttentionBuffers& b);
// Shaw's tables whole ([2 * max_relative_position + 1, head_dim] each) where the bias family reads
// them (bound_whole: a plan's, checked against the device's binding limits too), and no bias input
// the family does not read (bias, rel_keys, rel_values).
void check_relative_tables(const DeviceLimits& lim, const AttentionParams& p, const AttentionBuffers& b, bool bound_whole = false);
// What the device must allow for calls up to `envelope` beyond the buffers' own bindings.
void check_attention_device(const DeviceLimits& lim, const AttentionParams& envelope);

// The window whose per-distance rows fused attention reads: [heads, queries + keys - 1] laid out
// for row_query_offset(), unmasked (the kernels mask).
DistanceWindow attention_row_window(const AttentionParams& p);

// The key splits of a call, how it launches, and the chunks of (batch, head) slabs its dispatches
// take (cuts: chunk c is [chunks[c], chunks[c + 1])); InvalidArgument where its splits go past the
// merge's limits or one slab's ranges past a binding.
// The CPU class decodes sequences of up to kDecodedQueries queries (a chunk's tail, speculative
// decoding's drafts) as it decodes one: a lane takes one query of its kv head's query heads over one
// key split. A workgroup of query rows (128 of them) costs the same with 2 of them as with 128.
inline constexpr std::uint32_t kDecodedQueries = 16;
// The GPU class decodes sequences of up to kGpuDecodedQueries: a tile of 16 query rows reads each
// key once for all of them, but with 2 it left 14 rows idle and took 4.8x the time of one query a
// sequence (H100, 8 sequences over 1k-16k keys, 2026-11-27), where decoding each query costs at
// most one query's step each. Decoded, 8 queries took 4.2x the one-query step against the tile's
// 7.9x; 16 took 7.9x either way, and the tile reads the keys once (docs/paged_attention.md).
inline constexpr std::uint32_t kGpuDecodedQueries = 8;
// The most bytes of float32 partial results a decoding launch may add to a call of several queries
// (its rows take the decoding launch's parts): it caps the launch's splits, and where fewer than
// the keys need (or than 2) fit, the call keeps one launch of query rows.
inline constexpr std::uint64_t kDecodingPartialBytes = 256ull << 20;
struct AttentionSchedule {
  std::uint32_t splits = 1;
  // A call of at most kDecodedQueries queries on the CPU class (kGpuDecodedQueries on the GPU
  // class), where a decoding call's keys would split, decodes them all (launch.decoded_queries: the
  // call's queries).
  AttentionLaunch launch;
  // A packed call of more: its sequences of at most that many (decoding beside a prefill) in
  // a launch of their own, whose lanes take their key splits as a decoding call's do; `launch`
  // skips them. Each launch takes its own splits; the partial results have `splits` parts a row,
  // the most of the two.
  std::optional<AttentionLaunch> decoding;
  std::vector<std::uint64_t> chunks;
  bool lse_with_reference = false;  // RELPOS_ATTN_LSE_WITH_REFERENCE: lse rows of 2 floats
};
// What a call's schedule follows beside the device (a plan keeps one per value): its queries, the
// splits of its launch of query rows, and where it decodes sequences of a few queries, how many
// and over how many splits (0: none).
struct ScheduleSplits {
  std::uint32_t queries = 0, own = 1, decoded = 0, decoding = 0;
  auto operator<=>(const ScheduleSplits&) const = default;
};
ScheduleSplits attention_schedule_splits(const DeviceLimits& lim, const AttentionParams& p, const AttentionTiles& tiles);
AttentionSchedule attention_schedule(const DeviceLimits& lim, const AttentionParams& p, const AttentionTiles& tiles, std::uint32_t kv_keys,
                                     bool lse_with_reference = false);
// The chunks whose bindings fit the device, k and v holding kv_keys keys per (batch, kv head).
std::vector<std::uint64_t> attention_chunks(const DeviceLimits& lim, const AttentionParams& p, std::uint32_t splits, std::uint32_t kv_keys,
                                            bool lse_with_reference = false);

// Records one call (after every check), k and v holding `kv_keys` keys per (batch, kv head).
// Descriptor sets from `sets` (a plan's: every buffer bound whole) or from the recording.
void record_attention(Recorder& r, const AttentionParams& p, const AttentionSchedule& schedule, std::uint32_t kv_keys,
                      const AttentionBuffers& b, const AttentionScratch& s, DescriptorSource* sets);

// attention() for a call that the caller merges with calls over other keys (ring attention's
// blocks, a sharded call's ranks): where the bias mode keeps a reference
// (attention_lse_has_reference: ALiBi's near bias), b.lse is float32 [rows, 2], a row's lse
// relative to its reference and then the reference, which attention_merge's PART_REFERENCES
// merges exactly however far the rows are from the keys (attention_merge.comp); otherwise as
// attention().
void record_attention_with_lse_reference(Recorder& r, const AttentionParams& p, const AttentionBuffers& b);
// What attention() (lse_with_reference: record_attention_with_lse_reference) checks before it
// records anything, and the schedule it would record: InvalidArgument naming what it refuses.
AttentionSchedule check_attention_call(Recorder& r, const AttentionParams& p, const AttentionBuffers& b, bool lse_with_reference);
// Records the call check_attention_call checked, with the schedule it gave (the same buffers).
void record_checked_attention(Recorder& r, const AttentionParams& p, const AttentionSchedule& schedule, const AttentionBuffers& b);

}  // namespace relpos::detail

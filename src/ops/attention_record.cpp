// The one recording path of fused attention (attention_record.hpp): checks, scratch, schedule and
// the dispatches, one per chunk of (batch, head) slabs whose buffer ranges the device can bind.
#include "ops/attention_record.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/op_storage.hpp"
#include "ops/planner.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos_contract/attention.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos::detail {
namespace {

std::string str(std::uint64_t v) { return std::to_string(v); }

// What to do when one unit of a chunked dispatch needs a larger binding than the device has.
constexpr const char* kSplitHint = "split the keys and merge the parts with attention_merge";

// The buffers of one check: each exists and holds `want` bytes (or more, where `larger`); a step's
// (`whole`) also fits one binding. Messages are built only on failure.
struct Checker {
  const DeviceLimits& lim;
  bool whole;
  template <class What>
  void operator()(const Buffer* b, std::uint64_t want, bool larger, const char* name, What&& what) const {
    if (whole) return require_bound_whole(lim, b, want, larger, name, what);
    if (!b) require(false, name, "null", "is required (" + what() + ")");
    if (larger ? b->size() < want : b->size() != want)
      require(false, name, str(b->size()) + " bytes", (larger ? "must hold at least " : "must be ") + what() + " = " + str(want) + " bytes");
  }
};

// The byte ranges [first, end) one chunk of (batch, head) slabs [bh0, bh1) binds, and their units:
// q, k (and v), out, lse, bias. A paged cache is bound whole (empty range here); so is a missing bias.
// Packed queries: a sequence's tokens follow from the lengths on the device, so q, out and lse are
// bound whole.
struct ChunkRanges {
  std::array<std::pair<std::uint64_t, std::uint64_t>, 5> bytes;
  std::array<std::uint32_t, 5> unit;
};

// The caches' bytes per value where their rows are whole 4-value words (f32, f16, bf16); 0 where not
// (q8_0, fp8: bound whole).
std::uint32_t kv_value_bytes(CacheFormat f) { return f == CacheFormat::F32 ? 4 : f == CacheFormat::F16 || f == CacheFormat::BF16 ? 2 : 0; }

ChunkRanges chunk_ranges(const AttentionParams& p, std::uint32_t S, std::uint32_t kv_keys, std::uint64_t bh0, std::uint64_t bh1,
                         bool lse_with_reference) {
  const std::uint64_t Q = p.queries, K = p.keys, D = p.head_dim, H = p.heads, KV = kv_keys;
  const std::uint32_t es = dtype_size(p.dtype), word = es * 4, kv_es = kv_value_bytes(p.cache());
  const std::uint32_t out_word = S > 1 ? 16 : dtype_size(p.output_dtype()) * 4;  // partial results are float32
  const std::uint64_t L = S > 1 ? attention_partials(p, S).lse_stride : lse_with_reference ? 2 : 1;  // lse floats a row
  const std::uint32_t group = p.heads / p.kv_heads, mode = bias_family(p.bias).kernel_mode;
  auto kv_slab = [&](std::uint64_t bh) { return (bh / H) * p.kv_heads + (bh % H) / group; };
  // Floats of the bias a chunk reads: per head for distance and dense biases.
  const std::uint64_t per_head = mode == RELPOS_ATTN_ROW ? Q + K - 1 : mode == RELPOS_ATTN_DENSE ? Q * K : 1;
  const bool one_batch = bh0 / H == (bh1 - 1) / H;
  const std::uint64_t h0 = one_batch ? bh0 % H : 0, h1 = one_batch ? (bh1 - 1) % H + 1 : H;
  // Rows [r0, r1) of q, out and lse.
  const std::uint64_t r0 = p.packed() ? 0 : bh0 * Q, r1 = p.packed() ? p.rows() : bh1 * Q;
  ChunkRanges c;
  c.bytes = {std::pair{r0 * D * es, r1 * D * es},
             p.paged.enabled() || kv_es == 0 ? std::pair<std::uint64_t, std::uint64_t>{0, 0}
                                             : std::pair{kv_slab(bh0) * KV * D * kv_es, (kv_slab(bh1 - 1) + 1) * KV * D * kv_es},
             std::pair{r0 * S * D * out_word / 4, r1 * S * D * out_word / 4}, std::pair{r0 * L * 4, r1 * L * 4},
             std::pair{h0 * per_head * 4, h1 * per_head * 4}};
  c.unit = {word, kv_es * 4, out_word, 4, 4};
  return c;
}

}  // namespace

void write_kv_scales(Recorder& r, const AttentionParams& p, const Buffer& kv_scales) {
  std::vector<std::uint32_t> words;
  for (const auto* scales : {&p.k_scales, &p.v_scales})
    for (float x : *scales) words.push_back(std::bit_cast<std::uint32_t>(x));
  update_words(r, kv_scales, 0, words);
}

DistanceWindow attention_row_window(const AttentionParams& p) { return {p.heads, p.queries, p.keys, p.row_query_offset(), 1, false}; }

AttentionScratch make_attention_scratch(Context& ctx, const AttentionParams& env, const AttentionPartials& partials, OpStorage& storage) {
  AttentionScratch s;
  s.dummy = &storage.make(16, "dummy");
  s.lse = &storage.make(env.rows() * 4, "lse");
  if (cache_format_scaled(env.cache())) s.kv_scales = &storage.make(std::uint64_t{env.kv_heads} * 8, "kv scales");
  if (partials.parts) {
    s.work = &storage.make(kAttentionWorkSlots * 4, "decoding's item counters");
    s.partial_out = &storage.make(partials.parts * env.head_dim * 4, "partial results");
    s.partial_lse = &storage.make(partials.lse * 4, "partial lse");
  }
  const BiasFamily& family = bias_family(env.bias);
  if (family.rows) {
    s.rows = &storage.make((std::uint64_t{env.queries} + env.keys - 1) * env.heads * 4, "heads * (queries + keys - 1) per-distance rows");
    s.bias_rows = family.rows(ctx, env, storage);
  }
  return s;
}

void check_attention_buffers(Recorder& r, const AttentionParams& p, const AttentionParams& env, const AttentionBuffers& b,
                             BufferFit fit, bool lse_with_reference) {
  const DeviceLimits& lim = r.context().limits();
  require_own_buffers(r, b);
  const bool step = fit == BufferFit::Step;
  const Checker check{lim, step};
  const std::uint64_t es = dtype_size(p.dtype), D = p.head_dim, rows = p.rows();
  auto dt = [&] { return std::string(dtype_name(p.dtype)); };
  const char* rows_shape = p.packed() ? " [total_queries, heads" : " [batch, heads, queries";
  auto rows_layout = [&] { return dt() + rows_shape + ", head_dim]"; };
  check(b.q, rows * D * es, step, "q buffer", rows_layout);
  const bool paged = p.paged.enabled();
  // A cache's rows: head_dim values of dtype, or cache_row_bytes of its cache_format.
  const std::string row = p.cache_format ? std::string(cache_format_name(p.cache())) + " rows of " + str(cache_row_bytes(p.cache(), p.head_dim)) + " bytes"
                                         : dt() + " head_dim";
  if (paged) {
    const std::uint64_t cache = p.kv_bytes();
    auto layout = [&] { return "[num_blocks, block_size, kv_heads] " + row + " (a paged cache)"; };
    check(b.k, cache, false, "k buffer", layout);
    check(b.v, cache, false, "v buffer", layout);
    check(b.block_table, std::uint64_t{p.batch} * p.paged.max_blocks * 4, false, "block_table buffer",
          [] { return std::string("int32 [batch, max_blocks]"); });
    check(b.cache_lengths, std::uint64_t{p.batch} * 4, false, "cache_lengths buffer", [] { return std::string("int32 [batch]"); });
    require(b.key_lengths == nullptr, "key_lengths buffer", "given", "must be null with a paged cache (cache_lengths replace it)");
    if (p.packed())
      check(b.query_lengths, std::uint64_t{p.batch} * 4, false, "query_lengths buffer", [] { return std::string("int32 [batch] (packed queries)"); });
  } else {
    const std::uint64_t kv = std::uint64_t{p.batch} * p.kv_heads * env.keys * cache_row_bytes(p.cache(), p.head_dim);
    auto layout = [&] {
      return step ? "[batch, kv_heads, envelope keys = " + str(env.keys) + "] " + row : "[batch, kv_heads, keys] " + row;
    };
    check(b.k, kv, step, "k buffer", layout);
    check(b.v, kv, step, "v buffer", layout);
    require(b.block_table == nullptr && b.cache_lengths == nullptr, "block_table buffer", "given", "needs a paged cache (paged.block_size)");
  }
  require(p.packed() || b.query_lengths == nullptr, "query_lengths buffer", "given", "needs packed queries (total_queries)");
  check(b.out, rows * D * dtype_size(p.output_dtype()), step, "out buffer",
        [&] { return std::string(dtype_name(p.output_dtype())) + rows_shape + ", head_dim]"; });
  if (b.lse)
    check(b.lse, rows * (lse_with_reference ? 8 : 4), step, "lse buffer",
          [&] { return std::string("float32") + rows_shape + (lse_with_reference ? ", 2]" : "]"); });
  check_relative_tables(lim, p, b, step);
  // A step's inputs that follow its shape may be larger; one the family reads whole may not.
  const BiasFamily& family = bias_family(p.bias);
  if (!family.info.rel_tables && !family.info.input.empty())
    check(b.bias, p.bias_elements() * 4, step && !family.rows, "bias buffer", [&] { return std::string(family.info.input); });
  if (b.key_lengths) check(b.key_lengths, std::uint64_t{p.batch} * 4, false, "key_lengths buffer", [] { return std::string("uint32 [batch]"); });
}

void require_own_buffers(Recorder& r, const AttentionBuffers& b) {
  require_own_buffers(r, {{b.q, "q buffer"}, {b.k, "k buffer"}, {b.v, "v buffer"}, {b.out, "out buffer", true}, {b.lse, "lse buffer", true},
                          {b.bias, "bias buffer"}, {b.rel_keys, "rel_keys buffer"}, {b.rel_values, "rel_values buffer"},
                          {b.key_lengths, "key_lengths buffer"}, {b.block_table, "block_table buffer"},
                          {b.cache_lengths, "cache_lengths buffer"}, {b.query_lengths, "query_lengths buffer"}});
}

void check_relative_tables(const DeviceLimits& lim, const AttentionParams& p, const AttentionBuffers& b, bool bound_whole) {
  const BiasFamily& family = bias_family(p.bias);
  // An input the mode does not read is refused rather than left unread: an engine that forgot to
  // set the mode would otherwise get attention without its bias.
  auto unread = [&](const Buffer* x, const char* name) {
    if (x) require(false, name, "given", "is not read by bias = " + std::string(family.info.name) + " (" +
                                          (family.info.input.empty() ? std::string("no input") : "its input: " + std::string(family.info.input)) + ")");
  };
  if (family.info.rel_tables) {
    const Checker check{lim, bound_whole};
    const std::uint64_t rel = (2ull * p.max_relative_position + 1) * p.head_dim * 4;
    auto layout = [] { return std::string("float32 [2 * max_relative_position + 1, head_dim]"); };
    check(b.rel_keys, rel, false, "rel_keys buffer", layout);
    check(b.rel_values, rel, false, "rel_values buffer", layout);
    unread(b.bias, "bias buffer");
  } else {
    unread(b.rel_keys, "rel_keys buffer");
    unread(b.rel_values, "rel_values buffer");
    if (family.info.input.empty()) unread(b.bias, "bias buffer");
  }
}

void check_attention_device(const DeviceLimits& lim, const AttentionParams& env) {
  const BiasFamily& family = bias_family(env.bias);
  if (family.check_device) family.check_device(lim, env);
  // Rows the family computes are written for every head through one binding.
  if (family.rows) require_binding(lim, (std::uint64_t{env.queries} + env.keys - 1) * env.heads, "heads * (queries + keys - 1)", "the per-distance bias rows");
  // A paged cache is bound whole: any block may hold any sequence's keys.
  // So is one of a q8_0 or fp8 format (its rows are not 4-value words).
  if (env.paged.enabled() || kv_value_bytes(env.cache()) == 0)
    require_binding(lim, env.kv_bytes() / 4, "k and v bytes / 4", "the k and v caches (" + std::string(cache_format_name(env.cache())) + ", in 4-byte words)");
  if (env.paged.enabled()) {
    require_binding(lim, std::uint64_t{env.batch} * env.paged.max_blocks, "batch * max_blocks", "the block table");
  }
}

// The decoding launch's shape: one query of each sequence (its push constants take the call's).
static AttentionParams one_query(AttentionParams p) {
  p.queries = 1;
  return p;
}

ScheduleSplits attention_schedule_splits(const DeviceLimits& lim, const AttentionParams& p, const AttentionTiles& tiles) {
  ScheduleSplits k;
  k.queries = p.queries;
  k.own = attention_splits(p, tiles);
  // A call of several queries: a sequence of a few beside them, or a call of a few queries, would
  // take a workgroup of query rows (CPU class: 128 of them; lavapipe, a packed call of 8 sequences
  // of 1k-16k keys with one query each beside a prefill of 256: 1.1 s, against 13 ms as a
  // decoding call; GPU class: a tile of 16, kGpuDecodedQueries). They decode, with as many splits
  // as a decoding call would take.
  const std::uint32_t most = tiles.tiled ? kGpuDecodedQueries : kDecodedQueries;
  k.decoded = p.queries > 1 && (p.packed() || p.queries <= most) ? std::min(p.queries, most) : 0;
  if (!k.decoded) return k;
  const AttentionParams one = one_query(p);
  // Its rows take that many parts (float32, bound whole): within a binding and kDecodingPartialBytes,
  // for the most tokens the call may hold, or no decoding launch.
  const std::uint64_t row_bytes = std::uint64_t{p.batch} * p.queries * p.heads * p.head_dim * 4;
  const std::uint64_t room = std::min<std::uint64_t>(lim.max_storage_buffer_range, kDecodingPartialBytes) / row_bytes;
  k.decoding = static_cast<std::uint32_t>(std::min<std::uint64_t>(attention_splits(one, tiles), room));
  // None where the room leaves fewer splits than the keys need (a split past the kernels' loop
  // bounds), or where one split is left (one lane would walk the keys).
  const std::uint32_t max_keys = tiles.tiled ? attention_tiled_max_split_keys(tiles, one) : AttentionParams::kMaxKeysPerSplit;
  if (k.decoding < 2 || div_up(p.keys, k.decoding) > max_keys) k.decoding = k.decoded = 0;
  return k;
}

namespace {

AttentionSchedule schedule_with(const DeviceLimits& lim, const AttentionParams& p, const AttentionTiles& tiles, std::uint32_t kv_keys,
                                const ScheduleSplits& k, bool lse_with_reference) {
  AttentionSchedule s;
  s.lse_with_reference = lse_with_reference;
  const bool alone = k.decoded == p.queries;  // every sequence decodes
  s.splits = alone ? k.decoding : std::max(k.own, k.decoding);  // the partial results' parts: each launch's at most
  require(s.splits <= AttentionMergeParams::kMaxParts, "keys", str(p.keys),
          "need " + str(s.splits) + " key splits; at most " + str(AttentionMergeParams::kMaxParts) + " are merged");
  require(p.rows() * s.splits * (p.head_dim / 4) <= 0xffffffffull, "key_splits", str(s.splits),
          "makes batch * heads * queries * splits * head_dim / 4 partial words exceed 2^32");
  const AttentionParams one = one_query(p);
  auto decoding = [&](bool share_heads) {
    AttentionLaunch l = attention_launch(one, tiles, k.decoding, share_heads, s.splits);
    l.decoded_queries = k.decoded;
    l.groups_per_bh *= k.decoded;
    return l;
  };
  auto queries = [&](bool share_heads) { return alone ? decoding(share_heads) : attention_launch(p, tiles, k.own, share_heads, s.splits); };
  s.launch = queries(true);
  if (k.decoded && !alone) s.decoding = decoding(true);
  s.chunks = attention_chunks(lim, p, s.splits, kv_keys, lse_with_reference);
  // Every chunk starts a slab of heads (at a group where the slabs do not divide it), or the heads
  // go one by one.
  auto slabs_start = [&](const AttentionLaunch& l) {
    return std::all_of(s.chunks.begin(), s.chunks.end(), [&](std::uint64_t cut) { return attention_slab_starts(p, l.slab_heads, cut); });
  };
  if (!slabs_start(s.launch)) s.launch = queries(false);
  if (s.decoding && !slabs_start(*s.decoding)) s.decoding = decoding(false);
  return s;
}

}  // namespace

AttentionSchedule attention_schedule(const DeviceLimits& lim, const AttentionParams& p, const AttentionTiles& tiles, std::uint32_t kv_keys,
                                     bool lse_with_reference) {
  ScheduleSplits k = attention_schedule_splits(lim, p, tiles);
  AttentionSchedule s = schedule_with(lim, p, tiles, kv_keys, k, lse_with_reference);
  // The GPU class's kernel of one query takes query rows where it has neither attention_decode nor
  // a kv head's heads as rows (no subgroup shuffles and no grouped-query heads, or chunks that cut a
  // kv head's slabs); those cannot take a sequence's queries counted from its last: the call keeps
  // one launch of query rows, and its own splits.
  if (k.decoded && !(s.decoding ? s.decoding->decodes : s.launch.decodes)) {
    k.decoded = k.decoding = 0;
    s = schedule_with(lim, p, tiles, kv_keys, k, lse_with_reference);
  }
  return s;
}

std::vector<std::uint64_t> attention_chunks(const DeviceLimits& lim, const AttentionParams& p, std::uint32_t splits, std::uint32_t kv_keys,
                                            bool lse_with_reference) {
  static const char* names[] = {"q", "k and v", "out", "lse", "bias"};
  auto misfit = [&](std::uint64_t bh0, std::uint64_t bh1) -> std::string {
    const ChunkRanges c = chunk_ranges(p, splits, kv_keys, bh0, bh1, lse_with_reference);
    for (int k = 0; k < 5; ++k)
      if (c.bytes[k].second > c.bytes[k].first && !bind_range_fits(lim, c.bytes[k].first, c.bytes[k].second)) return names[k];
    return "";
  };
  const std::uint64_t bh_total = std::uint64_t{p.batch} * p.heads;
  std::vector<std::uint64_t> cuts{0};
  while (cuts.back() < bh_total)
    cuts.push_back(misfit(cuts.back(), bh_total).empty()
                       ? bh_total
                       : largest_fitting_chunk(lim, cuts.back(), bh_total, "one (batch, head) slab", kSplitHint, misfit));
  return cuts;
}

void record_attention(Recorder& r, const AttentionParams& p, const AttentionSchedule& schedule, std::uint32_t kv_keys,
                      const AttentionBuffers& b, const AttentionScratch& s, DescriptorSource* sets) {
  const DeviceLimits& lim = r.context().limits();
  const AttentionLaunch& launch = schedule.launch;
  const std::uint32_t S = schedule.splits;
  const BiasFamily& family = bias_family(p.bias);
  const bool paged = p.paged.enabled();

  const Buffer* dummy = s.dummy;
  if (family.rows) s.bias_rows->record(r, attention_row_window(p), *b.bias, *s.rows, sets);
  const Buffer* bias = family.rows ? s.rows : b.bias;
  const Buffer* out = S > 1 ? s.partial_out : b.out;
  const Buffer* lse = S > 1 ? s.partial_lse : b.lse ? b.lse : s.lse;

  auto bounds = [&](std::uint64_t bh0, std::uint64_t bh1) {
    const ChunkRanges c = chunk_ranges(p, S, kv_keys, bh0, bh1, schedule.lse_with_reference);
    auto bind = [&](const Buffer& buf, int k) { return bind_range(lim, buf, c.bytes[k].first, c.bytes[k].second, c.unit[k]); };
    const bool kv_whole = c.bytes[1].second == 0;  // a paged, q8_0 or fp8 cache (chunk_ranges)
    return std::array<Bound, 5>{bind(*b.q, 0), kv_whole ? Bound{{b.k}, 0, true} : bind(*b.k, 1), bind(*out, 2), bind(*lse, 3),
                                bias ? bind(*bias, 4) : Bound{{dummy, 0, 16}, 0, true}};
  };

  const bool shaw = family.info.rel_tables;
  const BufferSpan block_table = paged ? BufferSpan{b.block_table} : BufferSpan{dummy};
  const BufferSpan rel_keys = shaw ? BufferSpan{b.rel_keys} : BufferSpan{dummy};
  const Buffer* lengths_buffer = paged ? b.cache_lengths : b.key_lengths;
  const BufferSpan lengths = lengths_buffer ? BufferSpan{lengths_buffer} : BufferSpan{dummy};
  const BufferSpan query_lengths = p.packed() ? BufferSpan{b.query_lengths} : BufferSpan{dummy};
  const BufferSpan kv_scales = s.kv_scales ? BufferSpan{s.kv_scales} : BufferSpan{dummy};
  if (s.kv_scales && !s.kv_scales_written) {  // attention(): in the command buffer, before the dispatches
    write_kv_scales(r, p, *s.kv_scales);
    barrier(r);
  }
  // The launches: `launch`, and a packed call's decoding launch for its sequences of a few queries.
  struct Pass {
    const AttentionLaunch* launch;
    push::AttentionPush pc;
  };
  std::array<Pass, 2> all{Pass{&launch, attention_push(p, launch, b.key_lengths != nullptr, kv_keys)}};
  if (schedule.decoding) {
    all[0].pc.decoding_queries = schedule.decoding->decoded_queries;
    all[1] = {&*schedule.decoding, attention_push(p, *schedule.decoding, b.key_lengths != nullptr, kv_keys)};
  }
  const std::span<Pass> passes(all.data(), schedule.decoding ? 2 : 1);  // (no allocation in a step's recording)
  for (Pass& x : passes) {
    x.pc.part_stride = S;
    if (schedule.lse_with_reference) x.pc.flags |= RELPOS_ATTN_LSE_WITH_REFERENCE;
    // attention_fused (a CPU device's threads each take a run of consecutive workgroups): one
    // dispatch range of the whole call's rows takes its sequences in turns.
    if (!x.launch->lane_splits && x.launch->key_block && schedule.chunks.size() == 2 && p.batch > 1) x.pc.interleave = p.batch;
  }
  // A launch of fewer splits than the call's leaves its rows' other parts to the lse of -inf they
  // are filled with here, which the merge skips.
  const bool fewer = std::any_of(passes.begin(), passes.end(), [&](const Pass& x) { return x.launch->splits < S; });
  const AttentionPartials partials = attention_partials(p, S);
  if (fewer) fill_words(r, *s.partial_lse, 0, partials.lse * 4, 0xff800000u);
  // Lane splits: each dispatch counts out its items on a counter of its own, zeroed before the
  // step's first dispatch (every dispatch binds them) and again once all are taken.
  const bool counted = std::any_of(passes.begin(), passes.end(), [](const Pass& x) { return x.launch->lane_splits; });
  const BufferSpan work = counted ? BufferSpan{s.work} : BufferSpan{dummy};
  auto zero_counters = [&] {
    fill_words(r, *s.work, 0, kAttentionWorkSlots * 4, 0);
    barrier(r);
  };
  if (counted) zero_counters();
  else if (fewer) barrier(r);
  std::uint32_t dispatches = 0;
  auto take_work_slot = [&](push::AttentionPush& pc) {
    pc.work_slot = dispatches++ % kAttentionWorkSlots;
    if (pc.work_slot != 0 || dispatches == 1) return;
    barrier(r);  // the earlier dispatches have counted out theirs
    zero_counters();
  };
  for (std::size_t c = 0; c + 1 < schedule.chunks.size(); ++c) {
    const std::uint64_t bh0 = schedule.chunks[c], bh1 = schedule.chunks[c + 1];
    const auto bound = bounds(bh0, bh1);
    for (Pass& x : passes) {
      x.pc.bh_first = static_cast<std::uint32_t>(bh0);
      x.pc.q_shift = bound[0].shift;
      x.pc.kv_shift = bound[1].shift;
      x.pc.out_shift = bound[2].shift;
      x.pc.lse_shift = bound[3].shift;
      x.pc.bias_shift = bound[4].shift;
    }
    BufferSpan v_span = bound[1].span;
    v_span.buffer = b.v;  // v has k's layout: the same range
    const contract::AttentionBindings bindings{.Q = bound[0].span,
                                               .K = bound[1].span,
                                               .V = v_span,
                                               .OUT = bound[2].span,
                                               .LSE = bound[3].span,
                                               // Shaw has no other bias input: its rel_values take the bias binding.
                                               .BIAS = shaw ? BufferSpan{b.rel_values} : bound[4].span,
                                               .REL_KEYS = rel_keys,
                                               .LENGTHS = lengths,
                                               .BLOCK_TABLE = block_table,
                                               .QUERY_LENGTHS = query_lengths,
                                               .KV_SCALES = kv_scales,
                                               .WORK = work};
    for (Pass& x : passes) {
      const AttentionLaunch& l = *x.launch;
      for_each_group_range(lim, attention_slabs(p, l.slab_heads, bh0, bh1) * l.groups_per_bh, [&](std::uint64_t first, std::uint32_t groups) {
        x.pc.first_group = static_cast<std::uint32_t>(first);
        if (l.lane_splits) take_work_slot(x.pc);
        dispatch(r, sets, l.shader, l.spec, bindings, x.pc, groups);
      });
    }
  }
  if (S > 1) {
    barrier(r);
    const std::uint32_t D4 = p.head_dim / 4;
    // The parts' lse rows: [S parts, then the row's reference where the mode keeps one].
    AttentionMergeLayout parts{s.partial_out, s.partial_lse, S, D4, S * D4, 1, partials.lse_stride, DType::F32};
    parts.reference = partials.lse_stride > S;
    parts.reference_at = S;
    parts.out_relative = schedule.lse_with_reference;
    record_attention_merge(r, parts, p.rows(), p.head_dim, *b.out, p.output_dtype(),
                           b.lse ? *b.lse : *s.lse, sets);
  }
}

}  // namespace relpos::detail

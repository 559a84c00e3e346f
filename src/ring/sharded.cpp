// Sequence-parallel attention on one rank: its queries against its own slice of the keys, the
// partial results of every rank all-gathered around the ring into one host-visible buffer
// ([ranks] slots of out then lse, float32), merged by log-sum-exp where they are wanted.
#include <algorithm>
#include <optional>

#include "ops/attention_launch.hpp"
#include "ops/attention_record.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "ring/block.hpp"
#include "ring/rank.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {
using Clock = std::chrono::steady_clock;
using detail::require;
using detail::ring_aligned;
}  // namespace

RingTiming sharded_attention(RingRank& rank, const ShardedParams& p, const AttentionBuffers& b) {
  RingRank::State& s = rank.state();
  const auto t_call = Clock::now();
  const AttentionParams& a = p.attention;
  const bool paged = a.paged.enabled();
  // The ranks agree on the call first (ring_attention.cpp).
  detail::RingFields fields = detail::ring_fields(a);
  fields.insert(fields.begin(), {{"ranks", p.ranks},
                                 {"gather", static_cast<std::int64_t>(p.gather), detail::RingField::Kind::Gather},
                                 {"root", p.root},
                                 {"paged", paged},
                                 {"query_offset", paged ? 0 : a.query_offset}});
  if (paged)  // each rank's cache has its own capacity (kept as 0, so that every rank sends as many fields)
    for (detail::RingField& f : fields)
      if (f.name == "keys") f.value = 0;

  const std::uint32_t R = p.ranks, r = rank.rank();
  const bool merges = p.gather == RingGather::All || r == p.root;
  const std::uint64_t B = a.batch, D = a.head_dim, rows = a.rows();
  // Rows [batch, heads, queries] or, packed, [total_queries, heads].
  const std::string rows_shape = a.packed() ? "[total_queries, heads" : "[batch, heads, queries";
  const DType out_dtype = a.output_dtype();
  // Set up by the checks: this rank's keys and slot of the gathered buffer, its block (absent where
  // its keys are all masked) with the schedule its check gave, and the block's buffers.
  RingPiece keys;
  detail::RingBiasInput bias_kind = detail::RingBiasInput::Parameters;
  std::uint32_t lse_floats = 1;
  std::uint64_t out_part = 0, slot = 0;
  Buffer* gathered = nullptr;
  struct Block {
    AttentionParams params;
    detail::AttentionSchedule schedule;
  };
  std::optional<Block> block;
  AttentionBuffers block_buffers;
  return detail::ring_call(s, fields, "sharded attention", [&] {
    p.validate();
    detail::ring_require_transport(*s.transport, p.ranks);
    const std::uint64_t Hkv = a.kv_heads, es = dtype_size(a.dtype);
    const std::string dt(dtype_name(a.dtype));
    keys = p.key_pieces(r)[0];
    detail::require_own_buffers(s.recorder, b);
    detail::ring_require_size(b.q, rows * D * es, "q buffer", dt + " " + rows_shape + ", head_dim]");
    if (!paged) {  // rows of the cache's format (docs/paged_attention.md, "Cache formats")
      const std::uint64_t row = cache_row_bytes(a.cache(), a.head_dim);
      const std::string layout = std::string(cache_format_name(a.cache())) + " [batch, kv_heads, local keys = " + std::to_string(keys.count) +
                                 ", " + (row == D * es ? "head_dim]" : "row of " + std::to_string(row) + " bytes]");
      detail::ring_require_size(b.k, B * Hkv * keys.count * row, "k buffer", layout);
      detail::ring_require_size(b.v, B * Hkv * keys.count * row, "v buffer", layout);
    }
    if (merges) detail::ring_require_size(b.out, rows * D * dtype_size(out_dtype), "out buffer", std::string(dtype_name(out_dtype)) + " " + rows_shape + ", head_dim]");
    if (merges && b.lse) detail::ring_require_size(b.lse, rows * 4, "lse buffer", "float32 " + rows_shape + "]");
    bias_kind = detail::ring_bias_input(a);
    if (p.local_bias_elements(r) > 0)
      detail::ring_require_size(b.bias, p.local_bias_elements(r) * 4, "bias buffer",
                   bias_kind == detail::RingBiasInput::Dense ? "float32 [heads, queries, local keys]" : "float32, as attention() takes it");
    require(b.key_lengths == nullptr, "key_lengths buffer", "given", "is not taken by sharded attention (no key padding)");

    // This rank's partial result goes into its slot of the gathered buffer: its lse rows relative
    // to their references where the mode keeps one (record_attention_with_lse_reference), so that
    // the merge weighs the ranks' parts exactly however far the queries are from the keys.
    lse_floats = detail::ring_lse_floats(a);
    out_part = ring_aligned(rows * D * 4);
    slot = out_part + ring_aligned(rows * 4 * lse_floats);
    gathered = &s.keep("gathered", R * slot, MemoryUse::Host);
    block_buffers = b;
    block_buffers.out = &s.view(*gathered, r * slot, rows * D * 4);
    block_buffers.lse = &s.view(*gathered, r * slot + out_part, rows * 4 * lse_floats);
    AttentionParams bp = paged ? a : detail::ring_block_params(a, {0, a.queries}, keys, DType::F32);
    bp.out_dtype = DType::F32;
    if (bias_kind == detail::RingBiasInput::DistanceRow)
      block_buffers.bias = &s.view(s.keep("bias", bp.bias_elements() * 4, MemoryUse::Device), 0, bp.bias_elements() * 4);
    // Whatever the block's own call would refuse, refused before any data moves: on every rank,
    // whether or not the causal mask hides its keys.
    detail::AttentionSchedule schedule = detail::check_attention_call(s.recorder, bp, block_buffers, detail::attention_lse_has_reference(bp));
    if (paged || !detail::ring_block_masked(a, {0, a.queries}, keys)) block.emplace(Block{bp, std::move(schedule)});
  }, [&](RingTransport&) {
    Recorder& rec = s.recorder;
    const bool timestamps = s.ctx->limits().timestamps;
    RingTiming timing;
    timing.setup_ms = detail::ms_since(t_call);
    RingStepTiming st;
    const auto t0 = Clock::now();
    detail::barrier(rec);
    std::uint32_t ts[4] = {};
    if (timestamps) ts[0] = rec.write_timestamp();
    if (!block) {
      ++timing.blocks_skipped;
      detail::fill_words(rec, *block_buffers.out, 0, rows * D * 4, 0);  // (views of this rank's slot)
      detail::fill_words(rec, *block_buffers.lse, 0, rows * 4 * lse_floats, 0xff800000u);  // (a reference never read)
    } else {
      ++timing.blocks_computed;
      if (bias_kind == detail::RingBiasInput::DistanceRow)
        detail::copy_in_groups(rec, *b.bias, *block_buffers.bias, detail::ring_bias_regions(a, bias_kind, {0, a.queries}, keys, {}));
      // As record_attention_with_lse_reference, checked at the admission; a dense input is the
      // block's already: [heads, queries, local keys].
      detail::record_checked_attention(rec, block->params, block->schedule, block_buffers);
    }
    if (timestamps) ts[1] = rec.write_timestamp();
    rec.submit();
    timing.record_ms += detail::ms_since(t0);
    rec.wait();
    if (timestamps) st.compute_ms = rec.elapsed_ms(ts[0], ts[1]);

    const auto c0 = Clock::now();
    detail::ring_allgather(s, *gathered, slot, "sharded attention's gather");
    st.comm_ms = detail::ms_since(c0);
    st.comm_end_ms = detail::ms_since(t0);

    if (merges) {
      const Buffer& lse_out = b.lse ? *b.lse : s.keep("lse", rows * 4, MemoryUse::Device);
      const Buffer& in = s.view(*gathered, 0, R * slot);
      const Buffer& in_lse = s.view(*gathered, out_part, R * slot - out_part);
      Recorder& merge = s.setup;
      const auto m0 = Clock::now();
      if (timestamps) ts[2] = merge.write_timestamp();
      {
        const auto op = detail::begin_op(merge);
        detail::record_attention_merge(merge,
                                       detail::ring_merge_layout(a, in, in_lse, R, static_cast<std::uint32_t>(slot / 16), static_cast<std::uint32_t>(slot / 4)),
                                       rows, a.head_dim, *b.out, out_dtype, lse_out);
      }
      if (timestamps) ts[3] = merge.write_timestamp();
      merge.submit();
      timing.record_ms += detail::ms_since(m0);
      merge.wait();
      if (timestamps) st.compute_ms += merge.elapsed_ms(ts[2], ts[3]);
    }
    st.wall_ms = detail::ms_since(t0);
    if (!timestamps) st.compute_ms = st.wall_ms - st.comm_ms;
    timing.steps.push_back(st);
    s.end_call();
    timing.total_ms = detail::ms_since(t_call);
    return timing;
  });
}

}  // namespace relpos

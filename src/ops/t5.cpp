// T5 on the GPU, on the per-distance bias kit: t5_distance_row.comp computes the row of each head
// (buckets from host-computed integer thresholds, then the table gather); the kit expands it.
#include <algorithm>
#include <cstring>
#include <string>

#include "ops/distance_bias.hpp"
#include "ops/t5_row.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/t5.hpp"
#include "relpos_push/t5.h"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

void check_table_buffer(const Recorder& r, const T5Params& p, const Buffer& table) {
  const std::uint64_t need = std::uint64_t{p.num_buckets} * p.heads * 4;
  detail::require(table.size() == need, "table buffer", std::to_string(table.size()) + " bytes",
                  "must be float32 [num_buckets, heads] = " + std::to_string(need) + " bytes");
  detail::require_t5_table_binding(r.context().limits(), p);
}

}  // namespace

namespace detail {

DistanceWindow window_of(const T5Params& p) { return {p.heads, p.queries, p.keys, p.query_offset, p.batch, false}; }

T5Windows::T5Windows(const T5Params& envelope) : cached_(envelope.num_buckets <= kCachedBuckets) {
  if (cached_) levels_ = t5_bucket_thresholds(envelope);
}

T5WindowThresholds T5Windows::of(const T5Params& p) const { return cached_ ? t5_window_thresholds(p, levels_) : t5_window_thresholds(p); }

void require_t5_table_binding(const DeviceLimits& lim, const T5Params& p) {
  const std::uint64_t entries = std::uint64_t{p.num_buckets} * p.heads;
  require_binding(lim, entries, "num_buckets * heads", "the T5 table");
}

namespace {

// The row's dispatches (on the kit's skeleton), from thresholds already in `thr`, into `row`.
void record_t5_row(Recorder& r, const T5Params& p, const T5WindowThresholds& window, const Buffer* table, const Buffer& thr,
                   const Buffer& row, DescriptorSource* sets) {
  push::T5RowPush pc{};
  pc.heads = p.heads;
  pc.bidirectional = p.bidirectional ? 1 : 0;
  pc.half_buckets = p.bidirectional ? p.num_buckets / 2 : 0;
  pc.max_exact = p.max_exact();
  pc.threshold_count = static_cast<std::uint32_t>(window.thresholds.size());
  pc.threshold_base = window.base;
  pc.scale = p.scale;
  pc.write_buckets = table ? 0 : 1;
  // Buckets need no table: the thresholds stand in for it. They are one row, not one per head.
  const BufferSpan thresholds_span{&thr};
  record_distance_rows_into(r, window_of(p), ShaderId::t5_distance_row, pc, {table ? table : &thr}, &thresholds_span,
                            table ? p.heads : 1, row, sets);
}

}  // namespace

const Buffer& t5_distance_row(Recorder& r, const T5Params& p, const Buffer* table) {
  const T5WindowThresholds window = t5_window_thresholds(p);
  const std::vector<std::uint32_t>& thresholds = window.thresholds;
  Buffer& thr = scratch(r, std::max<std::size_t>(thresholds.size(), 1) * 4, MemoryUse::Host);
  if (!thresholds.empty())  // no GPU work uses it yet (fresh, or its last submission has finished)
    std::memcpy(thr.host_pointer(), thresholds.data(), thresholds.size() * 4);
  const std::uint32_t out_heads = table ? p.heads : 1;
  Buffer& row = scratch(r, window_of(p).row_len() * out_heads * 4, MemoryUse::Device);
  record_t5_row(r, p, window, table, thr, row, nullptr);
  return row;
}

void t5_distance_row_into(Recorder& r, const T5Params& p, const T5WindowThresholds& window, const Buffer& table,
                          const Buffer& thresholds, const Buffer& row, DescriptorSource* sets) {
  if (window.thresholds.size() * 4 > thresholds.size() || std::uint64_t{p.queries + p.keys - 1} * p.heads * 4 > row.size())
    throw Error("internal: t5_distance_row_into: buffers too small for the row");
  detail::update_words(r, thresholds, 0, window.thresholds);
  detail::barrier(r);
  record_t5_row(r, p, window, &table, thresholds, row, sets);
}

}  // namespace detail

void t5_buckets(Recorder& r, const T5Params& p, const Buffer& out) {
  p.validate();
  detail::DistanceWindow w = detail::window_of(p);
  w.heads = 1;
  detail::expand_distance_bias(r, w, out, detail::ExpandMode::Copy32,
                               [&p](Recorder& rec) -> const Buffer& { return detail::t5_distance_row(rec, p, nullptr); });
}

void t5_bias(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& out, DType out_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  detail::distance_bias(r, detail::window_of(p), out, out_dtype,
                        [&](Recorder& rec) -> const Buffer& { return detail::t5_distance_row(rec, p, &table); });
}

void t5_bias_add(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& logits, DType logits_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  detail::distance_bias_add(r, detail::window_of(p), logits, logits_dtype,
                            [&](Recorder& rec) -> const Buffer& { return detail::t5_distance_row(rec, p, &table); });
}

}  // namespace relpos

// The T5 per-distance row (t5_row.hpp): buckets from host-computed integer thresholds, then the
// table gather, on the per-distance bias kit.
#include "ops/t5_row.hpp"

#include <algorithm>
#include <cstring>

#include "ops/distance_bias.hpp"
#include "relpos_push/t5.h"
#include "vk/dispatch.hpp"

namespace relpos::detail {

DistanceWindow window_of(const T5Params& p) { return {p.heads, p.queries, p.keys, p.query_offset, p.batch, false}; }

T5Windows::T5Windows(const T5Params& envelope) : envelope_(envelope) {}

T5WindowThresholds T5Windows::of(const T5Params& p) {
  // The first window bisects the formula like any single call; from the second on (a plan's steps)
  // a search in the levels is cheaper, when there are few.
  if (!cached_ && ++windows_ > 1 && envelope_.num_buckets <= kCachedBuckets) {
    levels_ = t5_bucket_thresholds(envelope_);
    cached_ = true;
  }
  return cached_ ? t5_window_thresholds(p, levels_) : t5_window_thresholds(p);
}

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

}  // namespace relpos::detail

// The T5 per-distance rows (t5_row.hpp): buckets from host-computed integer thresholds, then the
// table gather, on the per-distance bias kit.
#include "ops/t5_row.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "relpos_push/t5.h"
#include "vk/dispatch.hpp"

namespace relpos::detail {
namespace {

// The thresholds of the windows of one bucket configuration (an envelope) whose queries, keys and
// offset vary: the first window bisects the bucket formula like any single call; from the second
// on (a plan's steps), with few buckets, every level threshold is kept (a few KiB) and each
// window's thresholds are a search in them; with more, each window bisects (work that grows with
// the window, never with num_buckets).
class T5Windows {
 public:
  explicit T5Windows(const T5Params& envelope) : envelope_(envelope) {}
  T5WindowThresholds of(const T5Params& p) {
    if (!cached_ && ++windows_ > 1 && envelope_.num_buckets <= kCachedBuckets) {
      levels_ = t5_bucket_thresholds(envelope_);
      cached_ = true;
    }
    return cached_ ? t5_window_thresholds(p, levels_) : t5_window_thresholds(p);
  }

 private:
  static constexpr std::uint32_t kCachedBuckets = 4096;
  T5Params envelope_;
  std::vector<std::uint32_t> levels_;  // t5_bucket_thresholds(envelope), once cached
  bool cached_ = false;
  std::uint32_t windows_ = 0;
};

// The row's dispatches (on the kit's skeleton), from thresholds already in `thr`, into `row`:
// scale * table[bucket, h] for every head, or (no table) the int buckets, one row.
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
  // Buckets need no table: the thresholds stand in for it.
  const BufferSpan thresholds_span{&thr};
  record_distance_rows_into(r, window_of(p), ShaderId::t5_distance_row, pc, {table ? table : &thr}, &thresholds_span,
                            table ? p.heads : 1, row, sets);
}

class T5Rows final : public DistanceRows {
 public:
  T5Rows(Context& ctx, const T5Params& envelope, OpStorage& storage)
      // t5_window_thresholds lists at most one threshold per bucket level.
      : config_(envelope),
        thresholds_(storage.make(std::uint64_t{std::max<std::uint32_t>(envelope.num_buckets, 1)} * 4, "T5 thresholds")),
        windows_(envelope) {
    prepare_row_pipeline(ctx, ShaderId::t5_distance_row);
  }
  void record(Recorder& r, const DistanceWindow& w, const Buffer& table, const Buffer& rows, DescriptorSource* sets) override {
    T5Params p = config_;
    p.heads = w.heads;
    p.queries = w.queries;
    p.keys = w.keys;
    p.query_offset = w.query_offset;
    p.batch = 1;
    const T5WindowThresholds window = windows_.of(p);
    update_words(r, thresholds_, 0, window.thresholds);
    barrier(r);
    record_t5_row(r, p, window, &table, thresholds_, rows, sets);
  }

 private:
  T5Params config_;
  const Buffer& thresholds_;
  T5Windows windows_;
};

}  // namespace

DistanceWindow window_of(const T5Params& p) { return {p.heads, p.queries, p.keys, p.query_offset, p.batch, false}; }

std::unique_ptr<DistanceRows> t5_rows(Context& ctx, const T5Params& envelope, OpStorage& storage) {
  return std::make_unique<T5Rows>(ctx, envelope, storage);
}

const Buffer& t5_bucket_row(Recorder& r, const T5Params& p) {
  const T5WindowThresholds window = t5_window_thresholds(p);
  const std::vector<std::uint32_t>& thresholds = window.thresholds;
  Buffer& thr = scratch(r, std::max<std::size_t>(thresholds.size(), 1) * 4, MemoryUse::Host);
  if (!thresholds.empty())  // no GPU work uses it yet (fresh, or its last submission has finished)
    std::memcpy(thr.host_pointer(), thresholds.data(), thresholds.size() * 4);
  Buffer& row = scratch(r, window_of(p).row_len() * 4, MemoryUse::Device);
  record_t5_row(r, p, window, nullptr, thr, row, nullptr);
  return row;
}

void require_t5_table_binding(const DeviceLimits& lim, const T5Params& p) {
  const std::uint64_t entries = std::uint64_t{p.num_buckets} * p.heads;
  require_binding(lim, entries, "num_buckets * heads", "the T5 table");
}

}  // namespace relpos::detail

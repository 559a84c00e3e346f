#pragma once
// The T5 per-distance row, shared by the T5 bias ops and the fused attention (which reads the bias
// of each tile from it instead of a [Q, K] tensor).
#include <vector>

#include "params/distance_window.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/recorder.hpp"
#include "relpos/t5.hpp"

namespace relpos::detail {

class DescriptorSource;

// Records the row: int buckets ([1, Q + K - 1]) when table is null, else scale * table[bucket, h]
// for every head ([heads, Q + K - 1], float32). Entry x holds relative position
// x - (Q - 1) - query_offset. Returns the scratch buffer, ready to read after the barrier it ends with.
const Buffer& t5_distance_row(Recorder& r, const T5Params& p, const Buffer* table);

// The window of a T5 bias: no mask of its own (a decoder's buckets are one-sided instead).
DistanceWindow window_of(const T5Params& p);

// The same row of every head into caller-given buffers, for plans that hold them across steps:
// `window` (what t5_window_thresholds(p) gives: at most num_buckets words) goes into `thresholds`
// by vkCmdUpdateBuffer, so a submission still pending keeps its own; `row` holds at least
// heads * (Q + K - 1) floats; descriptor sets come from `sets`. Ends with a barrier.
void t5_distance_row_into(Recorder& r, const T5Params& p, const T5WindowThresholds& window, const Buffer& table,
                          const Buffer& thresholds, const Buffer& row, DescriptorSource* sets);

// The windows of one T5 configuration (a plan's envelope) whose queries, keys and offset vary:
// with few buckets every level threshold is kept (a few KiB) and each window's thresholds are a
// search in them; with more, each window bisects the bucket formula (work that grows with the
// window, never with num_buckets).
class T5Windows {
 public:
  explicit T5Windows(const T5Params& envelope);
  T5WindowThresholds of(const T5Params& p) const;

 private:
  static constexpr std::uint32_t kCachedBuckets = 4096;
  std::vector<std::uint32_t> levels_;  // t5_bucket_thresholds(envelope), when cached
  bool cached_ = false;
};

// The table is read through one binding: throws InvalidArgument when it is larger.
void require_t5_table_binding(const DeviceLimits& lim, const T5Params& p);

}  // namespace relpos::detail

#pragma once
// The T5 per-distance rows, shared by the T5 bias ops, BiasPlan and fused attention (which reads the
// bias of each tile from them instead of a [Q, K] tensor): the bucket of each relative position
// from host-computed integer thresholds, then scale * table[bucket, h] per head.
#include <memory>

#include "ops/distance_bias.hpp"
#include "params/distance_window.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/recorder.hpp"
#include "relpos/t5.hpp"

namespace relpos::detail {

// The window of a T5 bias: no mask of its own (a decoder's buckets are one-sided instead).
DistanceWindow window_of(const T5Params& p);

// The rows of windows within `envelope`'s bucket configuration (num_buckets, max_distance,
// bidirectional, log, scale; the window's shape and offset come with each record), the table as
// the parameters. Each window's thresholds go into a buffer from `storage` by vkCmdUpdateBuffer, so
// that a submission still pending keeps its own.
std::unique_ptr<DistanceRows> t5_rows(Context& ctx, const T5Params& envelope, OpStorage& storage);

// The int buckets of p's window ([1, Q + K - 1], entry x at relative position x - (Q - 1) -
// query_offset) into a fresh scratch buffer, ready after the barrier it ends with.
const Buffer& t5_bucket_row(Recorder& r, const T5Params& p);

// The table is read through one binding: throws InvalidArgument when it is larger.
void require_t5_table_binding(const DeviceLimits& lim, const T5Params& p);

}  // namespace relpos::detail

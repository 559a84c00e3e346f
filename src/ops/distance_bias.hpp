#pragma once
// The GPU side of the per-distance bias kit (docs/ARCHITECTURE.md, "Adding a per-distance bias"):
// a family's row shader, written on shaders/include/relpos/distance_row.glsl, fills the rows
// [heads, Q + K - 1]; the kit checks the outputs, records the rows and expands them into a
// [heads, Q, K] bias or adds them into [batch, heads, Q, K] logits (ops/expand.hpp). Fused
// attention reads the same rows (attention_distance_rows).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "ops/expand.hpp"
#include "params/distance_window.hpp"
#include "relpos/buffer.hpp"
#include "relpos/dtype.hpp"
#include "relpos/recorder.hpp"
#include "ops/planner.hpp"
#include "relpos_push/loop_bound.h"
#include "ops/planner.hpp"
#include "vk/dispatch.hpp"

namespace relpos::detail {

// Heads one invocation of a row shader writes (the skeleton's loop): half the loop bound, leaving
// the other half to the family's own loops (T5's bisection). More heads take further dispatches.
inline constexpr std::uint32_t kRowHeadsPerInvocation = RELPOS_MAX_LOOP_ITERATIONS / 2;
inline constexpr std::uint32_t kRowGroup = 64;

// Host floats in a fresh host-visible scratch buffer (no GPU work uses it yet).
const Buffer& upload_floats(Recorder& r, std::span<const float> values);

// Records a family's row shader over the window into `rows` ([out_heads, Q + K - 1] 32-bit
// values), ending with the barrier that makes them readable. `pc` is the family's push block: the
// kit fills its leading RELPOS_DISTANCE_ROW_FIELDS. `params` is binding 0, `extra` (if any)
// binding 2. Descriptor sets come from `sets` (a plan's) or the recording's pools.
template <class Push>
void record_distance_rows_into(Recorder& r, const DistanceWindow& w, ShaderId shader, Push pc, BufferSpan params,
                               const BufferSpan* extra, std::uint32_t out_heads, const Buffer& rows, DescriptorSource* sets = nullptr) {
  const std::uint32_t row_len = static_cast<std::uint32_t>(w.row_len());
  pc.row_len = row_len;
  pc.rp_first = static_cast<std::int32_t>(w.rp_first());
  pc.causal = w.causal ? 1 : 0;
  for (std::uint32_t h0 = 0; h0 < out_heads; h0 += kRowHeadsPerInvocation) {
    pc.first_head = h0;
    pc.head_count = std::min(kRowHeadsPerInvocation, out_heads - h0);
    for_each_group_range(r.context().limits(), div_up(row_len, kRowGroup), [&](std::uint64_t first, std::uint32_t groups) {
      pc.first = static_cast<std::uint32_t>(first * kRowGroup);
      if (extra) dispatch(r, sets, shader, {kRowGroup}, {params, {&rows}, *extra}, pc, groups);
      else dispatch(r, sets, shader, {kRowGroup}, {params, {&rows}}, pc, groups);
    });
  }
  barrier(r);
}

// The same into a fresh scratch buffer, which it returns. out_heads 0: w.heads.
template <class Push>
const Buffer& record_distance_rows(Recorder& r, const DistanceWindow& w, ShaderId shader, Push pc, BufferSpan params,
                                   const BufferSpan* extra = nullptr, std::uint32_t out_heads = 0) {
  if (out_heads == 0) out_heads = w.heads;
  Buffer& rows = scratch(r, w.row_len() * out_heads * 4, MemoryUse::Device);
  record_distance_rows_into(r, w, shader, pc, params, extra, out_heads, rows);
  return rows;
}

// The expansion's shape for a window: [heads, Q, K] written, or [batch, heads, Q, K] added into.
inline ExpandShape expand_shape(const DistanceWindow& w, ExpandMode mode) {
  const bool add = mode == ExpandMode::AddF32 || mode == ExpandMode::AddF16;
  return {w.queries, w.keys, w.heads, std::uint64_t{add ? w.batch : 1u} * w.heads * w.queries};
}

// Records the rows of one operation (a family's record_distance_rows call).
using RowsRecorder = std::function<const Buffer&(Recorder&)>;

// Checks `out` first; then, as one operation, the rows and their expansion: write (mode Copy32 or
// WriteF16) [heads, Q, K] or add (AddF32, AddF16) into [batch, heads, Q, K].
void expand_distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, ExpandMode mode, const RowsRecorder& rows);
// The bias [heads, Q, K] of dtype F32 or F16.
void distance_bias(Recorder& r, const DistanceWindow& w, const Buffer& out, DType dtype, const RowsRecorder& rows);
// logits [batch, heads, Q, K] of dtype F32 or F16 += the bias.
void distance_bias_add(Recorder& r, const DistanceWindow& w, const Buffer& logits, DType dtype, const RowsRecorder& rows);

}  // namespace relpos::detail

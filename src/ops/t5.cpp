// T5 on the GPU: one small dispatch computes the per-distance row (buckets from host-computed
// integer thresholds, then the table gather), then expand_distance() writes the [.., Q, K] output.
#include <algorithm>
#include <cstring>
#include <string>

#include "ops/expand.hpp"
#include "ops/t5_row.hpp"
#include "reference/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/t5.hpp"
#include "relpos_push/t5.h"
#include "relpos_push/loop_bound.h"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

// Heads one invocation of t5_distance_row.comp writes (its one loop over heads): half the loop
// bound, so that the rest of the invocation's loops (the T5 bucket's bisection, at most 32) fit
// beside it. Any more heads take further dispatches.
constexpr std::uint32_t kHeadsPerInvocation = RELPOS_MAX_LOOP_ITERATIONS / 2;

void check_table_buffer(const Recorder& r, const T5Params& p, const Buffer& table) {
  const std::uint64_t need = std::uint64_t{p.num_buckets} * p.heads * 4;
  detail::require(table.size() == need, "table buffer", std::to_string(table.size()) + " bytes",
                  "must be float32 [num_buckets, heads] = " + std::to_string(need) + " bytes");
  detail::require_t5_table_binding(r.context().limits(), p);
}

}  // namespace

namespace detail {

void require_t5_table_binding(const DeviceLimits& lim, const T5Params& p) {
  const std::uint64_t entries = std::uint64_t{p.num_buckets} * p.heads;
  require(entries * 4 <= lim.max_storage_buffer_range, "num_buckets * heads", std::to_string(entries),
          "the T5 table must fit one storage buffer binding of the device (" + std::to_string(lim.max_storage_buffer_range / 4) +
              " values)");
}

namespace {

// The row's dispatches, from thresholds already in `thr`.
void record_t5_row(Recorder& r, const T5Params& p, const T5WindowThresholds& window, const Buffer* table, const Buffer& thr,
                   const Buffer& row, DescriptorSource* sets) {
  const std::uint32_t row_len = p.queries + p.keys - 1;
  const std::uint32_t out_heads = table ? p.heads : 1;
  push::T5RowPush pc{};
  pc.row_len = row_len;
  pc.rp_first = static_cast<std::int32_t>(-(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset);
  pc.heads = p.heads;
  pc.bidirectional = p.bidirectional ? 1 : 0;
  pc.half_buckets = p.bidirectional ? p.num_buckets / 2 : 0;
  pc.max_exact = p.max_exact();
  pc.threshold_count = static_cast<std::uint32_t>(window.thresholds.size());
  pc.threshold_base = window.base;
  pc.scale = p.scale;
  pc.write_buckets = table ? 0 : 1;
  // Buckets need no table; bind the thresholds in its place.
  for (std::uint32_t h0 = 0; h0 < out_heads; h0 += kHeadsPerInvocation) {
    pc.first_head = h0;
    pc.head_count = std::min(kHeadsPerInvocation, out_heads - h0);
    detail::for_each_group_range(r.context().limits(), detail::div_up(row_len, kT5RowGroup), [&](std::uint64_t first, std::uint32_t groups) {
      pc.first = static_cast<std::uint32_t>(first * kT5RowGroup);
      detail::dispatch(r, sets, "t5_distance_row", {kT5RowGroup}, {{table ? table : &thr}, {&thr}, {&row}}, pc, groups);
    });
  }
  detail::barrier(r);
}

}  // namespace

const Buffer& t5_distance_row(Recorder& r, const T5Params& p, const Buffer* table) {
  const T5WindowThresholds window = t5_window_thresholds(p);
  const std::vector<std::uint32_t>& thresholds = window.thresholds;
  Buffer& thr = detail::scratch(r, std::max<std::size_t>(thresholds.size(), 1) * 4, MemoryUse::Host);
  if (!thresholds.empty())  // no GPU work uses it yet (fresh, or its last submission has finished)
    std::memcpy(thr.host_pointer(), thresholds.data(), thresholds.size() * 4);
  const std::uint32_t out_heads = table ? p.heads : 1;
  Buffer& row = detail::scratch(r, std::uint64_t{p.queries + p.keys - 1} * out_heads * 4, MemoryUse::Device);
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
  const detail::ExpandShape shape{p.queries, p.keys, 1, p.queries};
  detail::check_expand(r.context().limits(), shape, out, detail::ExpandMode::Copy32);
  const auto op = detail::begin_op(r);
  const Buffer& row = detail::t5_distance_row(r, p, nullptr);
  detail::expand_distance(r, shape, row, out, detail::ExpandMode::Copy32);
}

void t5_bias(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& out, DType out_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  detail::require(out_dtype != DType::I32, "out_dtype", "i32", "must be f32 or f16");
  const detail::ExpandShape shape{p.queries, p.keys, p.heads, std::uint64_t{p.heads} * p.queries};
  const auto mode = detail::expand_mode(out_dtype, false);
  detail::check_expand(r.context().limits(), shape, out, mode);
  const auto op = detail::begin_op(r);
  const Buffer& row = detail::t5_distance_row(r, p, &table);
  detail::expand_distance(r, shape, row, out, mode);
}

void t5_bias_add(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& logits, DType logits_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  const auto mode = detail::expand_mode(logits_dtype, true);
  const detail::ExpandShape shape{p.queries, p.keys, p.heads, std::uint64_t{p.batch} * p.heads * p.queries};
  detail::check_expand(r.context().limits(), shape, logits, mode);
  const auto op = detail::begin_op(r);
  const Buffer& row = detail::t5_distance_row(r, p, &table);
  detail::expand_distance(r, shape, row, logits, mode);
}

}  // namespace relpos

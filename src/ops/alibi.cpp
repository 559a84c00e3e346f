// ALiBi on the GPU: one small dispatch computes the per-distance rows of every head from the
// host's slopes, then expand_distance() writes or adds the [.., Q, K] output.
#include <algorithm>
#include <cstring>
#include <string>

#include "ops/expand.hpp"
#include "reference/checks.hpp"
#include "relpos/alibi.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos_push/alibi.h"
#include "relpos_push/loop_bound.h"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

constexpr std::uint32_t kRowGroup = 64;
// Heads one invocation of alibi_distance_row.comp writes (its only loop): half the loop bound, as
// the T5 row takes. Any more heads take further dispatches.
constexpr std::uint32_t kHeadsPerInvocation = RELPOS_MAX_LOOP_ITERATIONS / 2;

// Records the per-distance rows [heads, Q + K - 1] and returns the scratch buffer holding them.
const Buffer& distance_rows(Recorder& r, const AlibiParams& p) {
  const std::vector<float> slopes = alibi_slopes(p);
  Buffer& sb = detail::scratch(r, slopes.size() * 4, MemoryUse::Host);
  std::memcpy(sb.host_pointer(), slopes.data(), slopes.size() * 4);  // fresh: no GPU work uses it yet
  const std::uint32_t row_len = p.queries + p.keys - 1;
  Buffer& rows = detail::scratch(r, std::uint64_t{row_len} * p.heads * 4, MemoryUse::Device);
  push::AlibiRowPush pc{};
  pc.row_len = row_len;
  pc.rp_first = static_cast<std::int32_t>(-(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset);
  pc.causal = p.causal ? 1 : 0;
  for (std::uint32_t h0 = 0; h0 < p.heads; h0 += kHeadsPerInvocation) {
    pc.first_head = h0;
    pc.head_count = std::min(kHeadsPerInvocation, p.heads - h0);
    detail::for_each_group_range(r.context().limits(), detail::div_up(row_len, kRowGroup), [&](std::uint64_t first, std::uint32_t groups) {
      pc.first = static_cast<std::uint32_t>(first * kRowGroup);
      detail::dispatch(r, "alibi_distance_row", {kRowGroup}, {{&sb}, {&rows}}, pc, groups);
    });
  }
  detail::barrier(r);
  return rows;
}

}  // namespace

void alibi_bias(Recorder& r, const AlibiParams& p, const Buffer& out, DType out_dtype) {
  p.validate();
  detail::require(out_dtype != DType::I32, "out_dtype", "i32", "must be f32 or f16");
  const auto mode = detail::expand_mode(out_dtype, false);
  const detail::ExpandShape shape{p.queries, p.keys, p.heads, std::uint64_t{p.heads} * p.queries};
  detail::check_expand(r.context().limits(), shape, out, mode);
  const auto op = detail::begin_op(r);
  const Buffer& rows = distance_rows(r, p);
  detail::expand_distance(r, shape, rows, out, mode);
}

void alibi_bias_add(Recorder& r, const AlibiParams& p, const Buffer& logits, DType logits_dtype) {
  p.validate();
  const auto mode = detail::expand_mode(logits_dtype, true);
  const detail::ExpandShape shape{p.queries, p.keys, p.heads, std::uint64_t{p.batch} * p.heads * p.queries};
  detail::check_expand(r.context().limits(), shape, logits, mode);
  const auto op = detail::begin_op(r);
  const Buffer& rows = distance_rows(r, p);
  detail::expand_distance(r, shape, rows, logits, mode);
}

}  // namespace relpos

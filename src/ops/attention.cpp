// Fused attention on the GPU: attention() records through the one path it shares with
// AttentionPlan (ops/attention_record.hpp), with the recording's scratch; decoding shapes split the
// keys across workgroups and merge the float32 partial results by their log-sum-exp
// (attention_merge.comp), which is also public.
#include <string>

#include "ops/attention_launch.hpp"
#include "ops/attention_record.hpp"
#include "ops/op_storage.hpp"
#include "params/checks.hpp"
#include "relpos/attention.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos_push/loop_bound.h"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

using detail::require;

void require_bytes(const Buffer* b, std::uint64_t want, const std::string& name, const std::string& what) {
  require(b != nullptr, name, "null", "is required (" + what + ")");
  require(b->size() == want, name, std::to_string(b->size()) + " bytes", "must be " + what + " = " + std::to_string(want) + " bytes");
}

void record_call(Recorder& r, const AttentionParams& p, const AttentionBuffers& b, bool lse_with_reference) {
  detail::record_checked_attention(r, p, detail::check_attention_call(r, p, b, lse_with_reference), b);
}

}  // namespace

namespace detail {
AttentionSchedule check_attention_call(Recorder& r, const AttentionParams& p, const AttentionBuffers& b, bool lse_with_reference) {
  p.validate();
  require(!lse_with_reference || b.lse, "lse buffer", "null", "is required (float32 [rows, 2]: the lse and its reference)");
  const DeviceLimits& lim = r.context().limits();
  check_attention_buffers(r, p, p, b, BufferFit::Exact, lse_with_reference);
  check_attention_device(lim, p);
  return attention_schedule(lim, p, attention_tiles(r.context()), p.keys, lse_with_reference);
}

void record_checked_attention(Recorder& r, const AttentionParams& p, const AttentionSchedule& schedule, const AttentionBuffers& b) {
  const auto op = begin_op(r);
  RecordingStorage storage(r);
  const AttentionScratch scratch = make_attention_scratch(r.context(), p, attention_partials(p, schedule.splits), storage);
  record_attention(r, p, schedule, p.keys, b, scratch, nullptr);
}

void record_attention_with_lse_reference(Recorder& r, const AttentionParams& p, const AttentionBuffers& b) {
  record_call(r, p, b, attention_lse_has_reference(p));
}
}  // namespace detail

void attention(Recorder& r, const AttentionParams& p, const AttentionBuffers& b) { record_call(r, p, b, false); }

void attention_merge(Recorder& r, const AttentionMergeParams& p, const Buffer& partial_out, const Buffer& partial_lse,
                     const Buffer& out, const Buffer* lse) {
  p.validate();
  // attention_merge.comp loops over the parts once in each invocation; the published limit is
  // half the bound, which leaves room for a second pass.
  constexpr std::uint32_t max_parts = AttentionMergeParams::kMaxParts;
  static_assert(2 * max_parts <= RELPOS_MAX_LOOP_ITERATIONS);
  require(p.parts <= max_parts, "parts", std::to_string(p.parts),
          "must be <= " + std::to_string(max_parts) + " (the merge's loops over the parts stay under RELPOS_MAX_LOOP_ITERATIONS = " +
              std::to_string(RELPOS_MAX_LOOP_ITERATIONS) + "); merge in several passes");
  const std::uint64_t es = dtype_size(p.dtype), D = p.head_dim;
  const std::string dt(dtype_name(p.dtype));
  detail::require_own_buffers(r, {{&partial_out, "partial_out buffer"}, {&partial_lse, "partial_lse buffer"}, {&out, "out buffer", true}, {lse, "lse buffer", true}});
  require_bytes(&partial_out, p.parts * p.rows * D * es, "partial_out buffer", dt + " [parts, rows, head_dim]");
  require_bytes(&partial_lse, p.parts * p.rows * 4, "partial_lse buffer", "float32 [parts, rows]");
  require_bytes(&out, p.rows * D * es, "out buffer", dt + " [rows, head_dim]");
  if (lse) require_bytes(lse, p.rows * 4, "lse buffer", "float32 [rows]");
  require(p.rows * (D / 4) <= 0xffffffffull && p.parts * p.rows <= 0xffffffffull, "rows", std::to_string(p.rows), "too many words for 32-bit indices");
  const auto op = detail::begin_op(r);
  const Buffer& lse_out = lse ? *lse : detail::scratch(r, p.rows * 4, MemoryUse::Device);
  const std::uint32_t D4 = p.head_dim / 4;
  detail::record_attention_merge(r, {&partial_out, &partial_lse, p.parts, static_cast<std::uint32_t>(p.rows * D4), D4, static_cast<std::uint32_t>(p.rows), 1, p.dtype},
               p.rows, p.head_dim, out, p.dtype, lse_out);
}

}  // namespace relpos

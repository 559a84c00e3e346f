// T5 on the GPU, on the per-distance bias kit: t5_distance_row.comp computes the row of each head
// (buckets from host-computed integer thresholds, then the table gather); the kit expands it;
// BiasPlan's steps record the same rows.
#include <algorithm>
#include <string>

#include "ops/bias_plan_state.hpp"
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

detail::RowsRecorder t5_rows(Recorder& r, const T5Params& p, const Buffer& table) {
  return detail::source_rows(detail::window_of(p), [&](detail::OpStorage& s) {
    return detail::DistanceSource{detail::t5_rows(r.context(), p, s), &table};
  });
}

}  // namespace

void t5_buckets(Recorder& r, const T5Params& p, const Buffer& out) {
  p.validate();
  detail::DistanceWindow w = detail::window_of(p);
  w.heads = 1;
  detail::expand_distance_bias(r, w, out, detail::ExpandMode::Copy32, [&p](Recorder& rec) -> const Buffer& { return detail::t5_bucket_row(rec, p); });
}

void t5_bias(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& out, DType out_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  detail::distance_bias(r, detail::window_of(p), out, out_dtype, t5_rows(r, p, table));
}

void t5_bias_add(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& logits, DType logits_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  detail::distance_bias_add(r, detail::window_of(p), logits, logits_dtype, t5_rows(r, p, table));
}

BiasPlan::BiasPlan(Context& ctx, const T5Params& envelope, const Buffer& table, DType dtype, bool add) {
  envelope.validate();
  const std::uint64_t need = std::uint64_t{envelope.num_buckets} * envelope.heads * 4;
  detail::require(table.size() == need, "table buffer", std::to_string(table.size()) + " bytes",
                  "must be float32 [num_buckets, heads] = " + std::to_string(need) + " bytes");
  detail::require_t5_table_binding(ctx.limits(), envelope);
  state_ = std::make_unique<State>(ctx, detail::window_of(envelope), dtype, add, [&](detail::OpStorage& s) {
    return detail::DistanceSource{detail::t5_rows(ctx, envelope, s), &table};
  });
}

}  // namespace relpos

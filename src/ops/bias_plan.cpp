// Plans of the per-distance biases (relpos/bias_plan.hpp), on the kit: the family's rows into the
// plan's buffer, then the kit's expansion with the plan's shifted copies and descriptor sets.
#include "relpos/bias_plan.hpp"

#include <functional>
#include <list>
#include <string>

#include "ops/distance_bias.hpp"
#include "ops/kerple_row.hpp"
#include "ops/plan_storage.hpp"
#include "ops/t5_row.hpp"
#include "relpos/context.hpp"
#include "relpos_push/alibi.h"
#include "vk/access.hpp"

namespace relpos {

using detail::require;

struct BiasPlan::State {
  Context* ctx = nullptr;
  detail::DistanceWindow env;
  detail::ExpandMode mode{};
  const Buffer* rows = nullptr;
  const Buffer* shifted = nullptr;
  const Buffer* params = nullptr;      // slopes, KERPLE's [r1; r2], or T5's thresholds
  // The family's rows of a step's window into `rows`, descriptor sets from `sets`.
  std::function<void(Recorder&, const detail::DistanceWindow&, detail::DescriptorSource&)> record_rows;
  detail::PlanStorage storage;

  State(Context& c, const detail::DistanceWindow& envelope, DType dtype, bool add) : ctx(&c), env(envelope), storage(c) {
    env.validate();
    mode = detail::expand_mode(dtype, add);
    if (!add) require(dtype != DType::I32, "dtype", "i32", "must be f32 or f16");
    rows = &storage.make(env.row_len() * env.heads * 4, "heads * (queries + keys - 1) per-distance rows");
    const detail::ExpandShape largest{env.queries, env.keys, env.heads, 0};
    shifted = &storage.make(std::min(detail::expand_scratch_bytes(largest), c.limits().max_storage_buffer_range), "shifted rows");
    detail::prepare_expand_pipelines(c, mode);
  }

};

BiasPlan::BiasPlan(Context& ctx, const T5Params& envelope, const Buffer& table, DType dtype, bool add) {
  envelope.validate();
  const std::uint64_t need = std::uint64_t{envelope.num_buckets} * envelope.heads * 4;
  require(table.size() == need, "table buffer", std::to_string(table.size()) + " bytes",
          "must be float32 [num_buckets, heads] = " + std::to_string(need) + " bytes");
  detail::require_t5_table_binding(ctx.limits(), envelope);
  state_ = std::make_unique<State>(ctx, detail::window_of(envelope), dtype, add);
  State& s = *state_;
  // t5_window_thresholds lists at most one threshold per bucket level.
  s.params = &s.storage.make(std::uint64_t{std::max<std::uint32_t>(envelope.num_buckets, 1)} * 4, "T5 thresholds");
  detail::device_of(ctx)->pipeline(detail::ShaderId::t5_distance_row, {detail::kRowGroup});
  s.record_rows = [&s, envelope, windows = detail::T5Windows(envelope), &table](Recorder& r, const detail::DistanceWindow& w,
                                                                               detail::DescriptorSource& sets) mutable {
    T5Params p = envelope;
    p.queries = w.queries;
    p.keys = w.keys;
    p.query_offset = w.query_offset;
    detail::t5_distance_row_into(r, p, windows.of(p), table, *s.params, *s.rows, &sets);
  };
}

BiasPlan::BiasPlan(Context& ctx, const AlibiParams& envelope, DType dtype, bool add) {
  envelope.validate();
  state_ = std::make_unique<State>(ctx, detail::distance_window(envelope), dtype, add);
  State& s = *state_;
  s.params = &s.storage.upload(alibi_slopes(envelope));
  detail::device_of(ctx)->pipeline(detail::ShaderId::alibi_distance_row, {detail::kRowGroup});
  s.record_rows = [&s](Recorder& r, const detail::DistanceWindow& w, detail::DescriptorSource& sets) {
    detail::record_distance_rows_into(r, w, detail::ShaderId::alibi_distance_row, push::AlibiRowPush{}, {s.params}, nullptr, w.heads,
                                      *s.rows, &sets);
  };
}

BiasPlan::BiasPlan(Context& ctx, const KerpleParams& envelope, DType dtype, bool add) {
  envelope.validate();
  state_ = std::make_unique<State>(ctx, detail::distance_window(envelope), dtype, add);
  State& s = *state_;
  std::vector<float> params = envelope.r1;  // [2, heads]
  params.insert(params.end(), envelope.r2.begin(), envelope.r2.end());
  s.params = &s.storage.upload(params);
  detail::device_of(ctx)->pipeline(detail::ShaderId::kerple_distance_row, {detail::kRowGroup});
  s.record_rows = [&s, variant = envelope.variant](Recorder& r, const detail::DistanceWindow& w, detail::DescriptorSource& sets) {
    detail::kerple_distance_rows_into(r, w, variant, *s.params, *s.rows, &sets);
  };
}

BiasPlan::~BiasPlan() = default;
BiasPlan::BiasPlan(BiasPlan&&) noexcept = default;
BiasPlan& BiasPlan::operator=(BiasPlan&&) noexcept = default;

void BiasPlan::record(Recorder& r, const BiasStep& step, const Buffer& out) {
  State& s = *state_;
  if (&r.context() != s.ctx) require(false, "recorder", "of another Context", "must record on the Context the plan was built on");
  if (step.queries < 1 || step.queries > s.env.queries)
    require(false, "queries", std::to_string(step.queries),
            "must be in [1, " + std::to_string(s.env.queries) + "] (the plan's envelope: queries = " + std::to_string(s.env.queries) + ")");
  if (step.keys < 1 || step.keys > s.env.keys)
    require(false, "keys", std::to_string(step.keys),
            "must be in [1, " + std::to_string(s.env.keys) + "] (the plan's envelope: keys = " + std::to_string(s.env.keys) + ")");
  detail::DistanceWindow w = s.env;
  w.queries = step.queries;
  w.keys = step.keys;
  w.query_offset = step.query_offset;
  w.validate();
  const detail::ExpandShape shape = detail::expand_shape(w, s.mode);
  detail::check_expand(s.ctx->limits(), shape, out, s.mode);
  const auto op = detail::begin_op(r);
  detail::DescriptorSource& sets = s.storage.sets().begin_step();
  s.record_rows(r, w, sets);
  detail::expand_distance(r, shape, *s.rows, out, s.mode, {s.shifted, &sets});
  s.storage.sets().end_step(r);
}

}  // namespace relpos

// Plans of the per-distance biases (relpos/bias_plan.hpp), on the kit: the family's rows (its
// DistanceSource, made once with the plan's storage) into the plan's buffer, then the kit's
// expansion with the plan's shifted copies and descriptor sets. The constructor of each family
// with host parameters is instantiated next to its source (ops/bias_plan_state.hpp).
#include "relpos/bias_plan.hpp"

#include <algorithm>
#include <string>

#include "ops/bias_plan_state.hpp"

namespace relpos {

using detail::require;
using detail::require_f32_or_f16;

BiasPlan::State::State(Context& c, const detail::DistanceWindow& envelope, DType dtype, bool add, const detail::SourceMaker& make)
    : dev(detail::device_of(c)), env(envelope), storage(c) {
  env.validate();
  mode = detail::expand_mode(dtype, add);
  require_f32_or_f16(dtype, "dtype");
  rows = &storage.make(env.row_len() * env.heads * 4, "heads * (queries + keys - 1) per-distance rows");
  const detail::ExpandShape largest{env.queries, env.keys, env.heads, 0};
  shifted = &storage.make(std::min(detail::expand_scratch_bytes(largest), c.limits().max_storage_buffer_range), "shifted rows");
  detail::prepare_expand_pipelines(c, mode);
  source = make(storage);
}

BiasPlan::~BiasPlan() = default;
BiasPlan::BiasPlan(BiasPlan&&) noexcept = default;
BiasPlan& BiasPlan::operator=(BiasPlan&&) noexcept = default;

void BiasPlan::record(Recorder& r, const BiasStep& step, const Buffer& out) {
  State& s = detail::live_state(state_, "BiasPlan");
  detail::require_plan_recorder(r, s.dev);
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
  detail::check_expand(r, shape, out, s.mode);
  detail::require_own_buffers(r, {{s.source.params, s.source.params_name}, {&out, detail::expanded_name(s.mode), true}});
  const auto op = detail::begin_op(r);
  detail::DescriptorSource& sets = s.storage.sets().begin_step();
  s.source.rows->record(r, w, *s.source.params, *s.rows, &sets);
  detail::expand_distance(r, shape, *s.rows, out, s.mode, {s.shifted, &sets});
  s.storage.sets().end_step(r);
}

}  // namespace relpos

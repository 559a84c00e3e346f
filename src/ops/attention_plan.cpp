// A fused attention plan: its pipelines compiled and its scratch made at construction for the
// envelope; a step records through the path attention() takes (ops/attention_record.hpp) with the
// plan's scratch, a cached launch and the descriptor sets of a free slot.
#include "relpos/attention_plan.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "ops/attention_record.hpp"
#include "ops/plan_storage.hpp"
#include "ops/planner.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/recorder.hpp"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {

using detail::require;

struct AttentionPlan::State {
  std::shared_ptr<detail::Device> dev;  // the Context's (a moved Context takes it along)
  AttentionParams env;
  detail::AttentionTiles tiles{};
  std::uint32_t max_splits = 1;
  std::unique_ptr<detail::PlanStorage> storage;  // the scratch and the descriptor sets
  detail::AttentionScratch scratch;
  // The launches of the step shapes recorded so far, by their queries and key splits: only the keys
  // per split change between steps of one entry.
  std::map<detail::ScheduleSplits, detail::AttentionSchedule> schedules;
};

namespace {

std::string str(std::uint64_t v) { return std::to_string(v); }

}  // namespace

AttentionPlan::AttentionPlan(Context& ctx, const AttentionParams& envelope) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.dev = detail::device_of(ctx);
  s.storage = std::make_unique<detail::PlanStorage>(ctx, "use attention(), which splits it");
  s.env = envelope;
  s.env.query_offset = 0;
  const AttentionParams& env = s.env;
  env.validate();
  detail::require(env.output_dtype() == env.dtype, "out_dtype", std::string(dtype_name(env.output_dtype())),
                  "must be the envelope's dtype in a plan (a float32 partial result of f16 inputs is attention()'s)");
  detail::check_attention_device(ctx.limits(), env);
  s.tiles = detail::attention_tiles(ctx);

  // A query count's splits only grow with the keys: its step of the envelope's keys has the most
  // partial results.
  detail::AttentionPartials partials;
  for (std::uint32_t q = 1; q <= env.queries; ++q) {
    AttentionParams p = env;
    p.queries = q;
    const std::uint32_t S = detail::attention_schedule(ctx.limits(), p, s.tiles, env.keys).splits;
    s.max_splits = std::max(s.max_splits, S);
    const detail::AttentionPartials x = detail::attention_partials(p, S);
    partials.parts = std::max(partials.parts, x.parts);
    partials.lse = std::max(partials.lse, x.lse);
  }
  s.scratch = detail::make_attention_scratch(ctx, env, partials, *s.storage);
  if (s.scratch.kv_scales) {  // every step's fp8 scales are the envelope's: written once, here
    Recorder r(ctx);
    detail::write_kv_scales(r, env, *s.scratch.kv_scales);
    r.submit_and_wait();
    s.scratch.kv_scales_written = true;
  }

  // Every pipeline a step can use: one query or more, each split count (the workgroup of one query
  // follows the splits up to a full workgroup of lanes).
  const std::shared_ptr<detail::Device>& dev = s.dev;
  for (std::uint32_t q : {1u, 2u}) {
    if (q > env.queries) continue;
    AttentionParams p = env;
    p.queries = q;
    for (std::uint32_t S = 1; S <= s.max_splits; S = S < s.tiles.lanes ? S + 1 : std::max(S + 1, s.max_splits)) {
      const detail::AttentionLaunch l = detail::attention_launch(p, s.tiles, S);
      dev->pipeline(l.shader, l.spec);
    }
  }
  if (s.max_splits > 1) dev->pipeline(detail::ShaderId::attention_merge, detail::attention_merge_spec(env.head_dim, DType::F32, env.dtype, s.tiles.merge_part_lanes));
  // The descriptor sets a step takes, made with its slot: one for the launches (every variant
  // binds the same buffers through one layout), the merge's and the per-distance rows'. The first
  // step that splits its keys then takes no new set.
  detail::StepSets& sets = s.storage->sets();
  sets.reserve(detail::attention_launch(env, s.tiles, 1).shader);
  if (s.max_splits > 1) sets.reserve(detail::ShaderId::attention_merge);
  if (s.scratch.bias_rows) sets.reserve(s.scratch.bias_rows->shader());
}

AttentionPlan::~AttentionPlan() = default;
AttentionPlan::AttentionPlan(AttentionPlan&&) noexcept = default;
AttentionPlan& AttentionPlan::operator=(AttentionPlan&&) noexcept = default;

const AttentionParams& AttentionPlan::envelope() const { return detail::live_state(state_, "AttentionPlan").env; }

AttentionParams AttentionPlan::step_params(const AttentionStep& step) const {
  AttentionParams p = envelope();
  p.queries = step.queries;
  p.keys = p.paged.enabled() && step.keys == 0 ? p.keys : step.keys;  // a paged step's keys are the envelope's
  p.query_offset = step.query_offset;
  p.total_queries = step.total_queries;
  return p;
}

void AttentionPlan::record(Recorder& r, const AttentionStep& step, const AttentionBuffers& b) {
  State& s = detail::live_state(state_, "AttentionPlan");
  const AttentionParams& env = s.env;
  detail::require_plan_recorder(r, s.dev);
  if (step.queries < 1 || step.queries > env.queries)
    require(false, "queries", str(step.queries),
            "must be in [1, " + str(env.queries) + "] (the plan's envelope: queries = " + str(env.queries) + ")");
  if (env.paged.enabled() && step.keys != 0 && step.keys != env.keys)
    require(false, "keys", str(step.keys),
            "must be 0 or the envelope's keys = max_blocks * block_size = " + str(env.keys) +
                " with a paged cache (cache_lengths say how many each sequence holds)");
  if (env.paged.enabled() && step.query_offset != 0)
    require(false, "query_offset", std::to_string(step.query_offset), "must be 0 with a paged cache (cache_lengths place the queries)");
  if (env.packed() ? step.total_queries < 1 || step.total_queries > env.total_queries : step.total_queries != 0)
    require(false, "total_queries", str(step.total_queries),
            env.packed() ? "must be in [1, " + str(env.total_queries) + "] (the plan's envelope: total_queries = " + str(env.total_queries) + ")"
                         : std::string("must be 0: the plan's envelope has no packed queries"));
  if (env.packed() && step.total_queries > std::uint64_t{env.batch} * step.queries)
    require(false, "total_queries", str(step.total_queries), "must be <= batch * queries = " + str(std::uint64_t{env.batch} * step.queries));
  const std::uint32_t min_keys = std::max<std::uint32_t>(env.memory_prefix, 1);
  if (!env.paged.enabled() && (step.keys < min_keys || step.keys > env.keys))
    require(false, "keys", str(step.keys),
            "must be in [" + str(min_keys) + ", " + str(env.keys) + "] (the plan's envelope: keys = " + str(env.keys) +
                ", memory_prefix = " + str(env.memory_prefix) + ")");
  const AttentionParams p = step_params(step);
  // Within the envelope, only the query offset (relative positions within 32 bits) and an explicit
  // key_splits (enough for the keys) can make the step invalid; validate() says which.
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::int64_t rp_first = -(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset;
  const std::int64_t rp_last = static_cast<std::int64_t>(p.keys) - 1 - p.query_offset;
  const bool offset_ok = p.query_offset > -kMax && p.query_offset < kMax && rp_first > -kMax && rp_last < kMax;
  const bool splits_ok = p.key_splits == 0 || (p.key_splits <= p.keys && std::uint64_t{p.key_splits} * AttentionParams::kMaxKeysPerSplit >= p.keys);
  if (!offset_ok || !splits_ok) p.validate();

  const DeviceLimits& lim = s.dev->limits;
  detail::check_attention_buffers(r, p, env, b, detail::BufferFit::Step);
  const detail::ScheduleSplits key = detail::attention_schedule_splits(lim, p, s.tiles);
  auto it = s.schedules.find(key);
  if (it == s.schedules.end()) it = s.schedules.emplace(key, detail::attention_schedule(lim, p, s.tiles, env.keys)).first;
  detail::AttentionSchedule& schedule = it->second;
  if (schedule.splits > s.max_splits) throw Error("internal: attention plan step needs more splits than its envelope");
  // Splits follow the envelope's batch and queries, not a step's tokens: its partial results fit.
  const detail::AttentionPartials partials = detail::attention_partials(p, schedule.splits);
  if (partials.parts && (!s.scratch.partial_lse || partials.lse * 4 > s.scratch.partial_lse->size() ||
                         partials.parts * p.head_dim * 4 > s.scratch.partial_out->size()))
    throw Error("internal: attention plan step needs more partial results than its envelope");
  // Every buffer of a step is bound whole (checked above): one chunk, whatever the keys.

  const auto op = detail::begin_op(r);
  detail::DescriptorSource& sets = s.storage->sets().begin_step();
  detail::record_attention(r, p, schedule, env.keys, b, s.scratch, &sets);
  s.storage->sets().end_step(r);
}

}  // namespace relpos

// A fused attention plan: the kernel's specialisation is fixed from the envelope (one query: the
// lanes always take key splits, so the workgroup width does not follow the split count), its
// pipelines compiled and its scratch made at construction; a step writes its push constants, its
// T5 thresholds (by vkCmdUpdateBuffer) and the descriptor sets of a free slot.
#include "relpos/attention_plan.hpp"

#include <algorithm>
#include <limits>
#include <list>
#include <optional>
#include <string>

#include "ops/attention_kernel.hpp"
#include "ops/distance_bias.hpp"
#include "ops/plan_storage.hpp"
#include "ops/planner.hpp"
#include "ops/t5_row.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/recorder.hpp"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {

using detail::require;

struct AttentionPlan::State {
  Context* ctx = nullptr;
  std::shared_ptr<detail::Device> dev;
  AttentionParams env;
  detail::AttentionTiles tiles{};
  std::uint32_t max_splits = 1;
  const Buffer* dummy = nullptr;
  const Buffer* partial_out = nullptr;  // float32 [rows, splits, D] of the largest step
  const Buffer* partial_lse = nullptr;
  const Buffer* lse = nullptr;  // float32 [rows] when the caller passes none
  const Buffer* rows = nullptr;  // the per-distance rows of T5 or KERPLE
  const Buffer* t5_thresholds = nullptr;
  std::optional<detail::T5Windows> t5_windows;
  std::unique_ptr<detail::PlanStorage> storage;  // the scratch above and the descriptor sets

  const Buffer& make(std::uint64_t bytes, const char* what) {
    return storage->make(bytes, what, "use attention(), which splits it");
  }
};

namespace {

std::string str(std::uint64_t v) { return std::to_string(v); }

using detail::require_bound_whole;

}  // namespace

AttentionPlan::AttentionPlan(Context& ctx, const AttentionParams& envelope) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.ctx = &ctx;
  s.dev = detail::device_of(ctx);
  s.storage = std::make_unique<detail::PlanStorage>(ctx);
  s.env = envelope;
  s.env.query_offset = 0;
  AttentionParams& env = s.env;
  env.validate();
  detail::require(env.output_dtype() == env.dtype, "out_dtype", std::string(dtype_name(env.output_dtype())),
                  "must be the envelope's dtype in a plan (a float32 partial result of f16 inputs is attention()'s)");
  const DeviceLimits& lim = ctx.limits();
  s.tiles = detail::attention_tiles(ctx);
  const std::uint64_t D = env.head_dim, BH = std::uint64_t{env.batch} * env.heads;

  // The splits only grow with the keys and shrink with the queries: each query count's largest
  // step has the most partial results.
  std::uint64_t partial_rows = 0;
  for (std::uint32_t q = 1; q <= env.queries; ++q) {
    AttentionParams p = env;
    p.queries = q;
    const std::uint32_t S = detail::attention_splits(p, s.tiles);
    require(S <= AttentionMergeParams::kMaxParts, "keys", str(env.keys),
            "need " + str(S) + " key splits; at most " + str(AttentionMergeParams::kMaxParts) + " are merged");
    require(p.rows() * S * (D / 4) <= 0xffffffffull, "key_splits", str(S),
            "makes batch * heads * queries * splits * head_dim / 4 partial words exceed 2^32");
    s.max_splits = std::max(s.max_splits, S);
    if (S > 1) partial_rows = std::max(partial_rows, p.rows() * S);
  }
  if (env.bias == AttentionBias::Shaw) {
    const std::uint64_t rel_bytes = (2ull * env.max_relative_position + 1) * D * 4;
    require(rel_bytes <= lim.max_storage_buffer_range, "rel_keys", str(rel_bytes) + " bytes",
            "must fit in maxStorageBufferRange = " + str(lim.max_storage_buffer_range));
  }

  s.dummy = &s.make(16, "dummy");
  s.lse = &s.make(BH * env.queries * 4, "lse");
  if (partial_rows) {
    s.partial_out = &s.make(partial_rows * D * 4, "partial results");
    s.partial_lse = &s.make(partial_rows * 4, "partial lse");
  }
  if (detail::attention_computes_rows(env.bias))
    s.rows = &s.make((std::uint64_t{env.queries} + env.keys - 1) * env.heads * 4, "heads * (queries + keys - 1) per-distance rows");
  if (env.bias == AttentionBias::T5) {
    detail::require_t5_table_binding(lim, env.t5_row_params());
    // t5_window_thresholds lists at most one threshold per bucket level.
    s.t5_thresholds = &s.make(std::uint64_t{std::max<std::uint32_t>(env.t5.num_buckets, 1)} * 4, "T5 thresholds");
    s.t5_windows.emplace(env.t5_row_params());
  }

  // Every pipeline a step can use: one query or more, one split or more.
  for (std::uint32_t q : {1u, 2u}) {
    if (q > env.queries) continue;
    for (std::uint32_t S : {1u, 2u}) {
      if (S > s.max_splits) continue;
      AttentionParams p = env;
      p.queries = q;
      const detail::AttentionLaunch l = detail::attention_launch(p, s.tiles, S, true);
      s.dev->pipeline(l.shader, l.spec);
    }
  }
  if (s.max_splits > 1) s.dev->pipeline(detail::ShaderId::attention_merge, detail::attention_merge_spec(env.head_dim, DType::F32, env.dtype));
  if (env.bias == AttentionBias::T5) s.dev->pipeline(detail::ShaderId::t5_distance_row, {detail::kRowGroup});
  if (env.bias == AttentionBias::Kerple) s.dev->pipeline(detail::ShaderId::kerple_distance_row, {detail::kRowGroup});
}

AttentionPlan::~AttentionPlan() = default;
AttentionPlan::AttentionPlan(AttentionPlan&&) noexcept = default;
AttentionPlan& AttentionPlan::operator=(AttentionPlan&&) noexcept = default;

const AttentionParams& AttentionPlan::envelope() const { return state_->env; }

AttentionParams AttentionPlan::step_params(const AttentionStep& step) const {
  AttentionParams p = state_->env;
  p.queries = step.queries;
  p.keys = step.keys;
  p.query_offset = step.query_offset;
  return p;
}

void AttentionPlan::record(Recorder& r, const AttentionStep& step, const AttentionBuffers& b) {
  State& s = *state_;
  const AttentionParams& env = s.env;
  if (&r.context() != s.ctx) require(false, "recorder", "of another Context", "must record on the Context the plan was built on");
  if (step.queries < 1 || step.queries > env.queries)
    require(false, "queries", str(step.queries),
            "must be in [1, " + str(env.queries) + "] (the plan's envelope: queries = " + str(env.queries) + ")");
  if (env.paged.enabled() && step.keys != env.keys)
    require(false, "keys", str(step.keys),
            "must be the envelope's keys = max_blocks * block_size = " + str(env.keys) + " with a paged cache (cache_lengths say how many each sequence holds)");
  if (env.paged.enabled() && step.query_offset != 0)
    require(false, "query_offset", std::to_string(step.query_offset), "must be 0 with a paged cache (cache_lengths place the queries)");
  const std::uint32_t min_keys = std::max<std::uint32_t>(env.memory_prefix, 1);
  if (step.keys < min_keys || step.keys > env.keys)
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

  const DeviceLimits& lim = s.ctx->limits();
  const std::uint64_t es = dtype_size(p.dtype), D = p.head_dim, rows = p.rows();
  auto dt = [&] { return std::string(dtype_name(p.dtype)); };
  require_bound_whole(lim, b.q, rows * D * es, true, "q buffer", [&] { return dt() + " [batch, heads, queries, head_dim]"; });
  const bool paged = env.paged.enabled();
  const std::uint64_t cache = paged ? env.paged.cache_elements(p.kv_heads, p.head_dim) * es : std::uint64_t{p.batch} * p.kv_heads * env.keys * D * es;
  auto cache_layout = [&] {
    return paged ? dt() + " [num_blocks, block_size, kv_heads, head_dim] (a paged cache)"
                 : dt() + " [batch, kv_heads, envelope keys = " + str(env.keys) + ", head_dim]";
  };
  require_bound_whole(lim, b.k, cache, !paged, "k buffer", cache_layout);
  require_bound_whole(lim, b.v, cache, !paged, "v buffer", cache_layout);
  if (paged) {
    require_bound_whole(lim, b.block_table, std::uint64_t{p.batch} * env.paged.max_blocks * 4, false, "block_table buffer",
                   [] { return std::string("int32 [batch, max_blocks]"); });
    require_bound_whole(lim, b.cache_lengths, std::uint64_t{p.batch} * 4, false, "cache_lengths buffer", [] { return std::string("int32 [batch]"); });
  }
  detail::require_kv_kind(p, b);
  require_bound_whole(lim, b.out, rows * D * es, true, "out buffer", [&] { return dt() + " [batch, heads, queries, head_dim]"; });
  if (b.lse) require_bound_whole(lim, b.lse, rows * 4, true, "lse buffer", [] { return std::string("float32 [batch, heads, queries]"); });
  if (p.bias == AttentionBias::Shaw) {
    const std::uint64_t rel = (2ull * p.max_relative_position + 1) * D * 4;
    auto rel_layout = [] { return std::string("float32 [2 * max_relative_position + 1, head_dim]"); };
    require_bound_whole(lim, b.rel_keys, rel, false, "rel_keys buffer", rel_layout);
    require_bound_whole(lim, b.rel_values, rel, false, "rel_values buffer", rel_layout);
  } else if (p.bias != AttentionBias::None) {
    require_bound_whole(lim, b.bias, p.bias_elements() * 4, !detail::attention_computes_rows(p.bias), "bias buffer",
                   [&] { return std::string(detail::attention_bias_layout(p.bias)); });
  }
  if (b.key_lengths)
    require_bound_whole(lim, b.key_lengths, std::uint64_t{p.batch} * 4, false, "key_lengths buffer", [] { return std::string("uint32 [batch]"); });

  const std::uint32_t S = detail::attention_splits(p, s.tiles);
  if (S > s.max_splits) throw Error("internal: attention plan step needs more splits than its envelope");
  const detail::AttentionLaunch launch = detail::attention_launch(p, s.tiles, S, true);

  const auto op = detail::begin_op(r);
  detail::DescriptorSource& sets = s.storage->sets().begin_step();
  const Buffer* bias = b.bias ? b.bias : s.dummy;
  if (p.bias == AttentionBias::T5) {
    const T5Params t5 = p.t5_row_params();
    detail::t5_distance_row_into(r, t5, s.t5_windows->of(t5), *b.bias, *s.t5_thresholds, *s.rows, &sets);
    bias = s.rows;
  } else if (detail::attention_computes_rows(p.bias)) {
    bias = &detail::attention_distance_rows(r, p, *b.bias, s.rows, &sets);
  }
  const Buffer* out = S > 1 ? s.partial_out : b.out;
  const Buffer* lse = S > 1 ? s.partial_lse : b.lse ? b.lse : s.lse;
  const bool shaw = p.bias == AttentionBias::Shaw;
  const Buffer* lengths = detail::attention_lengths(p, b);
  if (!lengths) lengths = s.dummy;
  push::AttentionPush pc = detail::attention_push(p, launch, b.key_lengths != nullptr, env.keys);
  detail::for_each_group_range(lim, std::uint64_t{p.batch} * p.heads * launch.groups_per_bh, [&](std::uint64_t first, std::uint32_t groups) {
    pc.first_group = static_cast<std::uint32_t>(first);
    detail::dispatch(r, &sets, launch.shader, launch.spec,
                     {{b.q}, {b.k}, {b.v}, {out}, {lse}, {shaw ? b.rel_values : bias}, {shaw ? b.rel_keys : s.dummy}, {lengths}, {paged ? b.block_table : s.dummy}}, pc,
                     groups);
  });
  if (S > 1) {
    detail::barrier(r);
    const std::uint32_t D4 = p.head_dim / 4;
    detail::record_attention_merge(r, {s.partial_out, s.partial_lse, S, D4, S * D4, 1, S, DType::F32}, rows, p.head_dim, *b.out, p.dtype,
                                   b.lse ? *b.lse : *s.lse, &sets);
  }
  s.storage->sets().end_step(r);
}

}  // namespace relpos

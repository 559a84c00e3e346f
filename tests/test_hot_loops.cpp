// Hot loops: a Recorder reused across steps creates nothing after its first step, and a fused
// attention plan records decode loops (keys growing, query offsets moving) bit for bit as
// attention() does, with no buffer, memory, descriptor pool or pipeline made after its first step.
#include <relpos/attention_plan.hpp>
#include <relpos/relpos.hpp>
#include <relpos/resource_counts.hpp>

#include <random>

#include "support/app_vulkan.hpp"
#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"
#include "testing_options.hpp"

using namespace relpos;
using relpos::test::AppVulkan;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::random_floats;

namespace {

class HotLoops : public GpuTest {};

// Every Vulkan object but pipelines (buffers, memory, pools, descriptor sets, events, command
// buffers), and pipelines: a hot loop's step after the first creates neither.
std::uint64_t objects(Context& ctx) {
  const ResourceCounts c = resource_counts(ctx);
  return c.objects() - c.pipelines;
}
std::uint64_t pipelines(Context& ctx) { return resource_counts(ctx).pipelines; }

std::string describe(const AttentionParams& p) {
  return std::string(attention_bias_info(p.bias).name) + " Q=" + std::to_string(p.queries) + " K=" + std::to_string(p.keys) +
         " off=" + std::to_string(p.query_offset) + " " + std::string(dtype_name(p.dtype));
}

// Host data of a decode loop: a KV cache [B, Hkv, max_keys, D] and per-step inputs.
struct Cache {
  AttentionParams env;
  std::vector<float> k, v;
  // The first `keys` keys of each (batch, kv head): what attention() takes.
  std::vector<float> prefix(const std::vector<float>& all, std::uint32_t keys) const {
    const std::size_t D = env.head_dim, slabs = std::size_t{env.batch} * env.kv_heads;
    std::vector<float> out;
    for (std::size_t s = 0; s < slabs; ++s)
      out.insert(out.end(), all.begin() + s * env.keys * D, all.begin() + (s * env.keys + keys) * D);
    return out;
  }
};

struct Result {
  std::vector<float> out, lse;
};

// The step through attention() (fresh buffers of the step's exact shape).
Result free_function(Context& ctx, const Cache& c, const AttentionParams& p, const std::vector<float>& q, const std::vector<float>& bias) {
  Buffer qb = make_float_buffer(ctx, q, p.dtype);
  Buffer kb = make_float_buffer(ctx, c.prefix(c.k, p.keys), p.dtype), vb = make_float_buffer(ctx, c.prefix(c.v, p.keys), p.dtype);
  Buffer out(ctx, p.rows() * p.head_dim * dtype_size(p.dtype)), lse(ctx, p.rows() * 4), bb;
  AttentionBuffers b{&qb, &kb, &vb, &out, &lse};
  if (!bias.empty()) b.bias = &(bb = make_buffer(ctx, bias));
  Recorder r(ctx);
  attention(r, p, b);
  r.submit_and_wait();
  return {download_floats(out, p.rows() * p.head_dim, p.dtype), lse.download<float>(p.rows())};
}

std::vector<float> step_bias(std::mt19937& rng, const AttentionParams& p) {
  if (p.bias == AttentionBias::None) return {};
  if (p.bias == AttentionBias::Alibi) return random_floats(rng, p.heads, 0.0f, 1.0f);
  if (p.bias == AttentionBias::Kerple) return random_floats(rng, 2 * p.heads, 0.05f, 1.0f);  // r1, r2
  return random_floats(rng, p.bias_elements(), -3.0f, 3.0f);
}

struct Step {
  std::uint32_t queries, keys;
  std::int64_t offset;
};

// Runs the steps through one plan and through attention(): equal results; nothing created by the
// plan's steps after the first.
void expect_plan_equals_free_function(const AttentionParams& env, const std::vector<Step>& steps, std::uint32_t seed,
                                      Context& ctx = gpu()) {
  std::mt19937 rng(seed);
  Cache c{env, {}, {}};
  const std::size_t cache_values = std::size_t{env.batch} * env.kv_heads * env.keys * env.head_dim;
  c.k = rounded_to_storage(random_floats(rng, cache_values), env.dtype);
  c.v = rounded_to_storage(random_floats(rng, cache_values), env.dtype);
  Buffer kb = make_float_buffer(ctx, c.k, env.dtype), vb = make_float_buffer(ctx, c.v, env.dtype);
  // A T5 table (the plan's bias input in T5 mode) stays for every step; the other biases change.
  const std::vector<float> table = random_floats(rng, std::size_t{env.t5.num_buckets} * env.heads, -3.0f, 3.0f);
  Buffer table_buffer = make_buffer(ctx, table);
  const std::size_t max_rows = std::size_t{env.batch} * env.heads * env.queries;
  Buffer out(ctx, max_rows * env.head_dim * dtype_size(env.dtype)), lse(ctx, max_rows * 4);

  AttentionPlan plan(ctx, env);
  Recorder r(ctx);
  std::uint64_t created = 0, compiled = 0;
  for (std::size_t n = 0; n < steps.size(); ++n) {
    const AttentionStep step{steps[n].queries, steps[n].keys, steps[n].offset};
    const AttentionParams p = plan.step_params(step);
    SCOPED_TRACE(describe(p));
    const std::vector<float> q = rounded_to_storage(random_floats(rng, p.rows() * p.head_dim), p.dtype);
    const std::vector<float> bias = p.bias == AttentionBias::T5 ? table : step_bias(rng, p);

    Buffer qb = make_float_buffer(ctx, q, p.dtype), bb;  // the step's inputs, made before counting
    if (p.bias != AttentionBias::None && p.bias != AttentionBias::T5) bb = make_buffer(ctx, bias);
    AttentionBuffers b{&qb, &kb, &vb, &out, &lse};
    if (p.bias == AttentionBias::T5) b.bias = &table_buffer;
    else if (bb) b.bias = &bb;
    const std::uint64_t a0 = objects(ctx), p0 = pipelines(ctx);
    plan.record(r, step, b);
    r.submit_and_wait();
    if (n > 0) {
      created += objects(ctx) - a0;
      compiled += pipelines(ctx) - p0;
    }
    const Result got{download_floats(out, p.rows() * p.head_dim, p.dtype), lse.download<float>(p.rows())};
    // After the plan's step, so that attention() compiles nothing the plan would need.
    const Result want = free_function(ctx, c, p, q, bias);
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.lse, want.lse);
  }
  EXPECT_EQ(created, 0u);
  EXPECT_EQ(compiled, 0u);
}

// Decoding: one query, the keys growing past several changes of the split count, the query at the
// last key.
std::vector<Step> decode_steps() {
  std::vector<Step> s;
  for (std::uint32_t k : {1u, 2u, 37u, 127u, 128u, 255u, 256u, 300u, 384u, 513u, 700u, 1000u, 1100u})
    s.push_back({1, k, std::int64_t{k} - 1});
  return s;
}

}  // namespace

TEST_F(HotLoops, ReusedRecorderCreatesNothingAfterItsFirstStep) {
  Context& ctx = gpu();
  const AttentionParams p{.heads = 4, .queries = 1, .keys = 700, .head_dim = 16, .query_offset = 699, .causal = true,
                          .bias = AttentionBias::T5};
  std::mt19937 rng(3);
  Buffer q = make_buffer(ctx, random_floats(rng, p.rows() * p.head_dim));
  Buffer k = make_buffer(ctx, random_floats(rng, std::size_t{p.keys} * p.head_dim));
  Buffer v = make_buffer(ctx, random_floats(rng, std::size_t{p.keys} * p.head_dim));
  Buffer table = make_buffer(ctx, random_floats(rng, std::size_t{p.t5.num_buckets} * p.heads));
  Buffer out(ctx, p.rows() * p.head_dim * 4);
  Recorder r(ctx);
  std::vector<float> first;
  ResourceCounts after_first{};
  for (int step = 0; step < 200; ++step) {
    attention(r, p, {&q, &k, &v, &out, nullptr, &table});
    r.submit_and_wait();
    if (step == 0) {
      after_first = resource_counts(ctx);
      first = out.download<float>(p.rows() * p.head_dim);
    }
  }
  const ResourceCounts now = resource_counts(ctx);
  EXPECT_EQ(now.buffers, after_first.buffers);
  EXPECT_EQ(now.memory_allocations, after_first.memory_allocations);
  EXPECT_EQ(now.descriptor_pools, after_first.descriptor_pools);
  EXPECT_EQ(now.descriptor_sets, after_first.descriptor_sets);
  EXPECT_EQ(now.events, after_first.events);
  EXPECT_EQ(now.command_buffers, after_first.command_buffers);
  EXPECT_EQ(now.pipelines, after_first.pipelines);
  EXPECT_EQ(out.download<float>(p.rows() * p.head_dim), first);  // recycled scratch: the same result
}

// A new Recorder of relpos's own a step (an engine's simplest loop): a destroyed Recorder leaves
// its command buffer, pool and fence and what its recording used to the next one, whether it was
// waited for, submitted and left to its destructor's wait, or never submitted; with pushed
// descriptors and with descriptor sets. Objects are counted around each Recorder's life only (a
// discrete GPU's uploads and downloads make staging buffers); the output is cleared before each
// step, so a step that did nothing shows.
TEST_F(HotLoops, ARecorderAStepCreatesNothingAfterTheFirst) {
  detail::TestingOptions with_sets;
  with_sets.descriptor_sets = true;
  Context sets_ctx = detail::testing_context(relpos::test::validated_context_options(), with_sets);
  for (Context* ctx : {&gpu(), &sets_ctx}) {
    SCOPED_TRACE(ctx == &sets_ctx ? "descriptor sets" : "the device's descriptors");
    const AttentionParams p{.heads = 4, .queries = 1, .keys = 700, .head_dim = 16, .query_offset = 699, .causal = true,
                            .bias = AttentionBias::T5};
    std::mt19937 rng(4);
    Buffer q = make_buffer(*ctx, random_floats(rng, p.rows() * p.head_dim));
    Buffer k = make_buffer(*ctx, random_floats(rng, std::size_t{p.keys} * p.head_dim));
    Buffer v = make_buffer(*ctx, random_floats(rng, std::size_t{p.keys} * p.head_dim));
    Buffer table = make_buffer(*ctx, random_floats(rng, std::size_t{p.t5.num_buckets} * p.heads));
    const std::vector<float> cleared(p.rows() * p.head_dim, -7.0f);
    Buffer out = make_buffer(*ctx, cleared);
    std::vector<float> first;
    for (int step = 0; step < 60; ++step) {
      out.upload(std::span<const float>(cleared));
      const ResourceCounts before = resource_counts(*ctx);
      {
        Recorder r(*ctx);
        attention(r, p, {&q, &k, &v, &out, nullptr, &table});
        if (step % 3 == 0) r.submit_and_wait();
        else if (step % 3 == 1) r.submit();  // the destructor waits
      }  // step % 3 == 2: abandoned, never submitted
      if (step > 0) ASSERT_EQ(resource_counts(*ctx).objects(), before.objects()) << "step " << step << " created Vulkan objects";
      const std::vector<float> got = out.download<float>(p.rows() * p.head_dim);
      if (step == 0) first = got;
      else if (step % 3 != 2) ASSERT_EQ(got, first) << "step " << step;
      else ASSERT_EQ(got, cleared) << "step " << step << ", never submitted";
    }
  }
}

// Ops whose shapes stay while their offsets move (RoPE on the new token, ALiBi added to its logits)
// reuse what the recorder kept: nothing created after the first step, and the results equal a
// fresh recorder's.
TEST_F(HotLoops, ReusedRecorderWithMovingOffsets) {
  Context& ctx = gpu();
  RopeParams rp;
  rp.heads = 4;
  rp.head_dim = 32;
  AlibiParams ap;
  ap.heads = 4;
  ap.keys = 64;
  std::mt19937 rng(6);
  const std::vector<float> xh = random_floats(rng, rp.elements());
  Buffer x(ctx, rp.elements() * 4), logits(ctx, 4 * 64 * 4);
  Recorder r(ctx);
  ResourceCounts after_first{};
  for (int step = 0; step < 50; ++step) {
    rp.position_offset = step;
    ap.query_offset = 13 + step;
    x.upload(std::span<const float>(xh));
    logits.upload(std::span<const float>(std::vector<float>(4 * 64, 0.0f)));
    rope(r, rp, x);
    alibi_bias_add(r, ap, logits);
    r.submit_and_wait();
    if (step == 0) after_first = resource_counts(ctx);
    std::vector<float> want_x = xh, want_logits(4 * 64, 0.0f);
    rope_reference(rp, want_x);
    alibi_bias_add_reference(ap, want_logits);
    const std::vector<float> got_x = x.download<float>(rp.elements()), got_logits = logits.download<float>(4 * 64);
    if (step % 10 == 0) {  // spot checks: the first and later steps
      EXPECT_LE(normalised_error(got_x, want_x), 1e-6) << step;
      EXPECT_EQ(got_logits, want_logits) << step;
    }
  }
  EXPECT_EQ(resource_counts(ctx).allocations(), after_first.allocations());
  EXPECT_EQ(resource_counts(ctx).pipelines, after_first.pipelines);
}

// Every family of the registry that takes a bias input (Shaw's tables are tested in test_shaw_gpu).
TEST_F(HotLoops, DecodePlanEqualsAttentionForEveryBias) {
  for (const AttentionBiasInfo& family : attention_biases()) {
    if (family.rel_tables) continue;
    SCOPED_TRACE(std::string(family.name));
    AttentionParams env{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 1, .keys = 1100, .head_dim = 8, .causal = true, .bias = family.bias};
    env.kerple_variant = KerpleVariant::Power;
    env.sandwich_dim = 64;
    env.t5.bidirectional = false;
    env.t5.num_buckets = 32;
    env.t5.max_distance = 128;
    expect_plan_equals_free_function(env, decode_steps(), 11);
  }
}

// The same through descriptor sets (a device without push descriptors): the plan's step slots keep
// their sets, and the keys crossing split counts create nothing after the first step.
TEST_F(HotLoops, DecodePlanThroughDescriptorSets) {
  ContextOptions o = relpos::test::validated_context_options();
  detail::TestingOptions t;
  t.descriptor_sets = true;
  Context ctx = detail::testing_context(o, t);
  AttentionParams env{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 1, .keys = 1100, .head_dim = 8, .causal = true, .bias = AttentionBias::T5};
  env.t5.bidirectional = false;
  expect_plan_equals_free_function(env, decode_steps(), 12, ctx);
  EXPECT_GT(resource_counts(ctx).descriptor_sets, 0u);  // (the path under test)
}

// The GPU kernel class (attention_tiled) in a plan: decoding and several queries, bit-exact with
// attention() in the same class, nothing created after the first step.
TEST_F(HotLoops, PlansInTheGpuKernelClass) {
  Context& ctx = relpos::test::gpu_kernels(Kernels::Gpu);
  for (AttentionBias bias : {AttentionBias::T5, AttentionBias::Alibi, AttentionBias::Dense}) {
    AttentionParams env{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 1, .keys = 1100, .head_dim = 8, .causal = true, .bias = bias};
    env.t5.bidirectional = false;
    env.t5.num_buckets = 32;
    env.t5.max_distance = 128;
    expect_plan_equals_free_function(env, decode_steps(), 12, ctx);
  }
  AttentionParams env{.heads = 3, .queries = 6, .keys = 600, .head_dim = 20, .dtype = DType::F16, .scale = 1.0f, .memory_prefix = 5,
                      .bias = AttentionBias::Kerple};
  expect_plan_equals_free_function(env, {{6, 6, 0}, {1, 7, 6}, {4, 11, 7}, {1, 300, -40}, {6, 600, 594}, {3, 9, -5}}, 13, ctx);
}

TEST_F(HotLoops, PlanWithSeveralQueriesAndMovingOffsets) {
  for (DType dtype : {DType::F32, DType::F16})
    for (AttentionBias bias : {AttentionBias::None, AttentionBias::T5, AttentionBias::Kerple}) {
      AttentionParams env{.heads = 3, .queries = 6, .keys = 600, .head_dim = 20, .dtype = dtype, .scale = 1.0f, .memory_prefix = 5,
                          .bias = bias};
      env.t5.num_buckets = 16;
      env.t5.max_distance = 64;
      expect_plan_equals_free_function(
          env, {{6, 6, 0}, {1, 7, 6}, {4, 11, 7}, {1, 300, -40}, {6, 600, 594}, {2, 130, 1000}, {1, 600, 599}, {3, 9, -5}}, 5);
    }
}

TEST_F(HotLoops, PlanRecordsSeveralPendingStepsIntoOneCommandBuffer) {
  Context& ctx = gpu();
  AttentionParams env{.heads = 2, .queries = 1, .keys = 400, .head_dim = 8, .causal = true, .bias = AttentionBias::T5};
  env.t5.bidirectional = false;
  std::mt19937 rng(9);
  const std::size_t cache = std::size_t{env.keys} * env.head_dim;
  const std::vector<float> kh = random_floats(rng, cache), vh = random_floats(rng, cache);
  const std::vector<float> table = random_floats(rng, std::size_t{env.t5.num_buckets} * env.heads);
  Buffer k = make_buffer(ctx, kh), v = make_buffer(ctx, vh), t = make_buffer(ctx, table);
  const std::vector<float> qh = random_floats(rng, env.heads * env.head_dim);
  Buffer q = make_buffer(ctx, qh);
  const std::uint32_t keys[] = {100, 260, 400};
  std::vector<Buffer> outs;
  for (int n = 0; n < 3; ++n) outs.emplace_back(ctx, env.heads * env.head_dim * 4);
  AttentionPlan plan(ctx, env);
  Recorder r(ctx);
  for (int n = 0; n < 3; ++n) plan.record(r, {1, keys[n], keys[n] - 1}, {&q, &k, &v, &outs[n], nullptr, &t});
  r.submit_and_wait();
  for (int n = 0; n < 3; ++n) {
    const AttentionParams p = plan.step_params({1, keys[n], keys[n] - 1});
    SCOPED_TRACE(describe(p));
    const Result want = free_function(ctx, Cache{env, kh, vh}, p, qh, table);
    EXPECT_EQ(outs[n].download<float>(env.heads * env.head_dim), want.out);
  }
}

TEST_F(HotLoops, PlanRefusesStepsOutsideItsEnvelope) {
  Context& ctx = gpu();
  AttentionParams env{.heads = 2, .queries = 4, .keys = 256, .head_dim = 8, .bias = AttentionBias::T5};
  AttentionPlan plan(ctx, env);
  Buffer q(ctx, 2 * 4 * 8 * 4), kv(ctx, 2 * 256 * 8 * 4), small_kv(ctx, 2 * 100 * 8 * 4), out(ctx, 2 * 4 * 8 * 4);
  Buffer table(ctx, std::size_t{env.t5.num_buckets} * 2 * 4);
  Recorder r(ctx);
  auto message = [&](const AttentionStep& s, const Buffer& k) -> std::string {
    try {
      plan.record(r, s, {&q, &k, &k, &out, nullptr, &table});
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  const std::string keys = message({1, 257, 0}, kv);
  EXPECT_NE(keys.find("keys"), std::string::npos) << keys;
  EXPECT_NE(keys.find("257"), std::string::npos) << keys;
  EXPECT_NE(keys.find("envelope: keys = 256"), std::string::npos) << keys;
  const std::string queries = message({5, 100, 0}, kv);
  EXPECT_NE(queries.find("queries"), std::string::npos) << queries;
  EXPECT_NE(queries.find("envelope: queries = 4"), std::string::npos) << queries;
  const std::string cache = message({1, 100, 0}, small_kv);
  EXPECT_NE(cache.find("k buffer"), std::string::npos) << cache;
  EXPECT_NE(cache.find("envelope keys = 256"), std::string::npos) << cache;
  EXPECT_EQ(r.dispatch_count(), 0u);  // nothing recorded before the checks passed
  EXPECT_THROW(AttentionPlan(ctx, AttentionParams{.queries = 1, .keys = 0, .head_dim = 8}), InvalidArgument);
}

// In an application's command buffers: a step whose command buffer has run frees its slot for the
// next (no new object), and a plan destroyed before its last command buffer runs hands its sets
// and scratch to the Context, which frees them once that step's event is set.
TEST(HotLoopsAdopted, PlanSlotsFollowTheApplicationsCommandBuffers) {
  AppVulkan app;
  Context ctx(app.adopted());
  AttentionParams env{.heads = 2, .queries = 1, .keys = 300, .head_dim = 8, .causal = true, .bias = AttentionBias::T5};
  env.t5.bidirectional = false;
  std::mt19937 rng(4);
  const std::vector<float> kh = random_floats(rng, std::size_t{env.keys} * env.head_dim), vh = random_floats(rng, kh.size());
  const std::vector<float> qh = random_floats(rng, env.heads * env.head_dim);
  const std::vector<float> table = random_floats(rng, std::size_t{env.t5.num_buckets} * env.heads);
  Buffer q = make_buffer(ctx, qh), k = make_buffer(ctx, kh), v = make_buffer(ctx, vh), t = make_buffer(ctx, table);
  Buffer out1(ctx, env.heads * env.head_dim * 4), out2(ctx, env.heads * env.head_dim * 4);
  auto plan = std::make_unique<AttentionPlan>(ctx, env);
  const AttentionStep s1{1, 100, 99}, s2{1, 300, 299};

  VkCommandBuffer cb1 = app.begin_command_buffer();
  {
    Recorder rec(ctx, cb1);
    plan->record(rec, s1, {&q, &k, &v, &out1, nullptr, &t});
    rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  }
  app.submit_and_wait(cb1);
  const std::uint64_t a0 = resource_counts(ctx).allocations(), p0 = resource_counts(ctx).pipelines;
  VkCommandBuffer cb2 = app.begin_command_buffer();
  {
    Recorder rec(ctx, cb2);
    plan->record(rec, s2, {&q, &k, &v, &out2, nullptr, &t});
    rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  }
  EXPECT_EQ(resource_counts(ctx).allocations(), a0);
  EXPECT_EQ(resource_counts(ctx).pipelines, p0);
  plan.reset();  // before cb2 runs
  app.submit_and_wait(cb2);
  Cache c{env, kh, vh};
  for (const auto& [step, out] : {std::pair{s1, &out1}, std::pair{s2, &out2}}) {
    AttentionParams p = env;
    p.keys = step.keys;
    p.query_offset = step.query_offset;
    EXPECT_EQ(out->download<float>(env.heads * env.head_dim), free_function(ctx, c, p, qh, table).out);
  }
  ctx.wait_idle();  // frees what the plan left, its last command buffer having run
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

namespace {

// Runs the steps through a bias plan and through `free_op` (the free function for the step's
// params) on the same inputs: equal bit for bit, and nothing created after the plan's first step.
template <class FreeOp>
void expect_bias_plan_equals_free_function(BiasPlan& plan, std::uint32_t heads, std::uint32_t batch, DType dtype, bool add,
                                           const std::vector<BiasStep>& steps, FreeOp&& free_op) {
  Context& ctx = gpu();
  std::mt19937 rng(17);
  const std::uint32_t max_q = 8, max_k = 700;
  const std::size_t n = std::size_t{add ? batch : 1u} * heads * max_q * max_k;
  const std::vector<float> logits = add ? random_floats(rng, n, -4.0f, 4.0f) : std::vector<float>(n, 0.0f);
  Buffer by_plan = make_float_buffer(ctx, logits, dtype), by_free = make_float_buffer(ctx, logits, dtype);
  const std::vector<std::uint8_t> initial = by_plan.download<std::uint8_t>(n * dtype_size(dtype));
  Recorder r(ctx);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const BiasStep& st = steps[i];
    SCOPED_TRACE("step " + std::to_string(i) + " Q=" + std::to_string(st.queries) + " K=" + std::to_string(st.keys) +
                 " off=" + std::to_string(st.query_offset));
    by_plan.upload(initial.data(), initial.size());
    by_free.upload(initial.data(), initial.size());
    const ResourceCounts before = resource_counts(ctx);
    plan.record(r, st, by_plan);
    r.submit_and_wait();
    if (i > 0) {  // the first step may fill the recorder's own pools
      EXPECT_EQ(resource_counts(ctx).allocations(), before.allocations());
      EXPECT_EQ(resource_counts(ctx).pipelines, before.pipelines);
    }
    Recorder fr(ctx);
    free_op(fr, st, by_free);
    fr.submit_and_wait();
    const std::size_t used = std::size_t{add ? batch : 1u} * heads * st.queries * st.keys;
    ASSERT_EQ(download_floats(by_plan, used, dtype), download_floats(by_free, used, dtype));
  }
}

std::vector<BiasStep> bias_steps() {
  std::vector<BiasStep> steps;
  for (std::uint32_t k = 1; k <= 700; k += 97) steps.push_back({1, k, static_cast<std::int64_t>(k) - 1});  // decoding
  steps.push_back({8, 700, 692});   // the envelope
  steps.push_back({5, 64, -3});     // prefill-like, keys a multiple of the vector width
  steps.push_back({3, 333, 100000});
  return steps;
}

}  // namespace

TEST_F(HotLoops, BiasPlansEqualTheFreeFunctions) {
  Context& ctx = gpu();
  std::mt19937 rng(21);
  for (DType dtype : {DType::F32, DType::F16})
    for (bool add : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (add ? " add" : " write"));
      AlibiParams a;
      a.heads = 3;
      a.queries = 8;
      a.keys = 700;
      a.batch = 2;
      a.causal = true;
      BiasPlan alibi_plan(ctx, a, dtype, add);
      expect_bias_plan_equals_free_function(alibi_plan, a.heads, a.batch, dtype, add, bias_steps(),
                                            [&](Recorder& r, const BiasStep& st, const Buffer& out) {
                                              AlibiParams p = a;
                                              p.queries = st.queries, p.keys = st.keys, p.query_offset = st.query_offset;
                                              add ? alibi_bias_add(r, p, out, dtype) : alibi_bias(r, p, out, dtype);
                                            });
      KerpleParams k;
      k.heads = 3;
      k.queries = 8;
      k.keys = 700;
      k.batch = 2;
      k.variant = KerpleVariant::Log;
      k.r1 = {0.5f, 1.0f, 2.0f};
      k.r2 = {0.1f, 1.0f, 3.0f};
      BiasPlan kerple_plan(ctx, k, dtype, add);
      expect_bias_plan_equals_free_function(kerple_plan, k.heads, k.batch, dtype, add, bias_steps(),
                                            [&](Recorder& r, const BiasStep& st, const Buffer& out) {
                                              KerpleParams p = k;
                                              p.queries = st.queries, p.keys = st.keys, p.query_offset = st.query_offset;
                                              add ? kerple_bias_add(r, p, out, dtype) : kerple_bias(r, p, out, dtype);
                                            });
      T5Params t;
      t.heads = 3;
      t.queries = 8;
      t.keys = 700;
      t.batch = 2;
      t.bidirectional = false;
      Buffer table = make_buffer(ctx, random_floats(rng, std::size_t{t.num_buckets} * t.heads));
      BiasPlan t5_plan(ctx, t, table, dtype, add);
      expect_bias_plan_equals_free_function(t5_plan, t.heads, t.batch, dtype, add, bias_steps(),
                                            [&](Recorder& r, const BiasStep& st, const Buffer& out) {
                                              T5Params p = t;
                                              p.queries = st.queries, p.keys = st.keys, p.query_offset = st.query_offset;
                                              add ? t5_bias_add(r, p, table, out, dtype) : t5_bias(r, p, table, out, dtype);
                                            });
    }
}

TEST_F(HotLoops, BiasPlanRefusesStepsOutsideItsEnvelope) {
  Context& ctx = gpu();
  AlibiParams a;
  a.heads = 2;
  a.queries = 4;
  a.keys = 100;
  BiasPlan plan(ctx, a, DType::F32, false);
  Buffer out(ctx, 2 * 4 * 100 * 4);
  Recorder r(ctx);
  relpos::test::expect_invalid([&] { plan.record(r, {5, 10, 0}, out); }, "queries");
  relpos::test::expect_invalid([&] { plan.record(r, {1, 101, 0}, out); }, "keys");
  relpos::test::expect_invalid([&] { plan.record(r, {1, 10, std::int64_t{1} << 31}, out); }, "query_offset");
  Buffer small(ctx, 16);
  relpos::test::expect_invalid([&] { plan.record(r, {4, 100, 0}, small); }, "output buffer");
  EXPECT_EQ(r.dispatch_count(), 0u);
}

// Steps of one RopePlan recorded together, submitted once: each step's table (dynamic NTK's,
// changing with the positions) is written in the command buffer after the step before has read
// its own. Recorded before the op's barrier, the write raced the earlier step's reads on a GPU
// (the validation layer's synchronization checks reported the hazard); each step's rotation is the
// free function's.
TEST_F(HotLoops, RopePlanStepsShareOneRecording) {
  Context& ctx = gpu();
  std::mt19937 rng(37);
  RopeParams env;
  env.seq = 8;
  env.heads = 2;
  env.head_dim = 16;
  env.scaling = {.type = RopeScaling::DynamicNtk, .factor = 2.0, .original_max_position = 64};
  RopePlan plan(ctx, env, DType::F32, true, false);
  const std::vector<RopeStep> steps = {{8, 0}, {1, 500}, {3, 4000}};
  std::vector<Buffer> planned, direct;
  Recorder r(ctx), fr(ctx);
  for (const RopeStep& st : steps) {
    RopeParams p = env;
    p.seq = st.seq;
    p.position_offset = st.position_offset;
    const std::vector<float> x = random_floats(rng, p.elements(), -2.0f, 2.0f);
    planned.push_back(make_buffer(ctx, x));
    direct.push_back(make_buffer(ctx, x));
    plan.record(r, st, planned.back());
    rope(fr, p, direct.back());
  }
  r.submit_and_wait();
  fr.submit_and_wait();
  for (std::size_t k = 0; k < steps.size(); ++k)
    EXPECT_EQ(planned[k].download<float>(planned[k].size() / 4), direct[k].download<float>(direct[k].size() / 4)) << "step " << k;
}

// RoPE through a plan: the same bits as rope()/rope_into() for every step (seq and offsets moving,
// dynamic NTK's table changing with the positions), nothing created after the first step.
TEST_F(HotLoops, RopePlanEqualsTheFreeFunctions) {
  Context& ctx = gpu();
  std::mt19937 rng(31);
  for (bool in_place : {true, false})
    for (bool with_positions : {false, true})
      for (DType dtype : {DType::F32, DType::F16}) {
        SCOPED_TRACE(std::string(in_place ? "in place" : "into") + (with_positions ? " positions" : " offset") + " " +
                     std::string(dtype_name(dtype)));
        RopeParams env;
        env.batch = 2;
        env.seq = 9;
        env.heads = 3;
        env.head_dim = 24;
        env.rotary_dim = 16;
        env.layout = RopeLayout::BHSD;
        if (!with_positions) {  // dynamic NTK: the table depends on position_offset + seq
          env.scaling.type = RopeScaling::DynamicNtk;
          env.scaling.factor = 2.0;
          env.scaling.original_max_position = 64;
        }
        RopePlan plan(ctx, env, dtype, in_place, with_positions);
        Recorder r(ctx);
        bool first = true;  // the first step may make the plan's descriptor pool
        for (const RopeStep st : {RopeStep{1, 0}, RopeStep{1, 63}, RopeStep{9, 100}, RopeStep{4, 5}, RopeStep{1, 2000}}) {
          RopeParams p = env;
          p.seq = st.seq;
          p.position_offset = st.position_offset;
          const std::vector<float> x = random_floats(rng, p.elements(), -2.0f, 2.0f);
          std::vector<std::int32_t> pos(std::size_t{p.batch} * p.seq);
          for (auto& v : pos) v = std::uniform_int_distribution<std::int32_t>(-100000, 100000)(rng);
          Buffer positions = make_buffer(ctx, pos);
          Buffer a = make_float_buffer(ctx, x, dtype), b = make_float_buffer(ctx, x, dtype);
          Buffer a_out(ctx, p.elements() * dtype_size(dtype)), b_out(ctx, p.elements() * dtype_size(dtype));
          const ResourceCounts before = resource_counts(ctx);
          plan.record(r, st, a, in_place ? nullptr : &a_out, with_positions ? &positions : nullptr);
          r.submit_and_wait();
          if (!first) EXPECT_EQ(resource_counts(ctx).allocations(), before.allocations());
          EXPECT_EQ(resource_counts(ctx).pipelines, before.pipelines);  // compiled when the plan was built
          first = false;
          Recorder fr(ctx);
          if (in_place) rope(fr, p, b, dtype, with_positions ? &positions : nullptr);
          else rope_into(fr, p, b, b_out, dtype, with_positions ? &positions : nullptr);
          fr.submit_and_wait();
          EXPECT_EQ(download_floats(in_place ? a : a_out, p.elements(), dtype), download_floats(in_place ? b : b_out, p.elements(), dtype));
        }
        Buffer x(ctx, env.elements() * 4);
        relpos::test::expect_invalid([&] { plan.record(r, {10, 0}, x, in_place ? nullptr : &x); }, "seq");
      }
}

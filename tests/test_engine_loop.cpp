// An engine's decode loop as issue 26 tried it, in the pattern docs/paged_attention.md ("The
// engine's decode loop") describes: an application that owns its Vulkan device (adopt API), one
// VkBuffer holding two layers' K and V caches as views at offsets, paged with blocks of 16; three
// sequences of 37, 100 and 5 prompt tokens, 8 query and 2 kv heads, head_dim 128. Prefill: one
// ragged kv_append per layer (RoPE NeoX with Llama 3 scaling, the queries rotated in place) and
// paged attention with the T5 decoder bias. Then 64 decode steps, each recorded into a command
// buffer of the application's by a new Recorder, with a KvAppendPlan per layer (the first advances
// the one length buffer, the second reads it as including the step's key) and one AttentionPlan.
// Every step's outputs against the CPU reference; after the first step nothing is created (no
// Vulkan object, no allocation); 50 recordings abandoned unsubmitted and handed back with
// release_recordings leave nothing behind either; the validation layer says nothing.
#include <relpos/attention_plan.hpp>
#include <relpos/relpos.hpp>
#include <relpos/resource_counts.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <chrono>
#include <random>
#include <thread>

#include "support/app_vulkan.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"
#include "support/tolerance.hpp"

using namespace relpos;
using relpos::test::kAppBufferUsage;
using relpos::test::random_floats;

namespace {

constexpr std::uint32_t B = 3, H = 8, Hkv = 2, D = 128, kBlock = 16, kSteps = 64, kLayers = 2;
const std::vector<std::int32_t> kPrompts = {37, 100, 5};

std::string counts(const ResourceCounts& c) {
  return "buffers " + std::to_string(c.buffers) + ", memory " + std::to_string(c.memory_allocations) + ", pools " +
         std::to_string(c.descriptor_pools) + ", sets " + std::to_string(c.descriptor_sets) + ", events " + std::to_string(c.events) +
         ", command buffers " + std::to_string(c.command_buffers) + ", query pools " + std::to_string(c.query_pools) + ", pipelines " +
         std::to_string(c.pipelines);
}

TEST(EngineLoop, DecodeStepsInTheApplicationsCommandBuffersCreateNothing) {
  relpos::test::AppVulkan app;
  Context ctx(app.adopted());
  std::mt19937 rng(26);

  // The cache: every sequence's blocks, in a shuffled order, for its prompt and 64 decoded tokens.
  const std::uint32_t max_blocks = (100 + kSteps + kBlock - 1) / kBlock;
  std::uint32_t used = 0;
  for (std::int32_t L : kPrompts) used += (static_cast<std::uint32_t>(L) + kSteps + kBlock - 1) / kBlock;
  const PagedKv paged{.block_size = kBlock, .num_blocks = used + 2, .max_blocks = max_blocks};
  std::vector<std::int32_t> order(paged.num_blocks), table(std::size_t{B} * max_blocks, -1);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::uint32_t b = 0, next = 0; b < B; ++b)
    for (std::uint32_t n = 0; n * kBlock < static_cast<std::uint32_t>(kPrompts[b]) + kSteps; ++n) table[b * max_blocks + n] = order[next++];

  // One application VkBuffer: layer l's K and V caches at aligned offsets.
  const std::size_t cache_values = paged.cache_elements(Hkv, D);
  const std::uint64_t cache_bytes = cache_values * 4;
  const std::uint64_t align = std::max<std::uint64_t>(ctx.limits().min_storage_buffer_offset_alignment, 16);
  const std::uint64_t stride = (cache_bytes + align - 1) / align * align;
  VkBuffer app_cache = app.make_buffer(stride * 2 * kLayers, kAppBufferUsage);
  std::vector<Buffer> kc, vc;
  std::vector<std::vector<float>> kc_ref, vc_ref, t5_tables;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    kc.push_back(Buffer::external(ctx, app_cache, cache_bytes, kAppBufferUsage, (2 * l) * stride));
    vc.push_back(Buffer::external(ctx, app_cache, cache_bytes, kAppBufferUsage, (2 * l + 1) * stride));
    kc_ref.push_back(std::vector<float>(cache_values, 0.0f));
    vc_ref.push_back(std::vector<float>(cache_values, 0.0f));
    kc[l].upload(std::span<const float>(kc_ref[l]));
    vc[l].upload(std::span<const float>(vc_ref[l]));
  }

  // The layers' appends: the first advances the lengths on the device, the second reads them as
  // already counting the step's keys. RoPE NeoX with Llama 3 scaling.
  KvAppendParams append{.batch = B, .heads = H, .kv_heads = Hkv, .new_tokens = 1, .head_dim = D, .paged = paged, .apply_rope = true};
  append.rope.style = RopeStyle::NeoX;
  append.rope.scaling = {.type = RopeScaling::Llama3, .factor = 8.0, .original_max_position = 64};
  std::array<KvAppendParams, kLayers> decode_append{append, append};
  decode_append[0].advance_lengths = true;
  decode_append[1].lengths_include_new = true;
  std::array<KvAppendParams, kLayers> prefill_append = decode_append;
  for (auto& p : prefill_append) {
    p.ragged = true;
    p.new_tokens = 100;  // the longest prompt
    p.packed_tokens = 37 + 100 + 5;
  }
  AttentionParams att{.batch = B, .heads = H, .kv_heads = Hkv, .queries = 1, .keys = max_blocks * kBlock, .head_dim = D, .scale = 1.0f,
                      .causal = true, .bias = AttentionBias::T5};
  att.t5.bidirectional = false;
  att.paged = paged;
  AttentionParams prefill_att = att;
  prefill_att.queries = 100;  // each sequence's queries are its last 100 positions (padding first)

  Buffer table_buf = make_buffer(ctx, table), lengths = make_buffer(ctx, std::vector<std::int32_t>(B, 0));
  Buffer new_tokens = make_buffer(ctx, kPrompts);
  std::vector<Buffer> t5;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    t5_tables.push_back(random_floats(rng, std::size_t{att.t5.num_buckets} * H, -1.0f, 1.0f));
    t5.push_back(make_buffer(ctx, t5_tables[l]));
  }

  // ---- prefill: the prompts' keys, values and queries at once (ragged), then attention --------
  std::vector<std::int32_t> host_lengths(B, 0);
  {
    const std::uint32_t packed = prefill_append[0].packed_tokens;
    std::vector<std::vector<float>> q_ref(kLayers);
    std::vector<Buffer> q, k, v, q_padded, out;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      q_ref[l] = random_floats(rng, std::size_t{packed} * H * D);
      const std::vector<float> kh = random_floats(rng, std::size_t{packed} * Hkv * D), vh = random_floats(rng, kh.size());
      q.push_back(make_buffer(ctx, q_ref[l]));
      k.push_back(make_buffer(ctx, kh));
      v.push_back(make_buffer(ctx, vh));
      std::vector<std::int32_t> after(B);
      // The second layer's lengths count the prompts already (the first advanced them).
      const std::vector<std::int32_t>& lens = l == 0 ? host_lengths : kPrompts;
      KvAppendHostData d{kc_ref[l], vc_ref[l], kh, vh, table, lens, q_ref[l]};
      d.new_tokens = kPrompts;
      if (l == 0) d.advanced_lengths = after;
      kv_append_reference(prefill_append[l], d);
      if (l == 0) EXPECT_EQ(after, kPrompts);
    }
    VkCommandBuffer cb = app.begin_command_buffer();
    {
      Recorder rec(ctx, cb);
      for (std::uint32_t l = 0; l < kLayers; ++l)
        kv_append(rec, prefill_append[l], {&kc[l], &vc[l], &k[l], &v[l], &table_buf, &lengths, &q[l], &new_tokens});
      rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    }
    app.submit_and_wait(cb);
    host_lengths = kPrompts;
    ASSERT_EQ(lengths.download<std::int32_t>(B), host_lengths);
    // The rotated packed queries into [B, H, 100, D], each sequence's at its last rows.
    auto padded = [&](const std::vector<float>& packed_q) {
      std::vector<float> out(std::size_t{B} * H * 100 * D, 0.0f);
      for (std::uint32_t b = 0, cu = 0; b < B; cu += static_cast<std::uint32_t>(kPrompts[b]), ++b)
        for (std::uint32_t t = 0; t < static_cast<std::uint32_t>(kPrompts[b]); ++t)
          for (std::uint32_t h = 0; h < H; ++h)
            std::copy_n(packed_q.begin() + (std::size_t{cu + t} * H + h) * D, D,
                        out.begin() + ((std::size_t{b} * H + h) * 100 + 100 - kPrompts[b] + t) * D);
      return out;
    };
    cb = app.begin_command_buffer();
    {
      Recorder rec(ctx, cb);
      for (std::uint32_t l = 0; l < kLayers; ++l) {
        q_padded.push_back(make_buffer(ctx, padded(q[l].download<float>(q_ref[l].size()))));
        out.emplace_back(ctx, std::uint64_t{B} * H * 100 * D * 4);
        AttentionBuffers ab{&q_padded[l], &kc[l], &vc[l], &out[l], nullptr, &t5[l]};
        ab.block_table = &table_buf;
        ab.cache_lengths = &lengths;
        attention(rec, prefill_att, ab);
      }
      rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    }
    app.submit_and_wait(cb);
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      EXPECT_LE(normalised_error(kc[l].download<float>(cache_values), kc_ref[l]), relpos::test::kRopeTolF32);
      EXPECT_EQ(vc[l].download<float>(cache_values), vc_ref[l]);
      const std::vector<float> qp = padded(q_ref[l]);
      const AttentionResult want = attention_reference(prefill_att, {qp, kc_ref[l], vc_ref[l], t5_tables[l], {}, {}, {}, table, host_lengths});
      EXPECT_LE(normalised_error(out[l].download<float>(want.out.size()), want.out), 1e-4) << "prefill, layer " << l;
    }
  }

  // ---- decode: plans, the application's command buffers, a new Recorder each ------------------
  std::array<std::unique_ptr<KvAppendPlan>, kLayers> append_plans;
  for (std::uint32_t l = 0; l < kLayers; ++l) append_plans[l] = std::make_unique<KvAppendPlan>(ctx, decode_append[l]);
  AttentionPlan attention_plan(ctx, att);
  // Step inputs live in host-visible buffers the application writes before each recording.
  std::vector<Buffer> q, k, v, out;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    q.emplace_back(ctx, std::uint64_t{B} * H * D * 4, MemoryUse::Host);
    k.emplace_back(ctx, std::uint64_t{B} * Hkv * D * 4, MemoryUse::Host);
    v.emplace_back(ctx, std::uint64_t{B} * Hkv * D * 4, MemoryUse::Host);
    out.emplace_back(ctx, std::uint64_t{B} * H * D * 4, MemoryUse::Host);
  }
  auto record_step = [&](VkCommandBuffer cb) {
    Recorder rec(ctx, cb);
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      append_plans[l]->record(rec, {&kc[l], &vc[l], &k[l], &v[l], &table_buf, &lengths, &q[l]});
      AttentionBuffers ab{&q[l], &kc[l], &vc[l], &out[l], nullptr, &t5[l]};
      ab.block_table = &table_buf;
      ab.cache_lengths = &lengths;
      attention_plan.record(rec, {.queries = 1}, ab);
    }
    rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  };
  // Counted around each step's recording and submission only: the test's own uploads of q, k and v
  // and downloads of its checks go through staging buffers on a discrete GPU (an engine's inputs
  // come from its own kernels).
  double worst = 0.0;
  auto run_step = [&](int step) {
    std::vector<std::vector<float>> qh(kLayers), kh(kLayers), vh(kLayers);
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      qh[l] = random_floats(rng, std::size_t{B} * H * D);
      kh[l] = random_floats(rng, std::size_t{B} * Hkv * D);
      vh[l] = random_floats(rng, std::size_t{B} * Hkv * D);
      q[l].upload(std::span<const float>(qh[l]));
      k[l].upload(std::span<const float>(kh[l]));
      v[l].upload(std::span<const float>(vh[l]));
    }
    const ResourceCounts before = resource_counts(ctx);
    VkCommandBuffer cb = app.begin_command_buffer();
    record_step(cb);
    app.submit_and_wait(cb);
    if (step > 0) ASSERT_EQ(counts(resource_counts(ctx)), counts(before)) << "step " << step << " created Vulkan objects";
    std::vector<std::int32_t> next = host_lengths;
    for (auto& L : next) ++L;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      std::vector<std::int32_t> advanced(B);
      KvAppendHostData d{kc_ref[l], vc_ref[l], kh[l], vh[l], table, l == 0 ? host_lengths : next, qh[l]};
      if (l == 0) d.advanced_lengths = advanced;
      kv_append_reference(decode_append[l], d);
      const AttentionResult want = attention_reference(att, {qh[l], kc_ref[l], vc_ref[l], t5_tables[l], {}, {}, {}, table, next});
      const double e = normalised_error(out[l].download<float>(want.out.size()), want.out);
      worst = std::max(worst, e);
      ASSERT_LE(e, 1e-4) << "step " << step << ", layer " << l;
    }
    host_lengths = next;
    ASSERT_EQ(lengths.download<std::int32_t>(B), host_lengths) << "step " << step;
  };
  for (int step = 0; step + 1 < static_cast<int>(kSteps); ++step) {
    run_step(step);
  }

  // 50 recordings the application abandons (a preempted batch): never submitted, handed back.
  const ResourceCounts before_abandoned = resource_counts(ctx);
  for (int i = 0; i < 50; ++i) {
    VkCommandBuffer cb = app.begin_command_buffer();
    record_step(cb);
    ctx.release_recordings(cb);
    ASSERT_EQ(counts(resource_counts(ctx)), counts(before_abandoned)) << "abandoned recording " << i;
  }
  run_step(static_cast<int>(kSteps) - 1);  // the 64th step: still right, still nothing created
  EXPECT_LE(normalised_error(kc[1].download<float>(cache_values), kc_ref[1]), relpos::test::kRopeTolF32);
  EXPECT_EQ(vc[1].download<float>(cache_values), vc_ref[1]);
  RecordProperty("worst_normalised_error", std::to_string(worst));
  ctx.wait_idle();
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

// An engine's steps in flight: each step recorded (a plan's, and attention() through the Recorder)
// into a command buffer of the application's while the one before is still executing (followed by
// the application's own long fills, so it stays pending), and waited for only two steps later. On
// a device with push descriptors relpos writes no descriptor set that a pending command buffer
// used (the validation layer checks: it reported VUID-vkUpdateDescriptorSets-None-03047 when steps
// rewrote their sets), every step's result is right, and nothing is created after the first two.
TEST(EngineLoop, StepsInFlightWithPushDescriptors) {
  relpos::test::AppVulkan app(VK_API_VERSION_1_1, true);
  if (!app.push_descriptors_enabled()) GTEST_SKIP() << "the device has no VK_KHR_push_descriptor";
  Context ctx(app.adopted());
  std::mt19937 rng(27);
  constexpr std::uint32_t Bf = 2, Hf = 4, Hkvf = 2, Df = 64, kSlots = 2, kStepsInFlight = 24;
  const PagedKv paged{.block_size = 16, .num_blocks = 8, .max_blocks = 4};
  AttentionParams att{.batch = Bf, .heads = Hf, .kv_heads = Hkvf, .queries = 1, .keys = 64, .head_dim = Df, .causal = true,
                      .bias = AttentionBias::Alibi};
  att.paged = paged;
  const std::vector<std::int32_t> table = {7, 1, 3, 5, 0, 2, 4, 6}, held = {61, 20};
  const std::vector<float> kh = random_floats(rng, paged.cache_elements(Hkvf, Df)), vh = random_floats(rng, kh.size());
  const std::vector<float> slopes = random_floats(rng, Hf, 0.05f, 0.5f);
  Buffer k = make_buffer(ctx, kh), v = make_buffer(ctx, vh), tb = make_buffer(ctx, table), lb = make_buffer(ctx, held), sb = make_buffer(ctx, slopes);
  std::vector<std::vector<float>> qh;
  std::vector<AttentionResult> want;
  std::vector<Buffer> q, out_plan, out_call;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    qh.push_back(random_floats(rng, att.rows() * Df));
    want.push_back(attention_reference(att, {qh[slot], kh, vh, slopes, {}, {}, {}, table, held}));
    q.push_back(make_buffer(ctx, qh[slot]));
    out_plan.emplace_back(ctx, att.rows() * Df * 4, MemoryUse::Host);
    out_call.emplace_back(ctx, att.rows() * Df * 4, MemoryUse::Host);
  }
  AttentionPlan plan(ctx, att);
  // The application's own work after each step: a fill of a large buffer of its own (one a slot:
  // the fills of steps in flight do not overlap).
  constexpr VkDeviceSize kFill = 96u << 20;
  const std::array<VkBuffer, kSlots> busy = {app.make_buffer(kFill, VK_BUFFER_USAGE_TRANSFER_DST_BIT),
                                             app.make_buffer(kFill, VK_BUFFER_USAGE_TRANSFER_DST_BIT)};
  const std::array<VkFence, kSlots> fences = {app.make_fence(), app.make_fence()};
  std::array<bool, kSlots> submitted{};
  auto finish = [&](std::uint32_t slot, int step) {
    if (!submitted[slot]) return;
    app.wait_and_reset(fences[slot]);
    submitted[slot] = false;
    EXPECT_LE(normalised_error(out_plan[slot].download<float>(att.rows() * Df), want[slot].out), 1e-4) << "plan, step " << step;
    EXPECT_LE(normalised_error(out_call[slot].download<float>(att.rows() * Df), want[slot].out), 1e-4) << "attention(), step " << step;
  };
  ResourceCounts after_first{};
  for (int step = 0; step < static_cast<int>(kStepsInFlight); ++step) {
    const std::uint32_t slot = static_cast<std::uint32_t>(step) % kSlots;
    finish(slot, step - static_cast<int>(kSlots));  // the step two before: the one just before is still in flight
    VkCommandBuffer cb = app.begin_command_buffer();
    {
      Recorder rec(ctx, cb);
      AttentionBuffers ab{&q[slot], &k, &v, &out_plan[slot], nullptr, &sb};
      ab.block_table = &tb;
      ab.cache_lengths = &lb;
      plan.record(rec, {.queries = 1}, ab);
      ab.out = &out_call[slot];
      attention(rec, att, ab);
      rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    }
    vkCmdFillBuffer(cb, busy[slot], 0, kFill, static_cast<std::uint32_t>(step));
    app.submit(cb, fences[slot]);
    submitted[slot] = true;
    if (step == static_cast<int>(kSlots) - 1) after_first = resource_counts(ctx);
    if (step >= static_cast<int>(kSlots)) ASSERT_EQ(counts(resource_counts(ctx)), counts(after_first)) << "step " << step;
  }
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) finish(slot, static_cast<int>(kStepsInFlight));
  EXPECT_EQ(resource_counts(ctx).descriptor_sets, 0u);
  ctx.wait_idle();
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

}  // namespace

// Speculative decoding: each step appends a draft of 1 + k tokens per sequence (0 for an idle
// one), verifies them with packed queries over the paged cache, then rolls the rejected ones back
// by lowering the sequence's length. Lengths may go down as well as up: rows past a length are
// never read (here they are overwritten with 1e30 before the next step, so a leak would show at
// once) and the next append writes over them. Both kernel classes; the device's caches against a
// host model (kv_append_reference and the same rollbacks), every step's attention against the
// reference on that model; nothing created after the first verify step.
TEST(EngineLoop, SpeculativeDraftsRolledBackByLoweringTheLength) {
  constexpr std::uint32_t Bs = 4, Hs = 4, Hkvs = 2, Ds = 64, kDraft = 5, kVerifySteps = 8;
  const std::vector<std::int32_t> prompts = {23, 1, 40, 0};
  for (const Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
    SCOPED_TRACE(kernels == Kernels::Cpu ? "cpu kernels" : "gpu kernels");
    Context& ctx = relpos::test::gpu_kernels(kernels);
    std::mt19937 rng(5);
    const std::uint32_t max_blocks = (40 + kVerifySteps * kDraft + kBlock - 1) / kBlock;
    const PagedKv paged{.block_size = kBlock, .num_blocks = Bs * max_blocks, .max_blocks = max_blocks};
    std::vector<std::int32_t> table(std::size_t{Bs} * max_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const std::size_t cache_values = paged.cache_elements(Hkvs, Ds);
    Buffer kc = make_buffer(ctx, std::vector<float>(cache_values, 0.0f)), vc = make_buffer(ctx, std::vector<float>(cache_values, 0.0f));
    Buffer table_buf = make_buffer(ctx, table), lengths = make_buffer(ctx, std::vector<std::int32_t>(Bs, 0));

    KvAppendParams append{.batch = Bs, .heads = Hs, .kv_heads = Hkvs, .new_tokens = 40, .head_dim = Ds, .paged = paged};
    append.ragged = true;
    append.packed_tokens = Bs * 40;
    append.advance_lengths = true;
    AttentionParams att{.batch = Bs, .heads = Hs, .kv_heads = Hkvs, .queries = 40, .keys = max_blocks * kBlock, .head_dim = Ds,
                        .scale = 0.125f, .causal = true, .bias = AttentionBias::Alibi};
    att.paged = paged;
    att.total_queries = Bs * 40;
    KvAppendPlan append_plan(ctx, append);
    AttentionPlan attention_plan(ctx, att);
    std::vector<float> slopes(Hs);
    for (std::uint32_t h = 0; h < Hs; ++h) slopes[h] = std::ldexp(1.0f, -static_cast<int>(h + 1));
    Buffer slopes_buf = make_buffer(ctx, slopes);
    Buffer q(ctx, std::uint64_t{Bs} * 40 * Hs * Ds * 4), k(ctx, std::uint64_t{Bs} * 40 * Hkvs * Ds * 4), v(ctx, k.size()),
        out(ctx, q.size()), counts_buf(ctx, Bs * 4);

    std::vector<std::int32_t> host_lengths(Bs, 0);
    std::vector<float> k_model(cache_values, 0.0f), v_model(cache_values, 0.0f);
    for (std::uint32_t step = 0; step <= kVerifySteps; ++step) {
      // Step 0 is the prefill; then drafts of 1 + k tokens, or none.
      std::vector<std::int32_t> n(Bs);
      for (std::uint32_t b = 0; b < Bs; ++b)
        n[b] = step == 0 ? prompts[b] : std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, kDraft)(rng);
      const std::int32_t total = std::accumulate(n.begin(), n.end(), 0);
      if (total == 0) continue;
      const std::vector<float> qh = random_floats(rng, std::size_t(total) * Hs * Ds), kh = random_floats(rng, std::size_t(total) * Hkvs * Ds),
                               vh = random_floats(rng, kh.size());
      q.upload(std::span<const float>(qh));
      k.upload(std::span<const float>(kh));
      v.upload(std::span<const float>(vh));
      counts_buf.upload(std::span<const std::int32_t>(n));
      const std::uint32_t longest = static_cast<std::uint32_t>(*std::max_element(n.begin(), n.end()));
      const ResourceCounts before = resource_counts(ctx);
      {
        Recorder rec(ctx);
        KvAppendBuffers ab{&kc, &vc, &k, &v, &table_buf, &lengths};
        ab.new_tokens = &counts_buf;
        append_plan.record(rec, ab);
        AttentionBuffers bb{&q, &kc, &vc, &out, nullptr, &slopes_buf};
        bb.block_table = &table_buf;
        bb.cache_lengths = &lengths;
        bb.query_lengths = &counts_buf;
        attention_plan.record(rec, {.queries = longest, .total_queries = static_cast<std::uint32_t>(total)}, bb);
        rec.submit_and_wait();
      }
      // Counted around the step alone (a discrete GPU's uploads and downloads make staging
      // buffers): the prefill and the first verify step make what a step needs, later ones nothing.
      if (step > 1) EXPECT_EQ(counts(resource_counts(ctx)), counts(before)) << "step " << step << " created Vulkan objects";
      // The host's model of the caches: the append's reference on it, the rollbacks below on both.
      {
        std::vector<float> k_rows = kh, v_rows = vh;  // the reference takes the envelope's packed rows
        k_rows.resize(std::size_t{append.packed_tokens} * Hkvs * Ds);
        v_rows.resize(k_rows.size());
        KvAppendHostData d{k_model, v_model, k_rows, v_rows, table, host_lengths, {}};
        d.new_tokens = n;
        std::vector<std::int32_t> advanced(Bs);
        d.advanced_lengths = advanced;
        kv_append_reference(append, d);
        host_lengths = advanced;
      }
      ASSERT_EQ(lengths.download<std::int32_t>(Bs), host_lengths) << "step " << step;
      ASSERT_EQ(kc.download<float>(cache_values), k_model) << "step " << step << ": the keys appended, nothing else changed";
      ASSERT_EQ(vc.download<float>(cache_values), v_model) << "step " << step;
      AttentionParams sp = att;
      sp.queries = longest;
      sp.total_queries = static_cast<std::uint32_t>(total);
      const AttentionResult want = attention_reference(sp, {qh, k_model, v_model, slopes, {}, {}, {}, table, host_lengths, n});
      ASSERT_LT(*std::max_element(want.out.begin(), want.out.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); }), 1e3f)
          << "no rolled-back row inside a length";
      ASSERT_LE(normalised_error(out.download<float>(want.out.size()), want.out), 1e-4) << "step " << step;
      if (step == 0) continue;
      // Verification accepts a prefix of each draft; the rest is rolled back, its rows poisoned.
      for (std::uint32_t b = 0; b < Bs; ++b) {
        const std::int32_t accepted = std::uniform_int_distribution<int>(0, n[b])(rng);
        for (std::int32_t pos = host_lengths[b] - n[b] + accepted; pos < host_lengths[b]; ++pos)
          for (std::uint32_t h = 0; h < Hkvs; ++h) {
            const std::size_t row = ((std::size_t(table[b * max_blocks + pos / kBlock]) * kBlock + pos % kBlock) * Hkvs + h) * Ds;
            std::fill_n(k_model.begin() + row, Ds, 1e30f);
            std::fill_n(v_model.begin() + row, Ds, 1e30f);
          }
        host_lengths[b] -= n[b] - accepted;
      }
      kc.upload(std::span<const float>(k_model));
      vc.upload(std::span<const float>(v_model));
      lengths.upload(std::span<const std::int32_t>(host_lengths));
    }
  }
}

// Without push descriptors, what a recording into the application's command buffer left becomes
// spare once its last event is set, while the application's own later commands in that command
// buffer may still run: a Recorder of relpos's own made then must not write those descriptor sets
// (the validation layer reported VUID-vkUpdateDescriptorSets-None-03047 when it took them). Own
// Recorders take only what own Recorders left.
TEST(EngineLoop, OwnRecordersLeaveThePendingApplicationsSetsAlone) {
  relpos::test::AppVulkan app;  // no push descriptors: descriptor sets
  Context ctx(app.adopted());
  std::mt19937 rng(28);
  const AttentionParams p{.heads = 2, .queries = 1, .keys = 300, .head_dim = 16, .query_offset = 299, .causal = true};
  const std::vector<float> qh = random_floats(rng, p.rows() * p.head_dim), kh = random_floats(rng, std::size_t{p.keys} * p.head_dim),
                           vh = random_floats(rng, kh.size());
  const AttentionResult want = attention_reference(p, {qh, kh, vh, {}, {}, {}, {}});
  Buffer q = make_buffer(ctx, qh), k = make_buffer(ctx, kh), v = make_buffer(ctx, vh);
  Buffer out_app(ctx, p.rows() * p.head_dim * 4, MemoryUse::Host), out_own(ctx, p.rows() * p.head_dim * 4, MemoryUse::Host);
  constexpr VkDeviceSize kFill = 64u << 20, kFills = 8;
  const VkBuffer busy = app.make_buffer(kFill * kFills, VK_BUFFER_USAGE_TRANSFER_DST_BIT);
  const VkFence fence = app.make_fence();
  for (int round = 0; round < 3; ++round) {
    VkCommandBuffer cb = app.begin_command_buffer();
    {
      Recorder rec(ctx, cb);
      attention(rec, p, {&q, &k, &v, &out_app});
      rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    }
    for (VkDeviceSize i = 0; i < kFills; ++i) vkCmdFillBuffer(cb, busy, i * kFill, kFill, 1u);  // the application's own work after relpos's
    app.submit(cb, fence);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // relpos's part done, the fills not
    {
      Recorder own(ctx);  // while the application's command buffer may still be pending
      attention(own, p, {&q, &k, &v, &out_own});
      own.submit_and_wait();
    }
    app.wait_and_reset(fence);
    EXPECT_LE(normalised_error(out_app.download<float>(want.out.size()), want.out), 1e-4) << round;
    EXPECT_LE(normalised_error(out_own.download<float>(want.out.size()), want.out), 1e-4) << round;
  }
  ctx.wait_idle();
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

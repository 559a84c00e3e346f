// `relpos bench --filter engine-decode`: the decode loop in the engine pattern of
// docs/paged_attention.md ("The engine's decode loop") -- each step recorded by a new Recorder
// into a command buffer the tool owns as an application would (its own pool, re-begun every step,
// submitted on the context's queue), with a KvAppendPlan that advances the one length buffer and
// an AttentionPlan. Its record: host µs per step (making the Recorder, recording both plans,
// ending it) and the Vulkan objects and allocations created after the first step.
#include <vulkan/vulkan.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>

#include "registry.hpp"
#include "relpos/attention_plan.hpp"
#include "relpos/relpos.hpp"
#include "relpos/resource_counts.hpp"

namespace relpos::tool {
namespace {

constexpr std::uint32_t kSteps = 64;

void vk_ok(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw Error(std::string(what) + " failed: " + std::to_string(r));
}

struct EngineLoop {
  Context& ctx;
  KvAppendParams append;
  AttentionParams att;
  std::vector<std::int32_t> prompts;
  Buffer k_cache, v_cache, table, lengths, q, k, v, out, t5;
  std::unique_ptr<KvAppendPlan> append_plan, append_fixed;  // advancing the lengths; not (the GPU columns)
  std::unique_ptr<AttentionPlan> attention_plan;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;

  EngineLoop(Context& c, const KvAppendParams& ap, const AttentionParams& a, const std::vector<std::int32_t>& lens)
      : ctx(c), append(ap), att(a), prompts(lens) {
    std::mt19937 rng(26);
    const std::uint32_t B = ap.batch, M = ap.paged.max_blocks;
    std::vector<std::int32_t> order(ap.paged.num_blocks), t(std::size_t{B} * M);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::copy_n(order.begin(), t.size(), t.begin());
    const std::uint64_t es = dtype_size(ap.dtype);
    k_cache = Buffer(ctx, ap.cache_bytes());
    v_cache = Buffer(ctx, ap.cache_bytes());
    table = make_buffer(ctx, t);
    lengths = make_buffer(ctx, prompts);
    q = Buffer(ctx, std::uint64_t{B} * ap.heads * ap.head_dim * es, MemoryUse::Host);
    k = Buffer(ctx, std::uint64_t{B} * ap.kv_heads * ap.head_dim * es, MemoryUse::Host);
    v = Buffer(ctx, std::uint64_t{B} * ap.kv_heads * ap.head_dim * es, MemoryUse::Host);
    out = Buffer(ctx, std::uint64_t{B} * ap.heads * ap.head_dim * es, MemoryUse::Host);
    t5 = make_buffer(ctx, std::vector<float>(std::size_t{a.t5.num_buckets} * a.heads, 0.0f));
    for (const Buffer* b : {&q, &k, &v}) std::fill_n(static_cast<std::uint8_t*>(b->host_pointer()), b->size(), std::uint8_t{0x3c});
    KvAppendParams fixed = ap;
    fixed.advance_lengths = false;
    append_plan = std::make_unique<KvAppendPlan>(ctx, ap);
    append_fixed = std::make_unique<KvAppendPlan>(ctx, fixed);
    attention_plan = std::make_unique<AttentionPlan>(ctx, att);
    VkCommandPoolCreateInfo pi{};
    pi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = ctx.queue_family();
    vk_ok(vkCreateCommandPool(ctx.vk_device(), &pi, nullptr, &pool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    vk_ok(vkAllocateCommandBuffers(ctx.vk_device(), &ai, &cb), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{};
    fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    vk_ok(vkCreateFence(ctx.vk_device(), &fi, nullptr, &fence), "vkCreateFence");
  }
  ~EngineLoop() {
    ctx.wait_idle();
    vkDestroyFence(ctx.vk_device(), fence, nullptr);
    vkDestroyCommandPool(ctx.vk_device(), pool, nullptr);
  }
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  AttentionBuffers attention_buffers() const {
    AttentionBuffers b{&q, &k_cache, &v_cache, &out, nullptr, &t5};
    b.block_table = &table;
    b.cache_lengths = &lengths;
    return b;
  }
  void record(Recorder& r, KvAppendPlan& plan) {
    plan.record(r, {&k_cache, &v_cache, &k, &v, &table, &lengths, &q});
    attention_plan->record(r, {.queries = 1}, attention_buffers());
  }

  // kSteps steps from the prompts' lengths: {mean and median host µs per step after the first,
  // objects and allocations created after the first step}.
  std::vector<std::pair<std::string, double>> run() {
    lengths.upload(std::span<const std::int32_t>(prompts));
    std::vector<double> host_us;
    ResourceCounts first{};
    for (std::uint32_t n = 0; n < kSteps; ++n) {
      VkCommandBufferBeginInfo bi{};
      bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
      bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
      vk_ok(vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
      const auto t0 = std::chrono::steady_clock::now();
      {
        Recorder r(ctx, cb);
        record(r, *append_plan);
        r.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
      }
      const auto t1 = std::chrono::steady_clock::now();
      vk_ok(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
      VkSubmitInfo si{};
      si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
      si.commandBufferCount = 1;
      si.pCommandBuffers = &cb;
      vk_ok(vkQueueSubmit(ctx.vk_queue(), 1, &si, fence), "vkQueueSubmit");  // the tool's context: no other user of its queue
      vk_ok(vkWaitForFences(ctx.vk_device(), 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
      vk_ok(vkResetFences(ctx.vk_device(), 1, &fence), "vkResetFences");
      if (n == 0) first = resource_counts(ctx);
      else host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    const ResourceCounts last = resource_counts(ctx);
    const double mean = std::accumulate(host_us.begin(), host_us.end(), 0.0) / static_cast<double>(host_us.size());
    std::sort(host_us.begin(), host_us.end());
    return {{"host_us_per_step", mean},
            {"host_us_per_step_median", host_us[host_us.size() / 2]},
            {"objects_after_first", static_cast<double>(last.objects() - first.objects())},
            {"allocations_after_first", static_cast<double>(last.allocations() - first.allocations())},
            {"steps", static_cast<double>(kSteps)}};
  }
};

}  // namespace

// 8 sequences of 1k to 8k prompt keys, 8 query and 2 kv heads, head_dim 128, f16, blocks of 16,
// T5 decoder bias, RoPE NeoX with Llama 3 scaling.
void register_engine_decode_bench(Registry& reg) {
  const std::vector<std::int32_t> prompts = {1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192};
  constexpr std::uint32_t kBlock = 16;
  const std::uint32_t max_blocks = (8192 + kSteps + kBlock - 1) / kBlock;
  KvAppendParams ap{.batch = 8, .heads = 8, .kv_heads = 2, .new_tokens = 1, .head_dim = 128, .dtype = DType::F16, .apply_rope = true};
  ap.paged = {.block_size = kBlock, .num_blocks = 8 * max_blocks, .max_blocks = max_blocks};
  ap.rope.scaling = {.type = RopeScaling::Llama3, .factor = 8.0, .original_max_position = 8192};
  ap.advance_lengths = true;
  AttentionParams att{.batch = 8, .heads = 8, .kv_heads = 2, .queries = 1, .keys = max_blocks * kBlock, .head_dim = 128, .dtype = DType::F16,
                      .causal = true, .bias = AttentionBias::T5};
  att.t5.bidirectional = false;
  att.paged = ap.paged;
  std::uint64_t keys = 0;
  for (std::int32_t L : prompts) keys += static_cast<std::uint64_t>(L) + 1;
  const std::uint64_t bytes = 2 * keys * att.kv_heads * att.head_dim * 2 + 2 * att.rows() * att.head_dim * 2;
  reg.benches.push_back({"engine-decode", "[8,8/2,1,1k-8k,128] t5 f16 kv_append+attention, app cb", bytes, Ceiling::Copy, false,
                         [ap, att, prompts](Context& ctx) {
                           auto loop = std::make_shared<EngineLoop>(ctx, ap, att, prompts);
                           BenchRun run;
                           // The GPU columns: one step (lengths fixed) in relpos's own command buffer.
                           run.record = [loop](Recorder& r) { loop->record(r, *loop->append_fixed); };
                           run.cpu = [] {};
                           run.loop = [loop] { return loop->run(); };
                           run.keep = loop;
                           return run;
                         }});
}

}  // namespace relpos::tool

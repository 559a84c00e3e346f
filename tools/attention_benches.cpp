// Fused attention's `relpos bench` cases: GFLOP/s of every bias mode beside no bias, the paged
// engine batch's decoding steps against the copy ceiling, and the decode loop through a plan.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <random>

#include <relpos/attention_plan.hpp>
#include <relpos/resource_counts.hpp>

#include "attention_data.hpp"

namespace relpos::tool {
namespace {

// attention() over d, beside the same over c (the baseline, named `baseline`) in one submission.
BenchRun attention_beside(std::shared_ptr<AttentionData> d, std::shared_ptr<AttentionData> c, const char* baseline) {
  BenchRun run;
  run.record = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
  run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
  run.baseline = baseline;
  run.record_baseline = [c](Recorder& r) { attention(r, c->p, c->buffers()); };
  run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<AttentionData>>>(d, c);
  return run;
}

// Multiply-adds of q·kᵀ and p·v: 4·B·H·Q·K·D floating-point operations.
double gflop(const AttentionParams& p) { return 4.0 * p.rows() * p.keys * p.head_dim / 1e9; }

// The engine's batch in the paged benches: 8 sequences of 1k to 16k keys (53,248 in all).
const std::vector<std::uint32_t> kEngineLengths = {1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384};
// The bytes a step over that batch moves: k and v rows of row_bytes for each key of each kv head,
// and float16 q and out.
std::uint64_t engine_step_bytes(const AttentionParams& p, std::uint64_t row_bytes) {
  std::uint64_t keys = 0;
  for (std::uint32_t n : kEngineLengths) keys += n;
  return 2 * keys * p.kv_heads * row_bytes + 2 * p.rows() * p.head_dim * 2;
}
// That batch's step: head_dim 128, f16, `queries` a sequence, a paged cache of `block`-key blocks
// with room for 16,384 keys a sequence.
AttentionParams engine_params(std::uint32_t queries, std::uint32_t block = 16, std::uint32_t heads = 8, std::uint32_t kv_heads = 2) {
  AttentionParams p{.batch = 8, .heads = heads, .kv_heads = kv_heads, .queries = queries, .keys = 16384, .head_dim = 128, .dtype = DType::F16};
  p.paged = {.block_size = block, .num_blocks = 0, .max_blocks = 16384 / block};
  return p;
}

void register_benches(Registry& reg) {
  auto add = [&](AttentionParams p, bool in_short) {
    const AttentionBiasTool& family = bias_tool(reg, p.bias);
    const std::uint64_t es = dtype_size(p.dtype);
    const std::uint64_t bytes = 2 * p.rows() * p.head_dim * es + 2ull * p.batch * p.kv_heads * p.keys * p.head_dim * es +
                                p.bias_elements() * 4;
    char shape[160];
    std::snprintf(shape, sizeof shape, "[%u,%u,%u,%u,%u] %s %s %.2fGF", p.batch, p.heads, p.queries, p.keys, p.head_dim,
                  bias_text(reg, p).c_str(), std::string(dtype_name(p.dtype)).c_str(), gflop(p));
    reg.benches.push_back({"attention", shape, bytes, Ceiling::Copy, in_short, [family, p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             d->upload(ctx);
                             BenchRun run;
                             run.record = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
                             run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
                             run.keep = d;
                             if (attention_unfused_takes(d->p.bias)) {
                               // The ratio, measured in one submission: the unfused pipeline.
                               auto logits = std::make_shared<Buffer>(ctx, attention_unfused_logits_bytes(d->p));
                               run.baseline = "unfused";
                               run.record_baseline = [d, logits](Recorder& r) { attention_unfused(r, d->p, d->buffers(), *logits); };
                               run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<Buffer>>>(d, logits);
                             }
                             return run;
                           }});
  };
  for (const AttentionBiasInfo& info : attention_biases()) {
    AttentionParams p{.heads = 8, .kv_heads = 8, .queries = 1024, .keys = 1024, .head_dim = 64, .bias = info.bias};
    bias_tool(reg, info.bias).example(p, 0);
    add(p, false);
    if (attention_unfused_takes(info.bias)) {  // the short run: a quarter of the keys and queries
      p.queries = p.keys = 256;
      add(p, true);
    }
  }
  // Paged decoding: 8 sequences of 1k to 16k keys in a cache of 16- or 256-key blocks, beside the
  // same keys held contiguously ([8, Hkv, 16384, D] with key lengths) in the same submission; 8
  // query heads over 2 kv heads, and 28 over 4 (Qwen2.5-7B's: groups of 7, in slabs of 4 and 3).
  struct Paged {
    std::uint32_t block, heads, kv_heads;
  };
  for (const Paged c : {Paged{16, 8, 2}, Paged{256, 8, 2}, Paged{16, 28, 4}}) {
    const std::uint32_t block = c.block;
    const AttentionParams p = engine_params(1, block, c.heads, c.kv_heads);
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    char shape[160];
    std::snprintf(shape, sizeof shape, "[8,%u/%u,1,1k-16k,128] block %u f16", c.heads, c.kv_heads, block);
    reg.benches.push_back({"attention-paged", shape, bytes, Ceiling::Copy, false, [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->upload(ctx);
                             AttentionParams cp = p;  // the contiguous baseline: the same keys per sequence
                             cp.paged = {};
                             cp.query_offset = cp.keys - 1;
                             auto c = std::make_shared<AttentionData>(random_data(family, cp, 2));
                             c->lengths = kEngineLengths;
                             c->upload(ctx);
                             return attention_beside(d, c, "contiguous");
                           }});
  }
  // Paged decoding over caches of 8-bit formats (and bf16) beside the same step over an f16 cache,
  // in one submission: the bytes a step reads are the cache's (q8_0 34/64 of f16's, fp8 half), and
  // on a memory-bound device the step's time follows them.
  for (CacheFormat f : {CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3}) {
    const AttentionParams p = engine_params(1);
    const std::uint64_t bytes = engine_step_bytes(p, cache_row_bytes(f, p.head_dim));
    const std::string shape = "[8,8/2,1,1k-16k,128] block 16 " + std::string(cache_format_name(f)) + " cache, f16 q";
    reg.benches.push_back({"attention-paged", shape, bytes, Ceiling::Copy, false, [family = bias_tool(reg, p.bias), p, f](Context& ctx) {
                             auto c = std::make_shared<AttentionData>(random_data(family, p, 1));  // the f16 cache
                             make_paged(*c, kEngineLengths, 1);
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));  // the same values, encoded
                             make_paged(*d, kEngineLengths, 1);
                             d->p.cache_format = f;
                             if (cache_format_scaled(f)) d->p.k_scales = d->p.v_scales = std::vector<float>(p.kv_heads, 1.0f / 128);
                             encode_caches(*d);
                             c->upload(ctx);
                             d->upload(ctx);
                             return attention_beside(d, c, "f16 cache");
                           }});
  }
  // Chunked prefill beside decoding in one packed call (engines batch them): sequence 0 prefills 256
  // queries at the end of its 1k keys, sequences 1-7 decode one query each over 2k-16k keys; beside
  // the same work as two calls in one submission (the prefill alone, the 7 decodes alone).
  {
    AttentionParams p = engine_params(256);
    p.causal = true;
    p.total_queries = 256 + 7;
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    reg.benches.push_back({"attention-mixed", "[8,8/2,256+7x1,1k-16k,128] block 16 f16", bytes, Ceiling::Copy, false,
                           [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->query_lengths = {256, 1, 1, 1, 1, 1, 1, 1};
                             d->upload(ctx);
                             AttentionParams pp = p;  // the prefill alone
                             pp.batch = 1;
                             pp.total_queries = 0;
                             auto prefill = std::make_shared<AttentionData>(random_data(family, pp, 2));
                             make_paged(*prefill, {kEngineLengths[0]}, 2);
                             prefill->upload(ctx);
                             AttentionParams dp = p;  // the decodes alone
                             dp.batch = 7;
                             dp.queries = 1;
                             dp.total_queries = 0;
                             auto decode = std::make_shared<AttentionData>(random_data(family, dp, 3));
                             make_paged(*decode, std::vector<std::uint32_t>(kEngineLengths.begin() + 1, kEngineLengths.end()), 3);
                             decode->upload(ctx);
                             BenchRun run;
                             run.record = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
                             // The reference of the same work as two calls (of the packed call, it scores every
                             // sequence's rows of the chunk: 43 s).
                             run.cpu = [prefill, decode] {
                               (void)attention_reference(prefill->p, prefill->host());
                               (void)attention_reference(decode->p, decode->host());
                             };
                             run.baseline = "prefill and decodes apart";
                             run.record_baseline = [prefill, decode](Recorder& r) {
                               attention(r, prefill->p, prefill->buffers());
                               attention(r, decode->p, decode->buffers());
                             };
                             run.keep = std::make_shared<std::vector<std::shared_ptr<AttentionData>>>(
                                 std::vector<std::shared_ptr<AttentionData>>{d, prefill, decode});
                             return run;
                           }});
  }
  // Sequences of a few queries each (speculative decoding's drafts, a chunk's tail) in one packed
  // call, beside the decoding step of one query each over the same caches, in one submission (on a
  // CPU device, up to 16 queries a sequence decode; 32 take workgroups of query rows).
  for (const std::uint32_t n : {2u, 8u, 16u, 32u}) {
    AttentionParams p = engine_params(n);
    p.causal = true;
    p.total_queries = 8 * n;
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    const std::string shape = "[8,8/2,8x" + std::to_string(n) + ",1k-16k,128] block 16 f16";
    reg.benches.push_back({"attention-drafts", shape, bytes, Ceiling::Copy, false, [family = bias_tool(reg, p.bias), p, n](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->query_lengths.assign(8, static_cast<std::int32_t>(n));
                             d->upload(ctx);
                             AttentionParams dp = p;  // one query each
                             dp.queries = 1;
                             dp.total_queries = 0;
                             auto decode = std::make_shared<AttentionData>(random_data(family, dp, 1));
                             make_paged(*decode, kEngineLengths, 1);
                             decode->upload(ctx);
                             return attention_beside(d, decode, "one query each");
                           }});
  }
  // A paged decoding step through a plan beside attention() on the same inputs, in one submission:
  // both record through one path, so their GPU times should agree (T5 decoder bias, the engine's
  // shape: 8 sequences of 1k to 16k keys in 16-key blocks, 8 query and 2 kv heads, head_dim 128).
  {
    AttentionParams p = engine_params(1);
    p.causal = true;
    p.bias = AttentionBias::T5;
    p.t5.bidirectional = false;
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    reg.benches.push_back({"attention-plan", "[8,8/2,1,1k-16k,128] t5 block 16 f16", bytes, Ceiling::Copy, false,
                           [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->upload(ctx);
                             auto plan = std::make_shared<AttentionPlan>(ctx, d->p);
                             BenchRun run;
                             run.record = [d, plan](Recorder& r) { plan->record(r, {1, d->p.keys, 0}, d->buffers()); };
                             run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
                             run.baseline = "attention()";
                             run.record_baseline = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
                             run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<AttentionPlan>>>(d, plan);
                             return run;
                           }});
  }
  // The unfused pipeline at the fused T5 case's shape (the 2x comparison): the same bytes
  // counted, so the two lines' ms compare directly; it also allocates the [B, H, Q, K] logits.
  for (std::uint32_t n : {1024u, 256u}) {
    AttentionParams p{.heads = 8, .kv_heads = 8, .queries = n, .keys = n, .head_dim = 64, .bias = AttentionBias::T5};
    const std::uint64_t bytes = 4 * p.rows() * p.head_dim * 4 + p.bias_elements() * 4;
    char shape[160];
    std::snprintf(shape, sizeof shape, "[1,8,%u,%u,64] t5 f32 %.2fGF +%lluMiB", n, n, gflop(p),
                  static_cast<unsigned long long>(attention_unfused_logits_bytes(p) >> 20));
    reg.benches.push_back({"attention-unfused", shape, bytes, Ceiling::Copy, n == 256, [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             d->upload(ctx);
                             auto logits = std::make_shared<Buffer>(ctx, attention_unfused_logits_bytes(p));
                             BenchRun run;
                             run.record = [d, logits](Recorder& r) { attention_unfused(r, d->p, d->buffers(), *logits); };
                             run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
                             run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<Buffer>>>(d, logits);
                             return run;
                           }});
  }
  // One decoding step against a long cache.
  add({.heads = 8, .kv_heads = 8, .queries = 1, .keys = 16384, .head_dim = 64, .scale = 1.0f, .query_offset = 16383, .causal = true,
       .bias = AttentionBias::T5},
      false);
}

// A decode loop through a plan: 256 steps of one query with the T5 decoder bias, the keys growing
// from 32 to 8192 by 32 per step, one submission per step. Host time is recording only; the
// counts are of Vulkan objects created after the first step (relpos/resource_counts.hpp). The
// same loop through attention() is reported beside it (attention_*).
constexpr std::uint32_t kDecodeSteps = 256, kDecodeKeyStep = 32;

struct DecodeLoop {
  AttentionParams env;
  Buffer q, k, v, out, table;
  std::unique_ptr<AttentionPlan> plan;
  DecodeLoop(Context& ctx, const AttentionParams& e) : env(e) {
    std::mt19937 rng(1);
    auto floats = [&](std::size_t n) {
      std::vector<float> x(n);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (float& f : x) f = u(rng);
      return make_buffer(ctx, x);
    };
    const std::size_t cache = std::size_t{env.batch} * env.kv_heads * env.keys * env.head_dim;
    q = floats(env.rows() * env.head_dim);
    k = floats(cache);
    v = floats(cache);
    out = Buffer(ctx, env.rows() * env.head_dim * 4);
    table = floats(std::size_t{env.t5.num_buckets} * env.heads);
    plan = std::make_unique<AttentionPlan>(ctx, env);
  }
  AttentionBuffers buffers() const { return {&q, &k, &v, &out, nullptr, &table}; }
  static AttentionStep step(std::uint32_t n) {
    const std::uint32_t keys = kDecodeKeyStep * (n + 1);
    return {1, keys, std::int64_t{keys} - 1};
  }

  // Runs the loop; record(r, step) records one step. Returns {mean and median host µs per step
  // after the first, allocations after the first, pipelines after the first, every object after
  // the first (descriptor sets and events too)}.
  template <class F>
  std::array<double, 5> run(Context& ctx, F&& record) {
    Recorder r(ctx);
    ResourceCounts first{};
    std::vector<double> host_us;
    for (std::uint32_t n = 0; n < kDecodeSteps; ++n) {
      const auto t0 = std::chrono::steady_clock::now();
      record(r, step(n));
      const auto t1 = std::chrono::steady_clock::now();
      if (n > 0) host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      r.submit_and_wait();
      if (n == 0) first = resource_counts(ctx);
    }
    const ResourceCounts last = resource_counts(ctx);
    double sum = 0;
    for (double t : host_us) sum += t;
    std::sort(host_us.begin(), host_us.end());
    return {sum / host_us.size(), host_us[host_us.size() / 2], static_cast<double>(last.allocations() - first.allocations()),
            static_cast<double>(last.pipelines - first.pipelines), static_cast<double>(last.objects() - first.objects())};
  }
};

void register_decode_loop(Registry& reg) {
  AttentionParams env{.heads = 8, .kv_heads = 8, .queries = 1, .keys = kDecodeSteps * kDecodeKeyStep, .head_dim = 64, .scale = 1.0f,
                      .causal = true, .bias = AttentionBias::T5};
  env.t5.bidirectional = false;
  const std::uint64_t bytes = 2 * env.rows() * env.head_dim * 4 + 2ull * env.kv_heads * env.keys * env.head_dim * 4;
  const std::string shape = "[1,8,1,32..8192,64] t5 f32 256 steps";
  reg.benches.push_back({"attention-decode-loop", shape, bytes, Ceiling::Copy, false, [env](Context& ctx) {
                           auto d = std::make_shared<DecodeLoop>(ctx, env);
                           BenchRun run;
                           // The GPU columns: the loop's last step (8192 keys) through the plan.
                           run.record = [d](Recorder& r) { d->plan->record(r, DecodeLoop::step(kDecodeSteps - 1), d->buffers()); };
                           run.loop = [d, &ctx] {
                             const auto planned = d->run(ctx, [&](Recorder& r, const AttentionStep& s) { d->plan->record(r, s, d->buffers()); });
                             // The same loop through attention(), which takes k and v of the step's
                             // size: views of the cache's beginning (Buffer::external allocates nothing).
                             const auto free_function = d->run(ctx, [&](Recorder& r, const AttentionStep& s) {
                               AttentionParams p = d->plan->step_params(s);
                               const std::uint64_t kv_bytes = std::uint64_t{p.kv_heads} * p.keys * p.head_dim * 4;
                               const Buffer k = Buffer::external(ctx, d->k.handle(), kv_bytes), v = Buffer::external(ctx, d->v.handle(), kv_bytes);
                               attention(r, p, {&d->q, &k, &v, &d->out, nullptr, &d->table});
                             });
                             std::vector<std::pair<std::string, double>> figures = {
                                 {"host_us_per_step", planned[0]},          {"host_us_per_step_median", planned[1]},
                                 {"allocations_after_first", planned[2]},   {"pipelines_after_first", planned[3]},
                                 {"objects_after_first", planned[4]},
                                 {"attention_host_us_per_step", free_function[0]}, {"attention_host_us_per_step_median", free_function[1]},
                                 {"attention_allocations_after_first", free_function[2]},
                                 {"attention_objects_after_first", free_function[4]},
                                 {"attention_pipelines_after_first", free_function[3]}};
                             return figures;
                           };
                           run.keep = d;
                           return run;
                         }});
}

}  // namespace

void register_attention_benches(Registry& reg) {
  register_benches(reg);
  register_decode_loop(reg);
}

}  // namespace relpos::tool

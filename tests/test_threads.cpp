// The thread contract: one Context shared by threads that each record their own Recorder; several
// Contexts created and used at once; several Contexts adopting one queue under the application's
// queue lock. Every result is compared with a single-threaded one, and the validation layer
// (whose thread-safety checks report a command pool or queue used from two threads at once)
// must stay silent; an in-process ring of rank threads. Also built with ThreadSanitizer
// (CMakePresets.json, preset tsan).
#include <relpos/relpos.hpp>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/app_vulkan.hpp"
#include "support/gpu_fixture.hpp"
#include "support/ring_data.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::AppVulkan;
using relpos::test::GpuTest;
using relpos::test::gpu;

namespace {

// Inputs shared read-only by every thread, and the expected results: T5 and ALiBi exactly the CPU
// reference (gathers and single multiplies are exact), RoPE and attention the same context's
// single-threaded result, bit for bit (their accuracy against the reference is test_rope_gpu's
// and test_attention_gpu's).
struct Workload {
  T5Params t5;
  std::vector<float> table;
  AlibiParams alibi;
  RopeParams rope;
  std::vector<float> rope_x;
  AttentionParams attn;
  std::vector<float> q, k, v, attn_table;
  std::vector<float> want_t5, want_alibi, want_rope, want_attn;

  Workload() {
    std::mt19937 rng(12);
    t5.queries = 7;
    t5.keys = 13;
    t5.heads = 2;
    table = relpos::test::random_floats(rng, 32 * 2);
    alibi.heads = 3;
    alibi.queries = 6;
    alibi.keys = 17;
    rope.seq = 5;
    rope.heads = 2;
    rope.head_dim = 8;
    rope_x = relpos::test::random_floats(rng, rope.elements());
    attn.heads = 2;
    attn.queries = 6;
    attn.keys = 9;
    attn.head_dim = 8;
    attn.bias = AttentionBias::T5;
    q = relpos::test::random_floats(rng, attn.rows() * 8);
    k = relpos::test::random_floats(rng, std::size_t{attn.kv_heads} * attn.keys * 8);
    v = relpos::test::random_floats(rng, std::size_t{attn.kv_heads} * attn.keys * 8);
    attn_table = relpos::test::random_floats(rng, attn.bias_elements());
    want_t5 = t5_bias_reference(t5, table);
    want_alibi = alibi_bias_reference(alibi);
  }
};

// One context's buffers of the workload's inputs (made before the threads start).
struct Inputs {
  Buffer table, rope_x, q, k, v, attn_table;
  Inputs(Context& ctx, const Workload& w)
      : table(make_buffer(ctx, w.table)), rope_x(make_buffer(ctx, w.rope_x)), q(make_buffer(ctx, w.q)), k(make_buffer(ctx, w.k)),
        v(make_buffer(ctx, w.v)), attn_table(make_buffer(ctx, w.attn_table)) {}
};

// Submission `n` of a thread: one of the four ops into a fresh output, then its download.
std::vector<float> run_op(Context& ctx, Recorder& r, const Workload& w, const Inputs& in, int n) {
  switch (n % 4) {
    case 0: {
      Buffer out(ctx, w.want_t5.size() * 4);
      t5_bias(r, w.t5, in.table, out);
      r.submit_and_wait();
      return out.download<float>(w.want_t5.size());
    }
    case 1: {
      Buffer out(ctx, w.want_alibi.size() * 4);
      alibi_bias(r, w.alibi, out);
      r.submit_and_wait();
      return out.download<float>(w.want_alibi.size());
    }
    case 2: {
      Buffer out(ctx, w.rope_x.size() * 4);
      rope_into(r, w.rope, in.rope_x, out);
      r.submit_and_wait();
      return out.download<float>(w.rope_x.size());
    }
    default: {
      const std::size_t n_out = w.attn.rows() * w.attn.head_dim;
      Buffer out(ctx, n_out * 4);
      AttentionBuffers b{&in.q, &in.k, &in.v, &out};
      b.bias = &in.attn_table;
      attention(r, w.attn, b);
      r.submit_and_wait();
      return out.download<float>(n_out);
    }
  }
}

const std::vector<float>& expected(const Workload& w, int n) {
  switch (n % 4) {
    case 0: return w.want_t5;
    case 1: return w.want_alibi;
    case 2: return w.want_rope;
    default: return w.want_attn;
  }
}

// The single-threaded RoPE and attention results on `ctx`.
void compute_baselines(Context& ctx, Workload& w, const Inputs& in) {
  Recorder r(ctx);
  w.want_rope = run_op(ctx, r, w, in, 2);
  w.want_attn = run_op(ctx, r, w, in, 3);
}

// `threads` threads, each `submissions` submissions of mixed ops through its own Recorders (a new
// one every 10 submissions). Returns the number of wrong results.
int hammer(const std::vector<Context*>& contexts, const std::vector<Workload*>& workloads, const std::vector<const Inputs*>& inputs,
           int threads, int submissions) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const std::size_t c = static_cast<std::size_t>(t) % contexts.size();
      Context& ctx = *contexts[c];
      std::optional<Recorder> r;
      for (int n = 0; n < submissions; ++n) {
        if (n % 10 == 0) r.emplace(ctx);
        if (run_op(ctx, *r, *workloads[c], *inputs[c], n + t) != expected(*workloads[c], n + t)) wrong.fetch_add(1);
      }
    });
  for (auto& th : pool) th.join();
  return wrong.load();
}

class Threads : public GpuTest {};

}  // namespace

TEST_F(Threads, FourThreadsShareOneContext) {
  Context& ctx = gpu();
  Workload w;
  Inputs in(ctx, w);
  compute_baselines(ctx, w, in);
  EXPECT_EQ(hammer({&ctx}, {&w}, {&in}, 4, 50), 0);
}

// Two contexts, each created by its own thread at the same moment, then used concurrently.
// An in-process ring: four rank threads on one shared context pass chunks through the hub while
// each submits and waits on its own recorders; every rank's result equals one device's.
TEST_F(Threads, InProcessRingOfFourRanks) {
  std::mt19937 rng(8);
  AttentionParams p{.heads = 2, .kv_heads = 1, .queries = 24, .keys = 24, .head_dim = 8, .causal = true, .bias = AttentionBias::Alibi};
  relpos::test::WholeInputs in;
  in.q = relpos::test::random_floats(rng, p.rows() * p.head_dim);
  in.k = relpos::test::random_floats(rng, std::size_t{p.keys} * p.head_dim);
  in.v = relpos::test::random_floats(rng, in.k.size());
  in.bias = relpos::test::random_floats(rng, p.heads, 0.0f, 1.0f);
  const AttentionResult one = relpos::test::single_device(gpu(), p, in);
  const RingParams rp{p, 4, RingLayout::Zigzag};
  AttentionResult got{std::vector<float>(one.out.size()), std::vector<float>(one.lse.size())};
  const InProcessRingOutcome outcome = run_in_process_ring(std::vector<Context*>(4, &gpu()), std::chrono::minutes(2),
                                                           [&](std::uint32_t, Context& ctx, RingTransport& t) {
                                                             RingRank rank(ctx, t);
                                                             relpos::test::ring_rank(rank, rp, in, got);
                                                           });
  ASSERT_TRUE(outcome.ok()) << outcome.describe();
  EXPECT_LE(normalised_error(got.out, one.out), 1e-4);
  EXPECT_LE(normalised_error(got.lse, one.lse), 1e-4);
}

TEST(ThreadsContexts, TwoContextsCreatedAndUsedAtOnce) {
  std::mutex messages_mutex;
  std::vector<std::string> messages;
  ContextOptions o;
  o.validation = true;
  o.on_validation_message = [&](const ValidationMessage& m) {
    std::lock_guard lock(messages_mutex);
    messages.push_back(m.id + ": " + m.text);
  };
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 2; ++t)
    pool.emplace_back([&, t] {
      Context ctx(o);
      Workload w;
      Inputs in(ctx, w);
      compute_baselines(ctx, w, in);
      Recorder r(ctx);
      for (int n = 0; n < 20; ++n)
        if (run_op(ctx, r, w, in, n + t) != expected(w, n + t)) wrong.fetch_add(1);
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(messages, std::vector<std::string>{});
}

// Two contexts adopt the application's one queue, with its lock; both submit from two threads
// each while the application submits its own work to the queue under the same lock.
TEST(ThreadsContexts, TwoContextsAdoptOneQueueWithTheApplicationsLock) {
  AppVulkan app;
  Context a(app.adopted()), b(app.adopted());
  Workload wa, wb;
  Inputs ia(a, wa), ib(b, wb);
  compute_baselines(a, wa, ia);
  compute_baselines(b, wb, ib);
  std::atomic<bool> stop{false};
  std::thread app_work([&] {
    while (!stop.load()) {
      VkCommandBuffer cb = app.begin_command_buffer();
      app.submit_and_wait(cb);  // under app.queue_mutex
      vkFreeCommandBuffers(app.device, app.pool, 1, &cb);  // the pool is used by this thread only
    }
  });
  EXPECT_EQ(hammer({&a, &b}, {&wa, &wb}, {&ia, &ib}, 4, 20), 0);
  stop.store(true);
  app_work.join();
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

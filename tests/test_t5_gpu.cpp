// T5 on the GPU against the CPU reference: buckets and f32 bias exactly, f16 within one half ulp.
#include <relpos/relpos.hpp>

#include <chrono>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::expect_half_close;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_expansion;
using relpos::test::gpu_small_limits;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

// A random configuration: odd and even bucket counts, Q != K, offsets of every kind (first-aligned,
// last-aligned, decoding step, far past 10^6), both directions and both log conventions.
T5Params random_params(std::mt19937& rng) {
  std::uniform_int_distribution<int> coin(0, 1), size(1, 70), heads(1, 5);
  T5Params p;
  p.bidirectional = coin(rng);
  p.num_buckets = std::uniform_int_distribution<std::uint32_t>(p.bidirectional ? 4 : 2, 67)(rng);
  p.max_distance = p.max_exact() + std::uniform_int_distribution<std::uint32_t>(1, 300)(rng);
  p.log = coin(rng) ? T5Log::FlaxEps : T5Log::HuggingFace;
  p.queries = size(rng);
  p.keys = size(rng);
  p.query_offset = relpos::test::random_query_offset(rng, p.queries, p.keys, 3'000'000, 500);
  p.heads = heads(rng);
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  p.scale = coin(rng) ? 1.0f : std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  return p;
}

std::string describe(const T5Params& p) {
  return "nb=" + std::to_string(p.num_buckets) + " md=" + std::to_string(p.max_distance) + (p.bidirectional ? " bi" : " causal") +
         (p.log == T5Log::FlaxEps ? " flax" : " hf") + " Q=" + std::to_string(p.queries) + " K=" + std::to_string(p.keys) +
         " off=" + std::to_string(p.query_offset) + " H=" + std::to_string(p.heads) + " B=" + std::to_string(p.batch) +
         " scale=" + std::to_string(p.scale);
}

std::vector<std::int32_t> gpu_buckets(Context& ctx, const T5Params& p) {
  Buffer out(ctx, std::uint64_t{p.queries} * p.keys * 4);
  run(ctx, [&](Recorder& r) { t5_buckets(r, p, out); });
  return out.download<std::int32_t>(std::size_t{p.queries} * p.keys);
}

std::vector<float> gpu_bias(Context& ctx, const T5Params& p, const std::vector<float>& table, DType dtype) {
  const std::size_t n = std::size_t{p.heads} * p.queries * p.keys;
  Buffer t = make_buffer(ctx, table);
  Buffer out(ctx, n * dtype_size(dtype));
  run(ctx, [&](Recorder& r) { t5_bias(r, p, t, out, dtype); });
  return download_floats(out, n, dtype);
}

class T5Gpu : public GpuTest {};

}  // namespace

TEST_F(T5Gpu, SeedTableOnGpu) {
  T5Params p;
  p.num_buckets = 6;
  p.max_distance = 20;
  p.bidirectional = false;
  p.queries = p.keys = 14;
  EXPECT_EQ(gpu_buckets(gpu(), p), t5_buckets_reference(p));
}

TEST_F(T5Gpu, RandomConfigurationsMatchReferenceExactly) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    T5Params p = random_params(rng);
    SCOPED_TRACE(describe(p));
    ASSERT_EQ(count_mismatches(gpu_buckets(gpu(), p), t5_buckets_reference(p)), 0u);
    auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads);
    auto want = t5_bias_reference(p, table);
    ASSERT_EQ(gpu_bias(gpu(), p, table, DType::F32), want);  // a gather and one multiply: bit-exact
  }
}

TEST_F(T5Gpu, DefaultConfigurationsAtKnifeEdges) {
  // Relative positions 16, 32, 64 (encoder) and the CPU/CUDA disagreements all land in one window.
  for (auto [nb, md, bi] : {std::tuple{32u, 128u, true}, {32u, 128u, false}, {64u, 50u, false}, {128u, 100u, false},
                            {20u, 1000u, false}, {48u, 81u, false}}) {
    T5Params p;
    p.num_buckets = nb;
    p.max_distance = md;
    p.bidirectional = bi;
    p.queries = 130;
    p.keys = 133;
    SCOPED_TRACE(describe(p));
    EXPECT_EQ(gpu_buckets(gpu(), p), t5_buckets_reference(p));
  }
}

TEST_F(T5Gpu, HalfOutputWithinOneUlp) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 12; ++trial) {
    T5Params p = random_params(rng);
    SCOPED_TRACE(describe(p));
    auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads, -70000.0f, 70000.0f);
    expect_half_close(gpu_bias(gpu(), p, table, DType::F16), t5_bias_reference(p, table), "f16 bias");
  }
}

TEST_F(T5Gpu, AddsInPlaceIntoLogits) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    T5Params p = random_params(rng);
    SCOPED_TRACE(describe(p));
    const std::size_t n = std::size_t{p.batch} * p.heads * p.queries * p.keys;
    auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads);
    auto logits = random_floats(rng, n, -10.0f, 10.0f);
    auto want = logits;
    t5_bias_add_reference(p, table, want);

    Buffer t = make_buffer(gpu(), table);
    Buffer l32 = make_buffer(gpu(), logits);
    run(gpu(), [&](Recorder& r) { t5_bias_add(r, p, t, l32, DType::F32); });
    ASSERT_EQ(l32.download<float>(n), want);

    // f16 logits: the sum is taken in f32 from the stored halves, then rounded to half.
    auto logits16 = to_half(logits);
    auto stored = from_half(logits16);
    auto want16 = stored;
    t5_bias_add_reference(p, table, want16);
    Buffer l16 = make_buffer(gpu(), logits16);
    run(gpu(), [&](Recorder& r) { t5_bias_add(r, p, t, l16, DType::F16); });
    expect_half_close(from_half(l16.download<std::uint16_t>(n)), want16, "f16 add");
  }
}

// Keys a multiple of 4 (and of 8) take the whole-vector path in every mode: tiles of rows larger
// than Q (heads change inside a tile), and smaller (interior invocations).
TEST_F(T5Gpu, WholeVectorRowsInEveryMode) {
  std::mt19937 rng(11);
  for (auto [q, k, h, b] : {std::tuple{300u, 64u, 2u, 2u}, {5u, 16u, 3u, 2u}, {129u, 136u, 1u, 1u}, {200u, 12u, 2u, 1u}}) {
    T5Params p;
    p.queries = q;
    p.keys = k;
    p.heads = h;
    p.batch = b;
    p.query_offset = -3;
    SCOPED_TRACE(describe(p));
    ASSERT_EQ(gpu_buckets(gpu(), p), t5_buckets_reference(p));
    auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads);
    auto want = t5_bias_reference(p, table);
    ASSERT_EQ(gpu_bias(gpu(), p, table, DType::F32), want);
    expect_half_close(gpu_bias(gpu(), p, table, DType::F16), want, "f16 bias");
    const std::size_t n = std::size_t{b} * h * q * k;
    auto logits = random_floats(rng, n, -10.0f, 10.0f);
    auto want_add = logits;
    t5_bias_add_reference(p, table, want_add);
    Buffer t = make_buffer(gpu(), table);
    Buffer l32 = make_buffer(gpu(), logits);
    run(gpu(), [&](Recorder& r) { t5_bias_add(r, p, t, l32, DType::F32); });
    ASSERT_EQ(l32.download<float>(n), want_add);
    auto logits16 = to_half(logits);
    auto want16 = from_half(logits16);
    t5_bias_add_reference(p, table, want16);
    Buffer l16 = make_buffer(gpu(), logits16);
    run(gpu(), [&](Recorder& r) { t5_bias_add(r, p, t, l16, DType::F16); });
    expect_half_close(from_half(l16.download<std::uint16_t>(n)), want16, "f16 add");
  }
}

// Buckets and bias written by the shader and by transfer copies (DistanceExpansion), each forced
// whatever the device: rows of any length (one value, unaligned f16 windows, whole vectors), and
// more rows than one copy command takes (4096).
TEST_F(T5Gpu, BothExpansionPathsMatchReference) {
  std::mt19937 rng(13);
  for (DistanceExpansion path : {DistanceExpansion::Shader, DistanceExpansion::Copies}) {
    Context& ctx = gpu_expansion(path);
    for (auto [q, k, h] : {std::tuple{1500u, 7u, 3u}, {37u, 41u, 2u}, {1u, 3000u, 2u}, {64u, 256u, 1u}, {9u, 1u, 2u}}) {
      T5Params p;
      p.queries = q;
      p.keys = k;
      p.heads = h;
      p.query_offset = -5;
      SCOPED_TRACE(describe(p) + (path == DistanceExpansion::Copies ? " copies" : " shader"));
      ASSERT_EQ(gpu_buckets(ctx, p), t5_buckets_reference(p));
      auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads);
      auto want = t5_bias_reference(p, table);
      ASSERT_EQ(gpu_bias(ctx, p, table, DType::F32), want);
      expect_half_close(gpu_bias(ctx, p, table, DType::F16), want, "f16 bias");
    }
  }
}

// With a 4 KiB binding limit and 3 workgroups per dispatch, every output takes many chunks,
// chunk starts fall mid-row, and the last quad of a chunk is partial.
TEST_F(T5Gpu, SplitPathsUnderLoweredLimits) {
  Context& ctx = gpu_small_limits();
  std::mt19937 rng(5);
  for (auto [q, k, h, b] : {std::tuple{37u, 41u, 3u, 2u}, {64u, 64u, 2u, 1u}, {5u, 301u, 3u, 3u}, {129u, 3u, 1u, 2u}}) {
    T5Params p;
    p.queries = q;
    p.keys = k;
    p.heads = h;
    p.batch = b;
    p.query_offset = 11;
    SCOPED_TRACE(describe(p));
    ASSERT_EQ(gpu_buckets(ctx, p), t5_buckets_reference(p));
    auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads);
    ASSERT_EQ(gpu_bias(ctx, p, table, DType::F32), t5_bias_reference(p, table));
    expect_half_close(gpu_bias(ctx, p, table, DType::F16), t5_bias_reference(p, table), "split f16");
    const std::size_t n = std::size_t{b} * h * q * k;
    auto logits = random_floats(rng, n);
    auto want = logits;
    t5_bias_add_reference(p, table, want);
    Buffer t = make_buffer(ctx, table);
    Buffer l = make_buffer(ctx, logits);
    run(ctx, [&](Recorder& r) { t5_bias_add(r, p, t, l, DType::F32); });
    ASSERT_EQ(l.download<float>(n), want);
  }
}

// [16, 4096, 4096] float32 is 1 GiB: eight times lavapipe's 128 MiB binding limit, so the shader
// expansion takes several chunks. (Transfer copies bind nothing; under synchronization validation
// their 65536 overlapping source windows would cost the layer about 15 s.)
TEST_F(T5Gpu, OneGibibyteBias) {
  Context& ctx = gpu_expansion(DistanceExpansion::Shader);
  T5Params p;
  p.queries = p.keys = 4096;
  p.heads = 16;
  std::mt19937 rng(3);
  auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads);
  const std::size_t n = std::size_t{p.heads} * p.queries * p.keys;
  Buffer t = make_buffer(ctx, table);
  Buffer out(ctx, n * 4);
  ASSERT_GT(out.size(), ctx.limits().max_storage_buffer_range);
  run(ctx, [&](Recorder& r) { t5_bias(r, p, t, out, DType::F32); });
  std::vector<float> got(n);
  out.download(got.data(), n * 4);
  // The reference per distance, expanded on the host (the full reference would take seconds).
  for (std::uint32_t h = 0; h < p.heads; ++h)
    for (std::uint32_t i = 0; i < p.queries; i += (i % 97 == 0 ? 1 : 13))
      for (std::uint32_t j = 0; j < p.keys; ++j) {
        const float want = table[t5_bucket(std::int64_t(j) - i, p) * p.heads + h];
        ASSERT_EQ(got[(std::size_t{h} * p.queries + i) * p.keys + j], want) << "h=" << h << " i=" << i << " j=" << j;
      }
}

// More heads than one invocation of the row shader may loop over (RELPOS_MAX_LOOP_ITERATIONS):
// the host splits them across dispatches, and every head's gather is still exact.
TEST_F(T5Gpu, ManyHeadsAreSplitAcrossDispatches) {
  std::mt19937 rng(91);
  T5Params p;
  p.heads = 70'000;
  p.queries = 2;
  p.keys = 3;
  p.query_offset = 1;
  const auto table = random_floats(rng, std::size_t{p.num_buckets} * p.heads, -4.0f, 4.0f);
  EXPECT_EQ(gpu_bias(gpu(), p, table, DType::F32), t5_bias_reference(p, table));
}

TEST_F(T5Gpu, InvalidInputIsRejectedBeforeDispatch) {
  Context& ctx = gpu();
  T5Params p;
  p.queries = p.keys = 8;
  p.heads = 2;
  Buffer table(ctx, 32 * 2 * 4), out(ctx, 2 * 64 * 4), small(ctx, 64);
  Recorder r(ctx);
  expect_invalid([&] { t5_bias(r, p, small, out); }, "table");
  expect_invalid([&] { t5_bias(r, p, table, small); }, "output buffer");
  expect_invalid([&] { t5_buckets(r, p, small); }, "output buffer");
  expect_invalid([&] { t5_bias(r, p, table, out, DType::I32); }, "out_dtype");
  expect_invalid([&] { t5_bias_add(r, p, table, out, DType::I32); }, "dtype");
  T5Params bad = p;
  bad.num_buckets = 2;
  expect_invalid([&] { t5_buckets(r, bad, out); }, "num_buckets");
  bad = p;
  bad.max_distance = 4;
  expect_invalid([&] { t5_buckets(r, bad, out); }, "max_distance");
  bad = p;
  bad.batch = 5;  // logits buffer holds one batch only
  expect_invalid([&] { t5_bias_add(r, bad, table, out); }, "output buffer");
  EXPECT_EQ(r.dispatch_count(), 0u);  // every check came before anything was recorded
  r.submit_and_wait();
  // A table larger than the binding range (32 * 33 values in 4 KiB) is refused, not bound.
  Context& tiny = gpu_small_limits();
  bad = p;
  bad.heads = 33;
  Buffer big_table(tiny, 32 * 33 * 4), logits(tiny, 33 * 64 * 4);
  Recorder rt(tiny);
  expect_invalid([&] { t5_bias(rt, bad, big_table, logits); }, "num_buckets * heads");
  expect_invalid([&] { t5_bias_add(rt, bad, big_table, logits); }, "num_buckets * heads");
  EXPECT_EQ(rt.dispatch_count(), 0u);
  rt.submit_and_wait();
}

// Bucket counts and distances in the hundreds of millions (the buckets of a small window are then
// just |rp|, or a handful of levels far out) cost what the window needs: the case took
// over 300 s building thresholds for every bucket, then failed to bind them.
TEST_F(T5Gpu, HugeBucketCountsCostWhatTheWindowNeeds) {
  const auto start = std::chrono::steady_clock::now();
  for (auto [nb, md, bi, off, log] : {std::tuple{100'000'000u, 200'000'000u, true, std::int64_t{0}, T5Log::HuggingFace},
                                      {100'000'000u, 200'000'000u, false, std::int64_t{0}, T5Log::HuggingFace},
                                      {2'000'000'000u, 4'000'000'000u, true, std::int64_t{2'000'000'000}, T5Log::HuggingFace},
                                      {2'000'000'000u, 4'000'000'000u, false, std::int64_t{1'500'000'000}, T5Log::FlaxEps},
                                      {20'000'000u, 10'000'001u, false, std::int64_t{10'000'300}, T5Log::FlaxEps}}) {
    T5Params p;
    p.num_buckets = nb;
    p.max_distance = md;
    p.bidirectional = bi;
    p.log = log;
    p.queries = 9;
    p.keys = 700;
    p.query_offset = off;
    SCOPED_TRACE(describe(p));
    const auto want = t5_buckets_reference(p);
    EXPECT_EQ(gpu_buckets(gpu(), p), want);
    if (off == 0) EXPECT_EQ(want[5], static_cast<std::int32_t>(bi ? 5 + nb / 2 : 0));  // query 0, key 5: rp = 5, below max_exact
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

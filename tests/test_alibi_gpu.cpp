// ALiBi on the GPU against the CPU reference: f32 bias and in-place add bit-exact (one multiply,
// one add), f16 within one half ulp; masked entries -inf in every dtype.
#include <relpos/relpos.hpp>

#include <cstdlib>
#include <optional>
#include <random>
#include <string>

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

// Head counts powers of two and not, both rules, max_bias 8 and others, given slopes, both
// directions, offsets first-aligned, last-aligned, decoding and far.
AlibiParams random_params(std::mt19937& rng) {
  std::uniform_int_distribution<int> coin(0, 1), size(1, 70);
  AlibiParams p;
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 12)(rng);
  p.rule = coin(rng) ? AlibiSlopeRule::Interleaved : AlibiSlopeRule::Geometric;
  p.max_bias = coin(rng) ? 8.0 : std::uniform_real_distribution<double>(0.5, 16.0)(rng);
  if (std::uniform_int_distribution<int>(0, 4)(rng) == 0) p.slopes = random_floats(rng, p.heads, 0.0f, 1.0f);
  p.causal = coin(rng);
  p.queries = size(rng);
  p.keys = size(rng);
  p.query_offset = relpos::test::random_query_offset(rng, p.queries, p.keys, 3'000'000, 100);
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  return p;
}

std::string describe(const AlibiParams& p) {
  return "H=" + std::to_string(p.heads) + (p.rule == AlibiSlopeRule::Interleaved ? " interleaved" : " geometric") +
         " max_bias=" + std::to_string(p.max_bias) + (p.slopes.empty() ? "" : " given") + (p.causal ? " causal" : " symmetric") +
         " Q=" + std::to_string(p.queries) + " K=" + std::to_string(p.keys) + " off=" + std::to_string(p.query_offset) +
         " B=" + std::to_string(p.batch);
}

std::vector<float> gpu_bias(Context& ctx, const AlibiParams& p, DType dtype) {
  const std::size_t n = std::size_t{p.heads} * p.queries * p.keys;
  Buffer out(ctx, n * dtype_size(dtype));
  run(ctx, [&](Recorder& r) { alibi_bias(r, p, out, dtype); });
  return download_floats(out, n, dtype);
}

// logits + bias on the GPU, in f32 or f16 storage; `logits` are the values before.
std::vector<float> gpu_add(Context& ctx, const AlibiParams& p, const std::vector<float>& logits, DType dtype) {
  Buffer l = make_float_buffer(ctx, logits, dtype);
  run(ctx, [&](Recorder& r) { alibi_bias_add(r, p, l, dtype); });
  return download_floats(l, logits.size(), dtype);
}

void expect_matches(Context& ctx, const AlibiParams& p, std::mt19937& rng) {
  SCOPED_TRACE(describe(p));
  const std::vector<float> want = alibi_bias_reference(p);
  ASSERT_EQ(gpu_bias(ctx, p, DType::F32), want);  // one float32 multiply on both sides: bit-exact
  expect_half_close(gpu_bias(ctx, p, DType::F16), want, "f16 bias");
  const std::vector<float> logits = random_floats(rng, want.size() * p.batch, -10.0f, 10.0f);
  std::vector<float> sum = logits;
  alibi_bias_add_reference(p, sum);
  ASSERT_EQ(gpu_add(ctx, p, logits, DType::F32), sum);
  // f16 logits: the sum is taken in f32 from the stored halves, then rounded to half.
  std::vector<float> stored = from_half(to_half(logits));
  alibi_bias_add_reference(p, stored);
  expect_half_close(gpu_add(ctx, p, logits, DType::F16), stored, "f16 add");
}

class AlibiGpu : public GpuTest {};

}  // namespace

TEST_F(AlibiGpu, RandomConfigurationsMatchReference) {
  std::mt19937 rng(404);
  for (int trial = 0; trial < 24; ++trial) expect_matches(gpu(), random_params(rng), rng);
}

// Both expansion paths, forced on whatever device runs the tests, over the random configurations.
TEST_F(AlibiGpu, BothExpansionPathsMatchReference) {
  for (DistanceExpansion path : {DistanceExpansion::Shader, DistanceExpansion::Copies}) {
    SCOPED_TRACE(path == DistanceExpansion::Copies ? "copies" : "shader");
    std::mt19937 rng(405);
    for (int trial = 0; trial < 10; ++trial) expect_matches(gpu_expansion(path), random_params(rng), rng);
  }
}

namespace {

// Dispatches alibi_bias records on `ctx` (the copy path leaves only the per-distance row's, and for
// f16 its rounding), after checking the result against the reference.
std::uint32_t bias_dispatches(Context& ctx, std::uint32_t keys, DType dtype) {
  AlibiParams p;
  p.heads = 2;
  p.queries = 6;
  p.keys = keys;
  p.causal = false;
  const std::size_t n = std::size_t{p.heads} * p.queries * p.keys;
  Buffer out(ctx, n * dtype_size(dtype));
  Recorder r(ctx);
  alibi_bias(r, p, out, dtype);
  const std::uint32_t dispatches = r.dispatch_count();
  r.submit_and_wait();
  if (dtype == DType::F32) EXPECT_EQ(download_floats(out, n, dtype), alibi_bias_reference(p));
  return dispatches;
}

// Sets LP_NUM_THREADS (the thread count Auto reads for llvmpipe) for one scope.
class ScopedThreads {
 public:
  explicit ScopedThreads(const char* value) {
    if (const char* old = std::getenv("LP_NUM_THREADS")) old_ = old;
    setenv("LP_NUM_THREADS", value, 1);
  }
  ~ScopedThreads() {
    if (old_) setenv("LP_NUM_THREADS", old_->c_str(), 1);
    else unsetenv("LP_NUM_THREADS");
  }

 private:
  std::optional<std::string> old_;
};

}  // namespace

// DistanceExpansion picks the path: Copies and Shader always; Auto copies on CPU devices with at
// most 4 threads once a row is 1 KiB, and takes the shader on GPUs.
TEST_F(AlibiGpu, ExpansionOptionPicksThePath) {
  Context& copies = gpu_expansion(DistanceExpansion::Copies);
  Context& shader = gpu_expansion(DistanceExpansion::Shader);
  EXPECT_EQ(bias_dispatches(copies, 12, DType::F32), 1u);
  EXPECT_EQ(bias_dispatches(copies, 13, DType::F16), 2u);
  EXPECT_EQ(bias_dispatches(shader, 12, DType::F32), 3u);  // row, shifted copies, expansion
  EXPECT_EQ(bias_dispatches(shader, 13, DType::F32), 2u);  // row, flat expansion
  {
    // Adds into logits always take the shader.
    AlibiParams p;
    p.keys = 4096;
    Buffer logits(copies, p.keys * 4);
    Recorder r(copies);
    alibi_bias_add(r, p, logits);
    EXPECT_EQ(r.dispatch_count(), 3u);
    r.submit_and_wait();
  }
  if (gpu().device_info().type != DeviceType::Cpu) {
    EXPECT_EQ(bias_dispatches(gpu(), 4096, DType::F32), 3u);
    return;
  }
  {
    ScopedThreads threads("2");
    EXPECT_EQ(bias_dispatches(gpu(), 256, DType::F32), 1u);
    EXPECT_EQ(bias_dispatches(gpu(), 255, DType::F32), 2u);
    EXPECT_EQ(bias_dispatches(gpu(), 512, DType::F16), 2u);
    EXPECT_EQ(bias_dispatches(gpu(), 504, DType::F16), 3u);
  }
  {
    ScopedThreads threads("5");
    EXPECT_EQ(bias_dispatches(gpu(), 4096, DType::F32), 3u);
  }
}

// Under a 4 KiB binding limit and 3 workgroups per dispatch the expansion takes many chunks.
TEST_F(AlibiGpu, SplitPathsUnderLoweredLimits) {
  std::mt19937 rng(8);
  for (auto [q, k, h, b] : {std::tuple{37u, 41u, 3u, 2u}, {64u, 64u, 6u, 1u}, {5u, 301u, 3u, 2u}, {129u, 3u, 1u, 2u}}) {
    AlibiParams p;
    p.queries = q;
    p.keys = k;
    p.heads = h;
    p.batch = b;
    p.query_offset = static_cast<std::int64_t>(k) - q;
    expect_matches(gpu_small_limits(), p, rng);
  }
}

// More heads than one invocation of the row shader may loop over (RELPOS_MAX_LOOP_ITERATIONS):
// the host splits them across dispatches, and every head's row is still exact.
TEST_F(AlibiGpu, ManyHeadsAreSplitAcrossDispatches) {
  AlibiParams p;
  p.heads = 70'000;
  p.queries = 2;
  p.keys = 3;
  p.query_offset = 1;
  p.causal = false;
  EXPECT_EQ(gpu_bias(gpu(), p, DType::F32), alibi_bias_reference(p));
}

TEST_F(AlibiGpu, InvalidInputIsRejectedBeforeDispatch) {
  Context& ctx = gpu();
  AlibiParams p;
  p.heads = 2;
  p.queries = p.keys = 8;
  Buffer out(ctx, 2 * 64 * 4), small(ctx, 64);
  Recorder r(ctx);
  expect_invalid([&] { alibi_bias(r, p, small); }, "output buffer");
  expect_invalid([&] { alibi_bias_add(r, p, small); }, "output buffer");
  expect_invalid([&] { alibi_bias(r, p, out, DType::I32); }, "out_dtype");
  expect_invalid([&] { alibi_bias_add(r, p, out, DType::I32); }, "dtype");
  AlibiParams bad = p;
  bad.heads = 0;
  expect_invalid([&] { alibi_bias(r, bad, out); }, "heads");
  bad = p;
  bad.slopes = {1.0f};
  expect_invalid([&] { alibi_bias(r, bad, out); }, "slopes");
  bad = p;
  bad.queries = 700;  // the per-distance rows exceed the lowered 4 KiB binding
  bad.keys = 700;
  Buffer big(gpu_small_limits(), std::uint64_t{2} * 700 * 700 * 4);
  Recorder small_r(gpu_small_limits());
  expect_invalid([&] { alibi_bias(small_r, bad, big); }, "heads * (queries + keys - 1)");
  small_r.submit_and_wait();
  bad = p;
  bad.batch = 3;  // the buffer holds one batch
  expect_invalid([&] { alibi_bias_add(r, bad, out); }, "output buffer");
  r.submit_and_wait();  // nothing was recorded
}

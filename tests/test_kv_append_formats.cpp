// kv_append's opt-ins against the reference over random shapes: every cache format (bytes equal
// to the host's encoding without RoPE, decoded values within the format's step with it, the rest
// of the cache untouched), ragged batches (packed token-major rows, counts of 0, packed rows
// unused at the end), lengths advanced on the device; KvAppendPlan equal to kv_append() bit for
// bit and creating nothing after its first step; bad input refused before anything is recorded.
#include <relpos/relpos.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"
#include "support/tolerance.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

constexpr CacheFormat kFormats[] = {CacheFormat::F32, CacheFormat::F16, CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3};

// What one step's append takes, on the host.
struct Case {
  KvAppendParams p;
  std::vector<std::uint8_t> k_cache, v_cache;  // encoded
  std::vector<float> k, v, q;
  std::vector<std::int32_t> table, lengths, new_tokens;
};

std::vector<std::uint8_t> random_cache(std::mt19937& rng, const KvAppendParams& p, const std::vector<float>& scales) {
  const std::uint64_t rb = cache_row_bytes(p.cache(), p.head_dim), rows = p.cache_bytes() / rb;
  std::vector<std::uint8_t> bytes(p.cache_bytes());
  for (std::uint64_t i = 0; i < rows; ++i)
    encode_cache_row(p.cache(), random_floats(rng, p.head_dim), std::span(bytes).subspan(i * rb, rb),
                     scales.empty() ? 1.0f : scales[i % p.kv_heads]);
  return bytes;
}

// Lengths leave room for each sequence's tokens; blocks in a shuffled order.
Case random_case(std::mt19937& rng, KvAppendParams p) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Case c;
  p.paged.num_blocks = p.batch * p.paged.max_blocks + 2;
  std::uint64_t total = 0;
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    const std::int32_t n = p.ragged ? pick(0, static_cast<int>(p.new_tokens)) : static_cast<std::int32_t>(p.new_tokens);
    c.new_tokens.push_back(n);
    c.lengths.push_back(pick(0, static_cast<int>(p.capacity()) - n) + (p.lengths_include_new ? n : 0));
    total += static_cast<std::uint64_t>(n);
  }
  if (p.ragged) p.packed_tokens = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, total + pick(0, 2)));
  if (p.ragged && p.packed_tokens > p.batch * p.new_tokens) p.packed_tokens = p.batch * p.new_tokens;
  if (p.cache() == CacheFormat::FP8_E4M3) {
    p.k_scales = random_floats(rng, p.kv_heads, 0.002f, 0.05f);
    p.v_scales = random_floats(rng, p.kv_heads, 0.002f, 0.05f);
  }
  c.p = p;
  std::vector<std::int32_t> order(p.paged.num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.table.assign(order.begin(), order.begin() + std::size_t{p.batch} * p.paged.max_blocks);
  c.k_cache = random_cache(rng, p, p.k_scales);
  c.v_cache = random_cache(rng, p, p.v_scales);
  const std::uint64_t rows = p.input_rows() * p.head_dim;
  c.k = rounded_to_storage(random_floats(rng, rows * p.kv_heads), p.dtype);
  c.v = rounded_to_storage(random_floats(rng, rows * p.kv_heads), p.dtype);
  c.q = rounded_to_storage(random_floats(rng, rows * p.heads), p.dtype);
  if (!p.ragged) c.new_tokens.clear();
  return c;
}

struct Uploaded {
  Buffer kc, vc, k, v, table, lengths, q, new_tokens;
  Uploaded(Context& ctx, const Case& c)
      : kc(make_buffer(ctx, c.k_cache)),
        vc(make_buffer(ctx, c.v_cache)),
        k(make_float_buffer(ctx, c.k, c.p.dtype)),
        v(make_float_buffer(ctx, c.v, c.p.dtype)),
        table(make_buffer(ctx, c.table)),
        lengths(make_buffer(ctx, c.lengths)),
        q(make_float_buffer(ctx, c.q, c.p.dtype)) {
    if (c.p.ragged) new_tokens = make_buffer(ctx, c.new_tokens);
  }
  KvAppendBuffers buffers(bool with_q) const {
    return {&kc, &vc, &k, &v, &table, &lengths, with_q ? &q : nullptr, new_tokens ? &new_tokens : nullptr};
  }
};

// The reference's result of a case.
struct Expected {
  std::vector<std::uint8_t> k_cache, v_cache;
  std::vector<float> q;
  std::vector<std::int32_t> lengths;
};
Expected reference(const Case& c, bool with_q) {
  Expected e{c.k_cache, c.v_cache, c.q, c.lengths};
  std::vector<float> none;
  KvAppendHostData d{none, none, c.k, c.v, c.table, c.lengths, with_q ? std::span<float>(e.q) : std::span<float>()};
  d.k_cache_bytes = e.k_cache;
  d.v_cache_bytes = e.v_cache;
  d.new_tokens = c.new_tokens;
  if (c.p.advance_lengths) d.advanced_lengths = e.lengths;
  kv_append_reference(c.p, d);
  return e;
}

std::vector<float> decoded(const KvAppendParams& p, const std::vector<std::uint8_t>& bytes, const std::vector<float>& scales) {
  const auto rows = static_cast<std::uint32_t>(bytes.size() / cache_row_bytes(p.cache(), p.head_dim));
  std::vector<float> out(std::size_t{rows} * p.head_dim);
  decode_cache_reference({p.cache(), rows, p.kv_heads, p.head_dim, scales}, bytes, out);
  return out;
}

// A rotated key differs from the reference's by RoPE's error; after the format's rounding, by up to
// one step of the format (q8_0: of its block, fp8: of the value's binade), normalised by the largest.
double format_tolerance(CacheFormat f, DType dtype) {
  switch (f) {
    case CacheFormat::F32: return relpos::test::kRopeTolF32;
    case CacheFormat::F16: return std::max(relpos::test::kRopeTolF16, 1e-3);
    case CacheFormat::BF16: return 8e-3;
    case CacheFormat::Q8_0: return 2.0 / 127.0;
    case CacheFormat::FP8_E4M3: return 0.0625;
  }
  return dtype == DType::F16 ? relpos::test::kRopeTolF16 : relpos::test::kRopeTolF32;
}

void expect_matches(Context& ctx, const Case& c, const Uploaded& u, const Expected& want, bool with_q) {
  const KvAppendParams& p = c.p;
  const std::vector<std::uint8_t> kc = u.kc.download<std::uint8_t>(want.k_cache.size()), vc = u.vc.download<std::uint8_t>(want.v_cache.size());
  EXPECT_EQ(vc, want.v_cache) << "values are converted exactly as the host does";
  if (!p.apply_rope) EXPECT_EQ(kc, want.k_cache);
  else EXPECT_LE(normalised_error(decoded(p, kc, p.k_scales), decoded(p, want.k_cache, p.k_scales)), format_tolerance(p.cache(), p.dtype));
  if (with_q)
    EXPECT_LE(normalised_error(download_floats(u.q, want.q.size(), p.dtype), want.q),
              p.dtype == DType::F16 ? relpos::test::kRopeTolF16 : relpos::test::kRopeTolF32);
  EXPECT_EQ(u.lengths.download<std::int32_t>(p.batch), want.lengths);
  (void)ctx;
}

KvAppendParams random_params(std::mt19937& rng, int trial) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  KvAppendParams p;
  p.cache_format = kFormats[trial % 5];
  p.dtype = (trial / 5) % 2 ? DType::F16 : DType::F32;
  p.batch = pick(1, 4);
  p.kv_heads = pick(1, 3);
  p.heads = p.kv_heads * pick(1, 2);
  p.new_tokens = pick(1, 5);
  p.head_dim = *p.cache_format == CacheFormat::Q8_0 ? 32u * pick(1, 4) : 2u * pick(1, 40);
  p.paged = {.block_size = 16u * pick(1, 2), .num_blocks = 0, .max_blocks = static_cast<std::uint32_t>(pick(1, 3))};
  p.apply_rope = trial % 3 != 2;
  p.rope.style = trial % 4 ? RopeStyle::NeoX : RopeStyle::GptJ;
  if (trial % 7 == 3) p.rope.rotary_dim = 2 * pick(1, static_cast<int>(p.head_dim / 2));
  if (trial % 6 == 1) p.rope.scaling = {.type = RopeScaling::Llama3, .factor = 8.0, .original_max_position = 16};
  p.ragged = trial % 2 == 1;
  p.advance_lengths = trial % 4 >= 2;
  p.lengths_include_new = !p.advance_lengths && trial % 3 == 1;
  return p;
}

class KvAppendFormats : public GpuTest {};

TEST_F(KvAppendFormats, EveryFormatRaggedOrNotMatchesTheReference) {
  Context& ctx = gpu();
  std::mt19937 rng(4242);
  for (int trial = 0; trial < 40; ++trial) {
    const Case c = random_case(rng, random_params(rng, trial));
    const KvAppendParams& p = c.p;
    SCOPED_TRACE("trial " + std::to_string(trial) + " " + std::string(cache_format_name(p.cache())) + " " + std::string(dtype_name(p.dtype)) +
                 " B=" + std::to_string(p.batch) + " Hkv=" + std::to_string(p.kv_heads) + " D=" + std::to_string(p.head_dim) +
                 " T=" + std::to_string(p.new_tokens) + (p.ragged ? " ragged" : "") + (p.apply_rope ? " rope" : "") +
                 (p.advance_lengths ? " advance" : "") + (p.lengths_include_new ? " lengths-include-new" : ""));
    const bool with_q = p.apply_rope;
    const Expected want = reference(c, with_q);
    Uploaded u(ctx, c);
    run(ctx, [&](Recorder& r) { kv_append(r, p, u.buffers(with_q)); });
    expect_matches(ctx, c, u, want, with_q);
  }
}

// An append of `rows` (f32 or f16 values, no RoPE) into zeroed caches, by the device and by the
// reference: the encoded caches' bytes, each way.
struct AppendedBytes {
  std::vector<std::uint8_t> want_k, want_v, got_k, got_v;
};
AppendedBytes append_into_zeros(Context& ctx, const KvAppendParams& p, const std::vector<float>& rows, const std::vector<std::int32_t>& table,
                                const std::vector<std::int32_t>& lengths) {
  AppendedBytes a{std::vector<std::uint8_t>(p.cache_bytes(), 0), std::vector<std::uint8_t>(p.cache_bytes(), 0), {}, {}};
  std::vector<float> none;
  KvAppendHostData d{none, none, rows, rows, table, lengths, std::span<float>()};
  d.k_cache_bytes = a.want_k;
  d.v_cache_bytes = a.want_v;
  kv_append_reference(p, d);
  const std::vector<std::uint8_t> zeros(p.cache_bytes(), 0);
  Buffer kc = make_buffer(ctx, zeros), vc = make_buffer(ctx, zeros), k = make_float_buffer(ctx, rows, p.dtype),
         v = make_float_buffer(ctx, rows, p.dtype), tb = make_buffer(ctx, table), lb = make_buffer(ctx, lengths);
  run(ctx, [&](Recorder& r) { kv_append(r, p, {&kc, &vc, &k, &v, &tb, &lb}); });
  a.got_k = kc.download<std::uint8_t>(a.want_k.size());
  a.got_v = vc.download<std::uint8_t>(a.want_v.size());
  return a;
}

// q8_0's d = amax / 127 and 1 / d each rounded once, as ggml's float division: a d or an id one
// ulp off moves x * id across a tie. Rows of amax, ±amax / 2 (x * id a tie at 63.5 whatever amax)
// and values a hair from the other ties (amax · (2k + 1) / 254), amax over many binades (f16's from 2^-6;
// f32's from 2^-100 to 2^100, where no value is subnormal: devices may flush those), in f32 and f16
// inputs, equal the host's bytes.
TEST_F(KvAppendFormats, Q8_0RoundsTiesAsGgml) {
  Context& ctx = gpu();
  std::mt19937 rng(127);
  std::uniform_real_distribution<double> unit(0.5, 1.0);
  for (const DType dtype : {DType::F32, DType::F16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    constexpr std::uint32_t kRows = 300, D = 64;
    KvAppendParams p{.batch = kRows, .heads = 1, .kv_heads = 1, .new_tokens = 1, .head_dim = D, .dtype = dtype};
    p.paged = {.block_size = 16, .num_blocks = kRows, .max_blocks = 1};
    p.cache_format = CacheFormat::Q8_0;
    std::vector<float> rows(std::size_t{kRows} * D);
    for (std::uint32_t r = 0; r < kRows; ++r)
      for (std::uint32_t blk = 0; blk < D / 32; ++blk) {
        const int binade = dtype == DType::F16 ? static_cast<int>(r % 20) - 5 : static_cast<int>(r % 201) - 100;
        const float amax = rounded_to_storage(std::vector<float>{static_cast<float>(std::ldexp(unit(rng), binade))}, dtype)[0];
        float* x = rows.data() + std::size_t{r} * D + blk * 32;
        x[0] = r % 2 ? -amax : amax;
        x[1] = amax / 2;
        x[2] = -amax / 2;
        for (std::uint32_t j = 3; j < 32; ++j) {
          const double k = static_cast<double>(j % 127);
          x[j] = static_cast<float>((j % 2 ? 1.0 : -1.0) * static_cast<double>(amax) * (2.0 * k + 1.0) / 254.0);
        }
        const std::vector<float> stored = rounded_to_storage(std::vector<float>(x, x + 32), dtype);
        std::copy(stored.begin(), stored.end(), x);
      }
    std::vector<std::int32_t> table(kRows), lengths(kRows, 0);
    std::iota(table.begin(), table.end(), 0);
    const AppendedBytes a = append_into_zeros(ctx, p, rows, table, lengths);
    const std::vector<std::uint8_t>& got = a.got_k;
    const std::vector<std::uint8_t>& want_k = a.want_k;
    std::size_t differ = 0, first = got.size();
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != want_k[i]) first = std::min(first, i), ++differ;
    EXPECT_EQ(differ, 0u) << "bytes differ from the host's, the first at byte " << first;
    EXPECT_EQ(a.got_v, a.want_v);
  }
}

// fp8's encoder on the device at its edges, which random rows seldom reach: ties (to even),
// values past 448 (saturated to ±448, never NaN), subnormals and NaN, each equal to the host's
// bytes (CacheFormat.Fp8IsTheNearestCodeTiesToEvenSaturating checks the host's own).
TEST_F(KvAppendFormats, Fp8EncoderOnTiesAndSaturation) {
  Context& ctx = gpu();
  const float edges[] = {1.0625f, 1.1875f, -1.0625f, -1.1875f, 0x1p-10f, 3 * 0x1p-10f, -5 * 0x1p-10f, 0x1p-9f * 1.5f,
                         448.0f, 460.0f, 464.0f, 480.0f, -1000.0f, 1e30f, -INFINITY, INFINITY, std::nanf(""), 3.25f, 13.0f,
                         0.0f, -0.0f, 240.0f, 232.0f, 0x1p-6f * 1.0625f};
  constexpr std::uint32_t D = 32, T = 3;
  KvAppendParams p{.batch = 2, .heads = 1, .kv_heads = 1, .new_tokens = T, .head_dim = D};
  p.paged = {.block_size = 16, .num_blocks = 2, .max_blocks = 1};
  p.cache_format = CacheFormat::FP8_E4M3;
  p.k_scales = {1.0f};
  p.v_scales = {0.5f};  // the same edges at twice the value, through 1 / scale
  std::vector<float> rows(std::size_t{p.batch} * T * D);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = edges[i % std::size(edges)] * (i / std::size(edges) % 2 ? -1.0f : 1.0f);
  const AppendedBytes a = append_into_zeros(ctx, p, rows, {1, 0}, {0, 5});
  EXPECT_EQ(a.got_k, a.want_k);
  EXPECT_EQ(a.got_v, a.want_v);
}

// q8_0's encoder on blocks holding a NaN or an infinity (ggml leaves them undefined): d = NaN or
// +inf and q = 0, and on blocks whose d is subnormal (q = 0), equal to the host's bytes
// (CacheFormat.Q8_0IsGgmlsBlock checks the host's own), beside finite blocks.
TEST_F(KvAppendFormats, Q8EncoderOnNonFiniteBlocks) {
  Context& ctx = gpu();
  constexpr std::uint32_t D = 64, T = 3;
  KvAppendParams p{.batch = 2, .heads = 1, .kv_heads = 1, .new_tokens = T, .head_dim = D};
  p.paged = {.block_size = 16, .num_blocks = 2, .max_blocks = 1};
  p.cache_format = CacheFormat::Q8_0;
  std::mt19937 rng(7);
  std::vector<float> rows = relpos::test::random_floats(rng, std::size_t{p.batch} * T * D, -3.0f, 3.0f);
  const float specials[] = {std::nanf(""), INFINITY, -INFINITY, -std::nanf("")};
  for (std::size_t blk = 0; blk < rows.size() / 32; ++blk)
    if (blk % 3 != 2) rows[blk * 32 + blk % 32] = specials[blk % std::size(specials)];  // every third block finite
  rows[4 * 32 + 7] = INFINITY;  // beside block 4's NaN: NaN
  for (std::size_t i = 0; i < 32; ++i) rows[2 * 32 + i] = (i % 2 ? -1e-38f : 3e-38f) * static_cast<float>(i % 5 + 1);  // d subnormal: q = 0
  for (std::size_t i = 0; i < 32; ++i) rows[8 * 32 + i] = (i % 2 ? -2e-36f : 7e-36f) * static_cast<float>(i % 5 + 1);  // d normal, tiny
  const AppendedBytes a = append_into_zeros(ctx, p, rows, {1, 0}, {0, 5});
  EXPECT_EQ(a.got_k, a.want_k);
  EXPECT_EQ(a.got_v, a.want_v);
}

// More sequences than the device's workgroup rows a dispatch (maxComputeWorkGroupCount lowered to
// 3): the batch takes several dispatches, ragged rows summed over every earlier sequence, lengths
// advanced past the first 3 workgroups of 64 sequences (before, such a batch was refused).
TEST_F(KvAppendFormats, BatchesPastTheWorkgroupCountTakeSeveralDispatches) {
  Context& ctx = relpos::test::gpu_few_workgroups();
  std::mt19937 rng(3);
  for (int trial = 0; trial < 10; ++trial) {
    KvAppendParams p = random_params(rng, trial);
    p.batch = trial < 8 ? 7 + static_cast<std::uint32_t>(trial % 3) : 200;
    if (trial >= 8) {  // 200 sequences: 4 dispatches of the lengths' advance
      p.advance_lengths = true;
      p.lengths_include_new = false;
      p.kv_heads = p.heads = 1;
      p.paged.max_blocks = 1;
    }
    p.new_tokens = std::min<std::uint32_t>(p.new_tokens, 3);  // rows within 3 workgroups of 64
    const Case c = random_case(rng, p);
    SCOPED_TRACE("trial " + std::to_string(trial) + " " + std::string(cache_format_name(c.p.cache())) + " B=" + std::to_string(c.p.batch) +
                 (c.p.ragged ? " ragged" : "") + (c.p.advance_lengths ? " advance" : ""));
    const bool with_q = c.p.apply_rope;
    const Expected want = reference(c, with_q);
    Uploaded u(ctx, c);
    run(ctx, [&](Recorder& r) { kv_append(r, c.p, u.buffers(with_q)); });
    expect_matches(ctx, c, u, want, with_q);
  }
}

// A plan's steps: the free function's bytes, and nothing created after the first step.
TEST_F(KvAppendFormats, PlanEqualsTheFreeFunctionAndCreatesNothing) {
  Context& ctx = gpu();
  std::mt19937 rng(77);
  for (int trial = 0; trial < 10; ++trial) {
    KvAppendParams p = random_params(rng, trial);
    Case c = random_case(rng, p);
    KvAppendPlan plan(ctx, c.p);
    Recorder r(ctx);
    for (int step = 0; step < 4; ++step) {
      if (step > 0) c = [&] {  // new lengths, tokens and inputs with the plan's params
        Case n = random_case(rng, p);
        n.p = c.p;
        n.k_cache = c.k_cache;
        n.v_cache = c.v_cache;
        if (p.ragged) {  // counts whose sum fits the plan's packed rows
          std::int32_t left = static_cast<std::int32_t>(c.p.packed_tokens);
          for (auto& t : n.new_tokens) left -= (t = std::min(t, left));
        }
        n.k.resize(c.k.size());
        n.v.resize(c.v.size());
        n.q.resize(c.q.size());
        return n;
      }();
      Uploaded by_plan(ctx, c), by_free(ctx, c);
      const ResourceCounts before = resource_counts(ctx);
      plan.record(r, by_plan.buffers(c.p.apply_rope));
      r.submit_and_wait();
      if (step > 0) EXPECT_EQ(resource_counts(ctx).objects(), before.objects()) << "step " << step << " created Vulkan objects";
      run(ctx, [&](Recorder& fr) { kv_append(fr, c.p, by_free.buffers(c.p.apply_rope)); });
      ASSERT_EQ(by_plan.kc.download<std::uint8_t>(c.k_cache.size()), by_free.kc.download<std::uint8_t>(c.k_cache.size())) << trial;
      ASSERT_EQ(by_plan.vc.download<std::uint8_t>(c.v_cache.size()), by_free.vc.download<std::uint8_t>(c.v_cache.size())) << trial;
      ASSERT_EQ(by_plan.lengths.download<std::int32_t>(p.batch), by_free.lengths.download<std::int32_t>(p.batch));
      expect_matches(ctx, c, by_plan, reference(c, c.p.apply_rope), c.p.apply_rope);
    }
  }
}

TEST_F(KvAppendFormats, BadInputIsRefusedBeforeRecording) {
  Context& ctx = gpu();
  std::mt19937 rng(9);
  KvAppendParams p{.batch = 2, .heads = 2, .kv_heads = 2, .new_tokens = 3, .head_dim = 64};
  p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 2};
  p.cache_format = CacheFormat::FP8_E4M3;
  p.ragged = true;
  const Case c = random_case(rng, p);
  auto bad = c.p;
  bad.k_scales = {1.0f};
  expect_invalid([&] { bad.validate(); }, "k_scales");
  bad = c.p;
  bad.v_scales[1] = std::nanf("");
  expect_invalid([&] { bad.validate(); }, "v_scales[1]");
  bad = c.p;
  bad.k_scales[0] = INFINITY;
  expect_invalid([&] { bad.validate(); }, "k_scales[0]");
  bad.k_scales[0] = 1e-45f;  // a denormal: 1 / scale overflows; the message shows the value, not 0.000000
  expect_invalid([&] { bad.validate(); }, "k_scales[0] = 1.40129846e-45");
  bad = c.p;
  bad.cache_format = CacheFormat::Q8_0;
  bad.head_dim = 48;
  bad.k_scales.clear();
  bad.v_scales.clear();
  expect_invalid([&] { bad.validate(); }, "multiple of 32");
  bad = c.p;
  bad.cache_format = CacheFormat::BF16;  // scales with a format that has none
  expect_invalid([&] { bad.validate(); }, "only fp8_e4m3");
  bad = c.p;
  bad.packed_tokens = 7;
  expect_invalid([&] { bad.validate(); }, "packed_tokens");
  bad = c.p;
  bad.new_tokens = bad.capacity() + 1;  // more than a sequence's blocks hold
  expect_invalid([&] { bad.validate(); }, "new_tokens = 33: must be <= max_blocks * block_size = 32");
  // Host-side counts: negative, past new_tokens, summing past packed_tokens; a sequence's length.
  expect_invalid([&] { check_append_table(c.p, c.table, c.lengths, std::vector<std::int32_t>{-1, 0}); }, "new_tokens[0]");
  expect_invalid([&] { check_append_table(c.p, c.table, c.lengths, std::vector<std::int32_t>{0, 4}); }, "new_tokens[1]");
  expect_invalid([&] { check_append_table(c.p, c.table, c.lengths, std::vector<std::int32_t>{3, 3, 3}); }, "batch = 2");
  expect_invalid([&] { check_append_table(c.p, c.table, std::vector<std::int32_t>{31, 0}, std::vector<std::int32_t>{2, 0}); }, "cache_lengths[0]");
  // A later sequence's own row and length are named, not the first's.
  expect_invalid([&] { check_append_table(c.p, std::vector<std::int32_t>{0, 0, 0, -1}, std::vector<std::int32_t>{0, 16}, std::vector<std::int32_t>{0, 2}); },
                 "block_table[1][1]");
  expect_invalid([&] { check_append_table(c.p, c.table, std::vector<std::int32_t>{0, 31}, std::vector<std::int32_t>{0, 2}); }, "cache_lengths[1]");
  bad = c.p;
  bad.lengths_include_new = true;
  expect_invalid([&] { check_append_table(bad, c.table, std::vector<std::int32_t>{1, 0}, std::vector<std::int32_t>{2, 0}); }, "cache_lengths[0]");
  bad.advance_lengths = true;
  expect_invalid([&] { bad.validate(); }, "lengths_include_new");
  if (c.p.packed_tokens < 6)
    expect_invalid([&] { check_append_table(c.p, c.table, std::vector<std::int32_t>{0, 0}, std::vector<std::int32_t>{3, 3}); }, "packed_tokens");
  Uploaded u(ctx, c);
  Recorder r(ctx);
  KvAppendBuffers b = u.buffers(false);
  b.new_tokens = nullptr;
  expect_invalid([&] { kv_append(r, c.p, b); }, "new_tokens buffer");
  Buffer small(ctx, 4);
  b = u.buffers(false);
  b.k = &small;
  expect_invalid([&] { kv_append(r, c.p, b); }, "[packed_tokens, kv_heads, head_dim]");
  KvAppendParams uniform = c.p;
  uniform.ragged = false;
  expect_invalid([&] { kv_append(r, uniform, u.buffers(false)); }, "new_tokens buffer");
  EXPECT_EQ(r.dispatch_count(), 0u);
}

}  // namespace

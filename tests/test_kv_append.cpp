// kv_append: the reference against rope_reference and the table's layout; the GPU against the
// reference over dtypes, RoPE styles and scalings, partial rotary dims, grouped-query heads, block
// sizes and step lengths, the rest of the cache untouched; bad tables refused on the host and not
// written on the device; and a 64-step decode of 3 sequences of different lengths, each step
// kv_append (q, k, v) + paged attention recorded into the application's command buffer, the caches
// two views at offsets into one application VkBuffer, against the CPU reference of the same steps.
#include <relpos/relpos.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "support/app_vulkan.hpp"
#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"
#include "support/tolerance.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::kAppBufferUsage;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

// Rotated keys and queries: RoPE's bounds (tests/support/tolerance.hpp). Values copied (v,
// pass-through features) are exact.
constexpr double kTolF32 = relpos::test::kRopeTolF32;
constexpr double kTolF16 = relpos::test::kRopeTolF16;

struct AppendCase {
  KvAppendParams p;
  std::vector<float> k_cache, v_cache, k, v, q;
  std::vector<std::int32_t> table, lengths;
};

// Each sequence's blocks in a shuffled order over the whole table; caches random (earlier steps).
AppendCase random_case(std::mt19937& rng, KvAppendParams p, const std::vector<std::int32_t>& lengths) {
  AppendCase c;
  p.paged.num_blocks = p.batch * p.paged.max_blocks + 2;
  c.p = p;
  std::vector<std::int32_t> order(p.paged.num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.table.assign(order.begin(), order.begin() + std::size_t{p.batch} * p.paged.max_blocks);
  c.lengths = lengths;
  const std::size_t cache = p.paged.cache_elements(p.kv_heads, p.head_dim), rows = std::size_t{p.batch} * p.new_tokens * p.head_dim;
  c.k_cache = rounded_to_storage(random_floats(rng, cache), p.dtype);
  c.v_cache = rounded_to_storage(random_floats(rng, cache), p.dtype);
  c.k = rounded_to_storage(random_floats(rng, rows * p.kv_heads), p.dtype);
  c.v = rounded_to_storage(random_floats(rng, rows * p.kv_heads), p.dtype);
  c.q = rounded_to_storage(random_floats(rng, rows * p.heads), p.dtype);
  return c;
}

TEST(KvAppendReference, RotatesAsRopeAndPlacesRowsByTheTable) {
  KvAppendParams p{.batch = 2, .heads = 2, .kv_heads = 1, .new_tokens = 3, .head_dim = 8, .apply_rope = true};
  p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 2};
  std::mt19937 rng(3);
  AppendCase c = random_case(rng, p, {14, 0});
  std::vector<float> kc = c.k_cache, vc = c.v_cache, q = c.q;
  kv_append_reference(c.p, {kc, vc, c.k, c.v, c.table, c.lengths, q});
  std::vector<float> k = c.k, q_want = c.q;
  const std::vector<std::int32_t> positions = {14, 15, 16, 0, 1, 2};
  rope_reference(c.p.rope_params(1), k, positions);
  rope_reference(c.p.rope_params(2), q_want, positions);
  EXPECT_EQ(q, q_want);
  // Key t of sequence b at position L + t: block table[b][pos / 16], row pos % 16.
  std::size_t changed = 0;
  for (std::uint32_t b = 0; b < 2; ++b)
    for (std::uint32_t t = 0; t < 3; ++t) {
      const std::int32_t pos = c.lengths[b] + static_cast<std::int32_t>(t);
      const std::size_t at = (static_cast<std::size_t>(c.table[b * 2 + pos / 16]) * 16 + pos % 16) * 8;
      EXPECT_TRUE(std::equal(kc.begin() + at, kc.begin() + at + 8, k.begin() + (b * 3 + t) * 8));
      EXPECT_TRUE(std::equal(vc.begin() + at, vc.begin() + at + 8, c.v.begin() + (b * 3 + t) * 8));
    }
  for (std::size_t e = 0; e < kc.size(); ++e) changed += kc[e] != c.k_cache[e];
  EXPECT_LE(changed, 6u * 8u);
}

TEST(KvAppendReference, BadTablesNameTheSequenceAndEntry) {
  KvAppendParams p{.batch = 2, .kv_heads = 1, .new_tokens = 2, .head_dim = 8};
  p.paged = {.block_size = 16, .num_blocks = 4, .max_blocks = 2};
  EXPECT_NO_THROW(check_append_table(p, std::vector<std::int32_t>{0, 1, 2, -9}, std::vector<std::int32_t>{15, 3}));
  expect_invalid([&] { check_append_table(p, std::vector<std::int32_t>{0, 7, 2, 3}, std::vector<std::int32_t>{15, 3}); }, "block_table[0][1]");
  expect_invalid([&] { check_append_table(p, std::vector<std::int32_t>{0, 1, -1, 3}, std::vector<std::int32_t>{15, 3}); }, "block_table[1][0]");
  expect_invalid([&] { check_append_table(p, std::vector<std::int32_t>{0, 1, 2, 3}, std::vector<std::int32_t>{31, 3}); }, "cache_lengths[0]");
  expect_invalid([&] { check_append_table(p, std::vector<std::int32_t>{0, 1, 2, 3}, std::vector<std::int32_t>{1, -2}); }, "cache_lengths[1]");
  auto huge = p;  // the params themselves first: new_tokens past int32 wrapped in the length checks
  huge.new_tokens = 0xffffffffu;
  expect_invalid([&] { check_append_table(huge, std::vector<std::int32_t>{0, 1, 2, 3}, std::vector<std::int32_t>{1, 3}); }, "new_tokens = 4294967295");
  {  // the reference's inputs, each named with what its size is made of
    std::vector<float> kc(p.paged.cache_elements(p.kv_heads, p.head_dim)), vc(kc), k(2 * 2 * 8), v(k), wrong(5);
    const std::vector<std::int32_t> table{0, 1, 2, 3}, lengths{1, 3};
    expect_invalid([&] { kv_append_reference(p, {kc, vc, wrong, v, table, lengths, {}}); },
                   "k = 5 values: must be exactly batch * new_tokens * kv_heads * head_dim = 32");
    auto ragged = p;
    ragged.ragged = true;
    ragged.packed_tokens = 3;
    const std::vector<std::int32_t> counts{2, 1};
    KvAppendHostData d{kc, vc, k, v, table, lengths, {}};
    d.new_tokens = counts;
    expect_invalid([&] { kv_append_reference(ragged, d); }, "k = 32 values: must be exactly packed_tokens * kv_heads * head_dim = 24");
  }
  auto bad = p;
  // Ragged, every workgroup sums the earlier sequences' counts: a batch past the packed bound made
  // that loop grow past an invocation's (lavapipe ends it early, leaving rows at wrong places).
  bad.ragged = true;
  bad.packed_tokens = 1;
  bad.batch = AttentionParams::kMaxPackedBatch;
  bad.paged.num_blocks = 1;
  EXPECT_NO_THROW(bad.validate());
  bad.batch = AttentionParams::kMaxPackedBatch + 1;
  expect_invalid([&] { bad.validate(); }, "batch = 4097: must be <= 4096 with ragged new_tokens");
  bad.ragged = false;
  EXPECT_NO_THROW(bad.validate());
  bad = p;
  bad.paged.block_size = 20;
  expect_invalid([&] { bad.validate(); }, "paged.block_size");
  bad = p;
  bad.head_dim = 7;
  expect_invalid([&] { bad.validate(); }, "head_dim");
  bad = p;
  bad.heads = 3;
  bad.kv_heads = 2;
  expect_invalid([&] { bad.validate(); }, "heads");
}

class KvAppendGpu : public GpuTest {};

struct Uploaded {
  Buffer kc, vc, k, v, table, lengths, q;
  Uploaded(Context& ctx, const AppendCase& c)
      : kc(make_float_buffer(ctx, c.k_cache, c.p.dtype)),
        vc(make_float_buffer(ctx, c.v_cache, c.p.dtype)),
        k(make_float_buffer(ctx, c.k, c.p.dtype)),
        v(make_float_buffer(ctx, c.v, c.p.dtype)),
        table(make_buffer(ctx, c.table)),
        lengths(make_buffer(ctx, c.lengths)),
        q(make_float_buffer(ctx, c.q, c.p.dtype)) {}
  KvAppendBuffers buffers(bool with_q) const { return {&kc, &vc, &k, &v, &table, &lengths, with_q ? &q : nullptr}; }
};

TEST_F(KvAppendGpu, MatchesReference) {
  Context& ctx = gpu();
  std::mt19937 rng(2031);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 24; ++trial) {
    KvAppendParams p;
    p.dtype = trial % 2 ? DType::F16 : DType::F32;
    p.batch = pick(1, 3);
    p.kv_heads = pick(1, 2);
    p.heads = p.kv_heads * pick(1, 3);
    p.new_tokens = pick(1, 5);
    p.head_dim = 2 * pick(2, 36);
    p.paged = {.block_size = 16u * pick(1, 3), .num_blocks = 0, .max_blocks = static_cast<std::uint32_t>(pick(1, 3))};
    if (p.new_tokens > p.capacity()) p.new_tokens = p.capacity();
    p.apply_rope = trial % 4 != 3;
    p.rope.style = trial % 3 ? RopeStyle::NeoX : RopeStyle::GptJ;
    if (trial % 5 == 1) p.rope.rotary_dim = 2 * pick(1, static_cast<int>(p.head_dim / 2));
    if (trial % 6 == 2) p.rope.scaling = {.type = RopeScaling::Llama3, .factor = 8.0, .original_max_position = 16};
    if (trial % 6 == 4) p.rope.scaling = {.type = RopeScaling::Yarn, .factor = 4.0, .original_max_position = 32};
    if (trial % 6 == 5) {  // LongRoPE: trial 5 long factors, 17 short (positions are a buffer: the length is given)
      p.rope.scaling = {.type = RopeScaling::LongRope, .factor = 32.0, .original_max_position = 24, .seq_len = trial == 5 ? 25u : 24u};
      for (std::uint32_t k = 0; k < p.rope_params(p.heads).rot_dim() / 2; ++k) {
        p.rope.scaling.long_factor.push_back(1.0f + 0.5f * static_cast<float>(k));
        p.rope.scaling.short_factor.push_back(1.0f + 0.01f * static_cast<float>(k));
      }
    }
    std::vector<std::int32_t> lengths;
    for (std::uint32_t b = 0; b < p.batch; ++b) lengths.push_back(pick(0, static_cast<int>(p.capacity() - p.new_tokens)));
    const AppendCase c = random_case(rng, p, lengths);
    SCOPED_TRACE("trial " + std::to_string(trial) + " D=" + std::to_string(p.head_dim) + " T=" + std::to_string(p.new_tokens) +
                 " bs=" + std::to_string(p.paged.block_size) + (p.apply_rope ? " rope" : ""));
    std::vector<float> kc = c.k_cache, vc = c.v_cache, q = c.q;
    kv_append_reference(c.p, {kc, vc, c.k, c.v, c.table, c.lengths, p.apply_rope ? std::span<float>(q) : std::span<float>()});
    Uploaded u(ctx, c);
    run(ctx, [&](Recorder& r) { kv_append(r, c.p, u.buffers(p.apply_rope)); });
    const double tol = p.dtype == DType::F16 ? kTolF16 : kTolF32;
    EXPECT_EQ(download_floats(u.vc, vc.size(), p.dtype), vc);
    EXPECT_LE(normalised_error(download_floats(u.kc, kc.size(), p.dtype), kc), tol);
    EXPECT_LE(normalised_error(download_floats(u.q, q.size(), p.dtype), q), tol);
    if (!p.apply_rope) EXPECT_EQ(download_floats(u.kc, kc.size(), p.dtype), kc);
  }
}

// Entries and lengths the host never checked: the keys that would land outside the cache or past
// the table's capacity are not written, the others are.
TEST_F(KvAppendGpu, DeviceTableOutsideTheCacheWritesNothingThere) {
  Context& ctx = gpu();
  std::mt19937 rng(2032);
  KvAppendParams p{.batch = 3, .kv_heads = 1, .new_tokens = 2, .head_dim = 8};
  p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 2};
  AppendCase c = random_case(rng, p, {15, 4, 31});  // sequence 2's second key lies past the capacity
  c.table[0 * 2 + 1] = 1'000'000;  // sequence 0's second key lands in its block 1
  std::vector<float> kc = c.k_cache, vc = c.v_cache;
  AppendCase valid = c;
  valid.p.batch = 1;  // sequence 1 alone is valid: what the reference writes for it
  valid.table = {c.table[2], c.table[3]};
  valid.lengths = {4};
  valid.k.assign(c.k.begin() + 16, c.k.begin() + 32);
  valid.v.assign(c.v.begin() + 16, c.v.begin() + 32);
  kv_append_reference(valid.p, {kc, vc, valid.k, valid.v, valid.table, valid.lengths, {}});
  const auto place = [&](std::uint32_t b, std::int32_t pos, std::size_t t) {  // the keys that are still written
    const std::size_t at = (static_cast<std::size_t>(c.table[b * 2 + pos / 16]) * 16 + pos % 16) * 8;
    std::copy_n(c.k.begin() + (b * 2 + t) * 8, 8, kc.begin() + at);
    std::copy_n(c.v.begin() + (b * 2 + t) * 8, 8, vc.begin() + at);
  };
  place(0, 15, 0);
  place(2, 31, 0);
  expect_invalid([&] { check_append_table(c.p, c.table, c.lengths); }, "block_table[0][1]");
  Uploaded u(ctx, c);
  run(ctx, [&](Recorder& r) { kv_append(r, c.p, u.buffers(false)); });
  EXPECT_EQ(u.kc.download<float>(kc.size()), kc);
  EXPECT_EQ(u.vc.download<float>(vc.size()), vc);
}

// Lengths advanced on the device saturate at INT32_MAX: a length the host never checked that
// would pass it stays there (it had wrapped negative, which the attention after it clamps to an
// empty sequence). Keys past the capacity are not written, whatever the length.
TEST_F(KvAppendGpu, AdvancedLengthsSaturateAtInt32Max) {
  Context& ctx = gpu();
  std::mt19937 rng(2033);
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  KvAppendParams p{.batch = 4, .kv_heads = 1, .new_tokens = 3, .head_dim = 8, .advance_lengths = true};
  p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 1};
  const AppendCase c = random_case(rng, p, {kMax, kMax - 1, kMax - 3, 5});
  std::vector<float> kc = c.k_cache, vc = c.v_cache;
  AppendCase valid = c;  // sequence 3 alone is valid: what the reference writes for it
  valid.p.batch = 1;
  valid.p.advance_lengths = false;
  valid.table = {c.table[3]};
  valid.lengths = {5};
  valid.k.assign(c.k.begin() + 3 * 24, c.k.end());
  valid.v.assign(c.v.begin() + 3 * 24, c.v.end());
  kv_append_reference(valid.p, {kc, vc, valid.k, valid.v, valid.table, valid.lengths, {}});
  Uploaded u(ctx, c);
  run(ctx, [&](Recorder& r) { kv_append(r, c.p, u.buffers(false)); });
  EXPECT_EQ(u.lengths.download<std::int32_t>(4), (std::vector<std::int32_t>{kMax, kMax, kMax, 8}));
  EXPECT_EQ(u.kc.download<float>(kc.size()), kc);
  EXPECT_EQ(u.vc.download<float>(vc.size()), vc);
}

TEST_F(KvAppendGpu, MismatchedBuffersAreRefusedBeforeRecording) {
  Context& ctx = gpu();
  std::mt19937 rng(5);
  KvAppendParams p{.batch = 2, .heads = 2, .kv_heads = 1, .new_tokens = 1, .head_dim = 8};
  p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 2};
  const AppendCase c = random_case(rng, p, {1, 2});
  Uploaded u(ctx, c);
  Buffer small(ctx, 4);
  Recorder r(ctx);
  auto with = [&](auto change) {
    KvAppendBuffers b = u.buffers(false);
    change(b);
    return [&, b] { kv_append(r, c.p, b); };
  };
  expect_invalid(with([&](KvAppendBuffers& b) { b.k_cache = &small; }), "k_cache buffer");
  expect_invalid(with([&](KvAppendBuffers& b) { b.v = &small; }), "v buffer");
  expect_invalid(with([&](KvAppendBuffers& b) { b.block_table = nullptr; }), "block_table buffer");
  expect_invalid(with([&](KvAppendBuffers& b) { b.q = &u.q; }), "q buffer");  // q without apply_rope
}

// Views into one application buffer at aligned offsets: uploads, downloads, dispatches and
// transfer copies see the view, not the buffer's beginning; an unaligned offset is refused.
TEST(KvAppendViews, ExternalBuffersAtOffsets) {
  relpos::test::AppVulkan app;
  ContextOptions options;
  options.tuning.distance_expansion = DistanceExpansion::Copies;  // the bias below by transfer copies
  Context ctx(app.adopted(), options);
  const std::uint64_t align = std::max<std::uint64_t>(ctx.limits().min_storage_buffer_offset_alignment, 4);
  const std::uint64_t step = (64 + align - 1) / align * align;  // views of 64 bytes, apart
  VkBuffer whole = app.make_buffer(3 * step, kAppBufferUsage);
  Buffer a = Buffer::external(ctx, whole, 64, kAppBufferUsage, step), b = Buffer::external(ctx, whole, 64, kAppBufferUsage, 2 * step);
  EXPECT_EQ(a.offset(), step);
  const std::vector<float> ones(16, 1.0f), twos(16, 2.0f);
  a.upload(std::span<const float>(ones));
  b.upload(std::span<const float>(twos));
  EXPECT_EQ(a.download<float>(16), ones);
  EXPECT_EQ(b.download<float>(16), twos);
  if (align > 4) expect_invalid([&] { (void)Buffer::external(ctx, whole, 64, kAppBufferUsage, 4); }, "offset");
  // A bias written into view b by transfer copies lands in b, leaving a as it was.
  T5Params t5;
  t5.queries = 4;
  t5.keys = 4;
  t5.heads = 1;
  std::vector<float> table(32);
  for (std::size_t k = 0; k < table.size(); ++k) table[k] = 0.25f * static_cast<float>(k);
  Buffer t = make_buffer(ctx, table);
  run(ctx, [&](Recorder& r) { t5_bias(r, t5, t, b); });
  EXPECT_EQ(b.download<float>(16), t5_bias_reference(t5, table));
  EXPECT_EQ(a.download<float>(16), ones);
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

// An engine's decode loop: 3 sequences of 3, 17 and 40 tokens gain one token per step for 64
// steps; each step rotates its queries and keys, appends keys and values and runs paged attention,
// all recorded into the application's command buffer; the caches are views into one VkBuffer.
TEST(KvAppendDecode, SixtyFourStepsOfThreeSequences) {
  relpos::test::AppVulkan app;
  Context ctx(app.adopted());
  std::mt19937 rng(64);
  KvAppendParams ap{.batch = 3, .heads = 4, .kv_heads = 2, .new_tokens = 1, .head_dim = 32, .apply_rope = true};
  ap.rope.scaling = {.type = RopeScaling::Llama3, .factor = 8.0, .original_max_position = 64};
  ap.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 7};  // 112 keys: 40 + 64 fit
  std::vector<std::int32_t> lengths = {3, 17, 40};
  AppendCase c = random_case(rng, ap, lengths);
  ap = c.p;
  AttentionParams att{.batch = 3, .heads = 4, .kv_heads = 2, .queries = 1, .keys = ap.capacity(), .head_dim = 32, .scale = 1.0f,
                      .causal = true, .bias = AttentionBias::T5};
  att.t5.bidirectional = false;
  att.paged = ap.paged;
  const std::vector<float> t5_table = random_floats(rng, std::size_t{att.t5.num_buckets} * att.heads, -1.0f, 1.0f);

  const std::uint64_t align = std::max<std::uint64_t>(ctx.limits().min_storage_buffer_offset_alignment, 16);
  const std::uint64_t cache_bytes = c.k_cache.size() * 4, v_at = (cache_bytes + align - 1) / align * align;
  VkBuffer app_cache = app.make_buffer(v_at + cache_bytes, kAppBufferUsage);
  Buffer kc = Buffer::external(ctx, app_cache, cache_bytes, kAppBufferUsage, 0), vc = Buffer::external(ctx, app_cache, cache_bytes, kAppBufferUsage, v_at);
  kc.upload(std::span<const float>(c.k_cache));
  vc.upload(std::span<const float>(c.v_cache));
  Buffer table = make_buffer(ctx, c.table), before(ctx, 12), after(ctx, 12), t5 = make_buffer(ctx, t5_table);
  Buffer q(ctx, 3 * 4 * 32 * 4), k(ctx, 3 * 2 * 32 * 4), v(ctx, 3 * 2 * 32 * 4), out(ctx, 3 * 4 * 32 * 4), lse(ctx, 3 * 4 * 4);

  std::vector<float> kc_ref = c.k_cache, vc_ref = c.v_cache;
  double worst = 0.0;
  for (int step = 0; step < 64; ++step) {
    std::vector<float> q_host = random_floats(rng, 3 * 4 * 32), k_host = random_floats(rng, 3 * 2 * 32), v_host = random_floats(rng, 3 * 2 * 32);
    std::vector<std::int32_t> next = lengths;
    for (auto& L : next) ++L;
    before.upload(std::span<const std::int32_t>(lengths));
    after.upload(std::span<const std::int32_t>(next));
    q.upload(std::span<const float>(q_host));
    k.upload(std::span<const float>(k_host));
    v.upload(std::span<const float>(v_host));
    VkCommandBuffer cb = app.begin_command_buffer();
    {
      Recorder rec(ctx, cb);
      kv_append(rec, ap, {&kc, &vc, &k, &v, &table, &before, &q});
      AttentionBuffers ab{&q, &kc, &vc, &out, &lse, &t5};
      ab.block_table = &table;
      ab.cache_lengths = &after;
      attention(rec, att, ab);
      rec.release(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    }
    app.submit_and_wait(cb);

    kv_append_reference(ap, {kc_ref, vc_ref, k_host, v_host, c.table, lengths, q_host});
    const AttentionResult want =
        attention_reference(att, {q_host, kc_ref, vc_ref, t5_table, {}, {}, {}, c.table, next});
    const double e = normalised_error(out.download<float>(3 * 4 * 32), want.out);
    worst = std::max(worst, e);
    ASSERT_LE(e, 1e-4) << "step " << step;
    lengths = next;
  }
  EXPECT_LE(normalised_error(kc.download<float>(kc_ref.size()), kc_ref), kTolF32);
  EXPECT_EQ(vc.download<float>(vc_ref.size()), vc_ref);
  ctx.wait_idle();
  EXPECT_EQ(app.take_messages(), std::vector<std::string>{});
}

}  // namespace

// The API as an engine may misuse it (found by a new-user trial of the C++ API, and an adversarial
// one): buffers of another Context, a Context moved after its plans were built, inputs the chosen
// mode does not read, one buffer for both caches, parameters whose message must name what is wrong,
// enum values past their type's list, objects used after they were moved from. Each is an
// InvalidArgument naming the parameter before anything is recorded, never a crash. (A Recorder
// whose Context was moved or destroyed is no misuse: it records on, as buffers and plans do.)
#include <relpos/attention_plan.hpp>
#include <relpos/bias_plan.hpp>
#include <relpos/relpos.hpp>

#include <chrono>
#include <limits>
#include <random>
#include <string>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::kAppBufferUsage;
using relpos::test::random_floats;

namespace {

class ApiMisuse : public GpuTest {};

Buffer floats(Context& ctx, std::size_t n, std::mt19937& rng) { return make_buffer(ctx, random_floats(rng, n)); }

// A decoding step of 4 heads on 2 kv heads over 40 keys, D = 8, and its buffers on `ctx`.
struct Attention {
  AttentionParams p{.heads = 4, .kv_heads = 2, .queries = 1, .keys = 40, .head_dim = 8, .query_offset = 39, .causal = true};
  Buffer q, k, v, out;
  Attention(Context& ctx, std::mt19937& rng)
      : q(floats(ctx, 4 * 8, rng)), k(floats(ctx, 2 * 40 * 8, rng)), v(floats(ctx, 2 * 40 * 8, rng)), out(ctx, 4 * 8 * 4) {}
  AttentionBuffers buffers() const { return {&q, &k, &v, &out}; }
};

// A paged cache of 2 blocks of 16 keys, one sequence of 3 keys gaining 1.
struct Append {
  KvAppendParams p;
  Buffer k_cache, v_cache, k, v, table, lengths;
  Append(Context& ctx, std::mt19937& rng)
      : p([] {
          KvAppendParams p;
          p.head_dim = 8;
          p.paged = {.block_size = 16, .num_blocks = 2, .max_blocks = 2};
          return p;
        }()),
        k_cache(ctx, p.cache_bytes()), v_cache(ctx, p.cache_bytes()), k(floats(ctx, 8, rng)), v(floats(ctx, 8, rng)),
        table(make_buffer(ctx, std::vector<std::int32_t>{1, 0})), lengths(make_buffer(ctx, std::vector<std::int32_t>{3})) {}
  KvAppendBuffers buffers() const { return {&k_cache, &v_cache, &k, &v, &table, &lengths}; }
};

}  // namespace

// A buffer of another Context (here: another Context on the same device) is named by the op before
// it records anything; before, its VkBuffer reached a descriptor set of the wrong device and
// lavapipe crashed. A binding no op names (T5's table, read by its row shader) is refused by the
// dispatch, naming the binding.
TEST_F(ApiMisuse, BuffersOfAnotherContextAreRefusedByName) {
  Context& ctx = gpu();
  Context& other = relpos::test::gpu_kernels(Kernels::Gpu);
  std::mt19937 rng(1);
  const Attention mine(ctx, rng), theirs(other, rng);
  Recorder r(ctx);
  const std::string foreign = " = a buffer of another Context";
  AttentionBuffers b = mine.buffers();
  b.q = &theirs.q;
  expect_invalid([&] { attention(r, mine.p, b); }, "q buffer" + foreign);
  AttentionPlan plan(ctx, mine.p);
  b = mine.buffers();
  b.out = &theirs.out;
  expect_invalid([&] { plan.record(r, {1, 40, 39}, b); }, "out buffer" + foreign);

  Append append(ctx, rng);
  KvAppendBuffers ab = append.buffers();
  ab.v = &theirs.v;
  expect_invalid([&] { kv_append(r, append.p, ab); }, "v buffer" + foreign);

  const AttentionMergeParams mp{2, 4, 8, DType::F32};
  Buffer parts(ctx, 2 * 4 * 8 * 4), lse(ctx, 2 * 4 * 4);
  expect_invalid([&] { attention_merge(r, mp, parts, lse, theirs.out, nullptr); }, "out buffer" + foreign);

  AlibiParams ap;
  ap.heads = 2;
  ap.queries = 4;
  ap.keys = 4;
  Buffer their_bias(other, 2 * 4 * 4 * 4);
  expect_invalid([&] { alibi_bias(r, ap, their_bias); }, "out buffer" + foreign);
  BiasPlan bias_plan(ctx, ap, DType::F32, false);
  expect_invalid([&] { bias_plan.record(r, {4, 4, 0}, their_bias); }, "out buffer" + foreign);

  RopeParams rp;
  rp.heads = 4;
  rp.head_dim = 8;
  expect_invalid([&] { rope(r, rp, theirs.q); }, "x buffer" + foreign);

  T5Params tp;
  tp.heads = 2;
  tp.queries = 4;
  tp.keys = 4;
  Buffer their_table(other, std::uint64_t{tp.num_buckets} * tp.heads * 4), t5_out(ctx, 2 * 4 * 4 * 4);
  expect_invalid([&] { t5_bias(r, tp, their_table, t5_out); }, "table buffer" + foreign);

  // The recorder is still good for work of its own Context.
  attention(r, mine.p, mine.buffers());
  r.submit_and_wait();
}

// A plan keeps its Context's device, not the Context's address: moved into another variable (and
// the moved-from one destroyed), the Context records the plans' steps as before, bit for bit.
TEST_F(ApiMisuse, PlansFollowAMovedContext) {
  std::mt19937 rng(2);
  std::vector<float> want, got;
  {
    auto a = std::make_unique<Context>(relpos::test::validated_context_options());
    Attention at(*a, rng);
    at.p.bias = AttentionBias::Alibi;
    const Buffer slopes = make_buffer(*a, std::vector<float>{0.5f, 0.25f, 0.125f, 0.0625f});
    AttentionBuffers b = at.buffers();
    b.bias = &slopes;
    AttentionPlan plan(*a, at.p);
    Append append(*a, rng);
    KvAppendPlan append_plan(*a, append.p);
    AlibiParams ap;
    ap.heads = 2;
    ap.queries = 4;
    ap.keys = 4;
    BiasPlan bias_plan(*a, ap, DType::F32, false);
    Buffer bias_out(*a, 2 * 4 * 4 * 4);
    {
      Recorder r(*a);
      plan.record(r, {1, 40, 39}, b);
      r.submit_and_wait();
      want = at.out.download<float>(4 * 8);
    }
    Context moved = std::move(*a);
    a.reset();  // the moved-from Context ends
    Recorder r(moved);
    plan.record(r, {1, 40, 39}, b);
    append_plan.record(r, append.buffers());
    bias_plan.record(r, {4, 4, 0}, bias_out);
    r.submit_and_wait();
    got = at.out.download<float>(4 * 8);
    // A Recorder of another Context is still refused.
    Recorder elsewhere(gpu());
    expect_invalid([&] { plan.record(elsewhere, {1, 40, 39}, b); }, "recorder = of another Context");
  }
  EXPECT_EQ(got, want);
}

// An input the chosen bias mode does not read is refused: an engine that forgot to set the mode
// would otherwise get attention without its bias, silently.
TEST_F(ApiMisuse, InputsTheBiasModeDoesNotReadAreRefused) {
  Context& ctx = gpu();
  std::mt19937 rng(3);
  Attention at(ctx, rng);
  const Buffer slopes = floats(ctx, 4, rng), rel = floats(ctx, 3 * 8, rng);
  Recorder r(ctx);
  AttentionBuffers b = at.buffers();
  b.bias = &slopes;
  expect_invalid([&] { attention(r, at.p, b); }, "bias buffer = given: is not read by bias = none");
  AttentionPlan plan(ctx, at.p);
  expect_invalid([&] { plan.record(r, {1, 40, 39}, b); }, "bias buffer = given: is not read by bias = none");
  AttentionParams alibi = at.p;
  alibi.bias = AttentionBias::Alibi;
  b.rel_keys = b.rel_values = &rel;
  expect_invalid([&] { attention(r, alibi, b); }, "rel_keys buffer = given: is not read by bias = alibi");
}

// One buffer for both caches would have the values overwrite the keys.
TEST_F(ApiMisuse, KvAppendRefusesOneBufferForBothCaches) {
  std::mt19937 rng(4);
  Append append(gpu(), rng);
  KvAppendBuffers b = append.buffers();
  b.v_cache = b.k_cache;
  Recorder r(gpu());
  expect_invalid([&] { kv_append(r, append.p, b); }, "v_cache buffer = the k_cache buffer");
  KvAppendPlan plan(gpu(), append.p);
  expect_invalid([&] { plan.record(r, b); }, "v_cache buffer = the k_cache buffer");
}

// Views of one VkBuffer (an engine's arena) are apart only where their bytes are: a view an op
// writes that overlaps another of its buffers is refused like the same Buffer twice, before
// anything is recorded; views side by side are taken.
TEST_F(ApiMisuse, OverlappingViewsOfOneVkBufferAreRefused) {
  Context& ctx = gpu();
  std::mt19937 rng(5);
  Append append(ctx, rng);
  const std::uint64_t align = std::max<std::uint64_t>(ctx.limits().min_storage_buffer_offset_alignment, 4);
  const std::uint64_t cache = append.p.cache_bytes(), apart = (cache + align - 1) / align * align;
  Buffer arena(ctx, 2 * apart);
  Buffer kc = Buffer::external(ctx, arena.handle(), cache, kAppBufferUsage, 0), vc_apart = Buffer::external(ctx, arena.handle(), cache, kAppBufferUsage, apart),
         vc_overlapping = Buffer::external(ctx, arena.handle(), cache, kAppBufferUsage, align), vc_same = Buffer::external(ctx, arena.handle(), cache, kAppBufferUsage, 0);
  Recorder r(ctx);
  KvAppendBuffers b = append.buffers();
  b.k_cache = &kc;
  b.v_cache = &vc_overlapping;
  expect_invalid([&] { kv_append(r, append.p, b); },
                 "v_cache buffer = bytes [" + std::to_string(align) + ", " + std::to_string(align + cache) + ") of the VkBuffer whose bytes [0, " +
                     std::to_string(cache) + ") are the k_cache buffer: must not overlap it");
  b.v_cache = &vc_same;
  expect_invalid([&] { kv_append(r, append.p, b); }, "v_cache buffer = bytes [0, ");
  KvAppendPlan plan(ctx, append.p);
  expect_invalid([&] { plan.record(r, b); }, "v_cache buffer = bytes [0, ");
  // Lengths advanced on the device are written: a view over the table's bytes is refused then
  // only (read only, it may share them).
  Buffer tables(ctx, 4 * 4);
  Buffer table = Buffer::external(ctx, tables.handle(), 2 * 4, kAppBufferUsage, 0), lengths = Buffer::external(ctx, tables.handle(), 4, kAppBufferUsage, 0);
  b.v_cache = &vc_apart;
  b.block_table = &table;
  b.cache_lengths = &lengths;
  EXPECT_EQ(r.dispatch_count(), 0u);
  kv_append(r, append.p, b);
  const std::uint32_t recorded = r.dispatch_count();
  EXPECT_GT(recorded, 0u);
  KvAppendParams advancing = append.p;
  advancing.advance_lengths = true;
  expect_invalid([&] { kv_append(r, advancing, b); }, "cache_lengths buffer = bytes [0, 4) of the VkBuffer whose bytes [0, 8) are the block_table buffer");
  EXPECT_EQ(r.dispatch_count(), recorded);

  // Attention: out over q's bytes.
  Attention at(ctx, rng);
  Buffer io(ctx, 2 * 4 * 8 * 4);
  Buffer q = Buffer::external(ctx, io.handle(), 4 * 8 * 4, kAppBufferUsage, 0), out = Buffer::external(ctx, io.handle(), 4 * 8 * 4, kAppBufferUsage, 0);
  AttentionBuffers ab = at.buffers();
  ab.q = &q;
  ab.out = &out;
  Recorder r2(ctx);
  expect_invalid([&] { attention(r2, at.p, ab); }, "out buffer = bytes [0, 128) of the VkBuffer whose bytes [0, 128) are the q buffer: must not overlap it (the op writes the out buffer)");
  ab.out = ab.q;
  expect_invalid([&] { attention(r2, at.p, ab); }, "out buffer = the q buffer: must be a buffer of its own");
  EXPECT_EQ(r2.dispatch_count(), 0u);

  // RoPE into out: out over x's bytes is refused; out = x is the in-place rotation.
  RopeParams rp;
  rp.batch = 1;
  rp.heads = 1;
  rp.seq = 4;
  rp.head_dim = 8;
  Buffer x = Buffer::external(ctx, io.handle(), 4 * 8 * 4, kAppBufferUsage, 0);
  if (align < 4 * 8 * 4) {  // a view one alignment on overlaps x (io holds 2 * 128 bytes)
    Buffer shifted = Buffer::external(ctx, io.handle(), 4 * 8 * 4, kAppBufferUsage, align);
    expect_invalid([&] { rope_into(r2, rp, x, shifted); }, "out buffer = bytes [" + std::to_string(align) + ", ");
  }
  EXPECT_EQ(r2.dispatch_count(), 0u);
  rope_into(r2, rp, x, x);
  EXPECT_GT(r2.dispatch_count(), 0u);
}

// A view must lie within its VkBuffer: a 1 MiB view of a 64-byte buffer, or an offset whose sum with
// the size passes 2^64, let relpos's copies and shaders write past the buffer's end.
TEST_F(ApiMisuse, ExternalViewsPastTheirVkBufferAreRefused) {
  Context& ctx = gpu();
  Buffer small(ctx, 64);
  const std::uint64_t align = std::max<std::uint64_t>(ctx.limits().min_storage_buffer_offset_alignment, 4);
  expect_invalid([&] { (void)Buffer::external(ctx, small.handle(), 1 << 20, kAppBufferUsage, 0); }, "offset + bytes = 0 + 1048576: must be within the VkBuffer");
  expect_invalid([&] { (void)Buffer::external(ctx, small.handle(), 64, kAppBufferUsage, 0 - align); }, "must be within the VkBuffer");
  expect_invalid([&] { (void)Buffer::external(ctx, small.handle(), 64, kAppBufferUsage, 64 * align); }, "must be within the VkBuffer");
  const Buffer whole = Buffer::external(ctx, small.handle(), 64, kAppBufferUsage, 0);
  EXPECT_EQ(whole.size(), 64u);
}

// Every op refuses an output that is one of its inputs, before it records anything: matmul's C over
// A gave products off by 36 (it writes C tile by tile while reading A), the unfused logits over q
// by 1.0, and the ops of several dispatches had recorded some of them before a buffer of another
// Context was found.
TEST_F(ApiMisuse, OutputsOverInputsAreRefusedBeforeAnythingIsRecorded) {
  Context& ctx = gpu();
  Recorder r(ctx);
  Buffer a(ctx, 64 * 64 * 4), b(ctx, 64 * 64 * 4), c(ctx, 64 * 64 * 4);
  const MatmulParams m = dense_matmul(1, 64, 64, 64, true);
  expect_invalid([&] { matmul(r, m, a, b, a); }, "C buffer = the A buffer: must be a buffer of its own (the op writes the C buffer)");
  expect_invalid([&] { matmul(r, m, a, b, b); }, "C buffer = the B buffer");
  UnfusedAttentionParams u{.heads = 2, .queries = 16, .keys = 16, .head_dim = 16};
  Buffer q(ctx, 2 * 16 * 16 * 4), k(ctx, 2 * 16 * 16 * 4), v(ctx, 2 * 16 * 16 * 4), logits(ctx, 2 * 16 * 16 * 4);
  expect_invalid([&] { unfused_logits(r, u, q, k, q); }, "logits buffer = the q buffer");
  expect_invalid([&] { unfused_output(r, u, logits, v, logits); }, "out buffer = the weights buffer");
  expect_invalid([&] { unfused_attention(r, u, q, k, v, k); }, "out buffer = the k buffer");
  AttentionParams ap{.heads = 2, .kv_heads = 2, .queries = 16, .keys = 16, .head_dim = 16};
  AttentionBuffers ab{.q = &q, .k = &k, .v = &v, .out = &c};
  expect_invalid([&] { attention_unfused(r, ap, ab, k); }, "logits buffer = the k buffer");
  expect_invalid([&] { attention_unfused(r, ap, ab, c); }, "out buffer = the logits buffer");
  ShawParams sp;
  sp.heads = 2;
  sp.queries = sp.keys = 16;
  sp.head_dim = 16;
  sp.max_relative_position = 2;
  Buffer table(ctx, 5 * 16 * 4);
  expect_invalid([&] { shaw_logits_add(r, sp, q, table, q); }, "logits buffer = the q buffer");
  expect_invalid([&] { shaw_values_add(r, sp, logits, table, logits); }, "out buffer = the weights buffer");
  FourierParams fp;
  fp.heads = 2;
  fp.queries = fp.keys = 4;
  fp.vector_size = 8;
  Buffer arena(ctx, 256);  // the rotation [2, 8] and the bias [2, 4, 4] over the same bytes
  const Buffer rotation = Buffer::external(ctx, arena.handle(), 2 * 8 * 4, kAppBufferUsage, 0),
               bias = Buffer::external(ctx, arena.handle(), 2 * 4 * 4 * 4, kAppBufferUsage, 0);
  for (FourierPath path : {FourierPath::Direct, FourierPath::Distance})
    expect_invalid([&] { fourier_bias(r, fp, rotation, bias, path); }, "out buffer = bytes [0, 128) of the VkBuffer whose bytes [0, 64) are the rotation buffer");
  expect_invalid([&] { fourier_bias_add(r, fp, rotation, bias); }, "logits buffer = bytes [0, 128) of the VkBuffer whose bytes [0, 64) are the rotation buffer");
  // T5's table is the application's too: the per-distance kit checks it against the output, in the
  // free functions and in a plan's steps (the expansion would overwrite the next call's table).
  T5Params tp{.num_buckets = 8, .max_distance = 16, .queries = 4, .keys = 4, .heads = 2};
  const Buffer t5_table = Buffer::external(ctx, arena.handle(), 8 * 2 * 4, kAppBufferUsage, 0);
  expect_invalid([&] { t5_bias(r, tp, t5_table, bias); }, "out buffer = bytes [0, 128) of the VkBuffer whose bytes [0, 64) are the table buffer");
  expect_invalid([&] { t5_bias_add(r, tp, t5_table, bias); }, "logits buffer = bytes [0, 128) of the VkBuffer whose bytes [0, 64) are the table buffer");
  BiasPlan t5_plan(ctx, tp, t5_table, DType::F32, false);
  expect_invalid([&] { t5_plan.record(r, BiasStep{.queries = 4, .keys = 4}, bias); }, "out buffer = bytes [0, 128) of the VkBuffer whose bytes [0, 64) are the table buffer");
  CacheDecodeParams dp{.rows = 16, .head_dim = 16};
  Buffer rows(ctx, 16 * 16 * 4);
  expect_invalid([&] { decode_cache(r, dp, rows, rows); }, "out buffer = the cache buffer");
  // Another Context's out: refused before the first of several dispatches.
  Context other(relpos::test::validated_context_options());
  Buffer foreign(other, 2 * 16 * 16 * 4);
  expect_invalid([&] { unfused_attention(r, u, q, k, v, foreign); }, "out buffer = a buffer of another Context");
  AttentionBuffers fb = ab;
  fb.out = &foreign;
  expect_invalid([&] { attention_unfused(r, ap, fb, logits); }, "out buffer = a buffer of another Context");
  EXPECT_EQ(r.dispatch_count(), 0u);
  unfused_attention(r, u, q, k, v, c);  // distinct buffers: recorded
  EXPECT_GT(r.dispatch_count(), 0u);
}

// Messages name what is wrong: the keys past the relative positions' range (not the offset), an
// enum value that is no cache format, a T5 table's bucket count (not the element count it makes).
TEST(ApiMessages, NameTheParameterAtFault) {
  AttentionParams p{.heads = 1, .queries = 1, .keys = 0x80000000u, .head_dim = 8};
  expect_invalid([&] { p.validate(); }, "keys = 2147483648 (query_offset = 0): puts relative positions above 2^31 - 2");
  p.keys = 8;
  p.query_offset = -0x7fffffffll + 2;
  p.queries = 4;
  expect_invalid([&] { p.validate(); }, "keys = 8 (query_offset = -2147483645)");
  p.query_offset = 0x7fffffffll - 1;
  expect_invalid([&] { p.validate(); }, "queries = 4 (query_offset = 2147483646)");
  // The limit the messages state is the one they hold: relative positions within +-(2^31 - 2).
  T5Params t5{.queries = 1, .keys = 1, .query_offset = 0x7fffffffll - 1};
  EXPECT_NO_THROW(t5.validate());
  t5.query_offset += 1;
  expect_invalid([&] { t5.validate(); }, "query_offset = 2147483647: puts relative positions outside +-(2^31 - 2)");
  AlibiParams alibi{.heads = 1, .queries = 2, .keys = 1, .query_offset = 0x7fffffffll - 2};
  EXPECT_NO_THROW(alibi.validate());
  alibi.query_offset += 1;
  expect_invalid([&] { alibi.validate(); }, "queries = 2 (query_offset = 2147483646): puts relative positions below -(2^31 - 2)");
  UnfusedAttentionParams unfused{.queries = 1, .keys = 1, .head_dim = 4, .query_offset = (1 << 30) - 2};
  EXPECT_NO_THROW(unfused.validate());
  unfused.query_offset = -unfused.query_offset;
  EXPECT_NO_THROW(unfused.validate());
  unfused.query_offset -= 1;
  expect_invalid([&] { unfused.validate(); }, "query_offset = -1073741823: must be within +-(2^30 - 2)");
  p.query_offset = 0;
  p.cache_format = static_cast<CacheFormat>(9);
  expect_invalid([&] { p.validate(); }, "cache_format = 9: is no cache format");
  p.cache_format.reset();
  p.bias = AttentionBias::T5;
  p.t5.num_buckets = 4000000000u;
  expect_invalid([&] { p.validate(); }, "num_buckets");
  AlibiParams ap;
  ap.keys = 4000000000u;
  expect_invalid([&] { ap.validate(); }, "keys = 4000000000 (query_offset = 0)");
  SinusoidalParams sp{3000000000u, 4, 0, 0.0};
  expect_invalid([&] { sp.validate(); }, "positions = 3000000000 (offset = 0)");
}

// Products of 32-bit sizes that pass 2^64 are refused, not taken for their remainder: 13309 ·
// 1174891961 · 1179713 = 2^64 + 21 rows passed as 21, and attention() then looped without end
// over chunks of a shape it took for small.
TEST(ApiMessages, ProductsPastTwoToTheSixtyFourAreRefused) {
  AttentionParams p{.batch = 13309, .heads = 1174891961u, .queries = 1179713, .keys = 1, .head_dim = 4};
  expect_invalid([&] { p.validate(); }, "batch * heads * queries * head_dim / 4 = 2^62 or more: must be < 2^32");
  p = AttentionParams{.batch = 1u << 22, .heads = 1u << 21, .queries = 1u << 21, .keys = 1, .head_dim = 4};  // exactly 2^64
  expect_invalid([&] { p.validate(); }, "batch * heads * queries * head_dim / 4");
  AttentionMergeParams m{.parts = 16, .rows = std::uint64_t{1} << 60, .head_dim = 4};  // 2^64 values
  expect_invalid([&] { m.validate(); }, "parts * rows * head_dim / 4 = 2^62 or more");
  // 2^31 blocks of 16 keys, 2^28 kv heads of head_dim 2: 2^64 elements, 2^66 bytes.
  KvAppendParams k;
  k.heads = k.kv_heads = 1u << 28;
  k.head_dim = 2;
  k.paged = PagedKv{.block_size = 16, .num_blocks = 1u << 31, .max_blocks = 1};
  expect_invalid([&] { k.validate(); }, "k_cache bytes (num_blocks * block_size * kv_heads * row bytes) = 2^64 or more");
}

// An integer cast to an enum past its list is refused naming the field and the number: before, each
// reached a switch or an if chain that took it for one of the values (RoPE's style for NeoX on the
// GPU and GPT-J in the reference), or for none (an empty frequency table the GPU read past).
TEST_F(ApiMisuse, EnumValuesPastTheirListAreRefusedByName) {
  Context& ctx = gpu();
  const auto dtype9 = static_cast<DType>(9);
  AttentionParams ap{.queries = 2, .keys = 16, .head_dim = 8};
  {
    AttentionParams p = ap;
    p.dtype = dtype9;
    expect_invalid([&] { p.validate(); }, "dtype = 9");
    p = ap;
    p.out_dtype = dtype9;
    expect_invalid([&] { p.validate(); }, "out_dtype = 9");
    p = ap;
    p.bias = AttentionBias::Kerple;
    p.kerple_variant = static_cast<KerpleVariant>(5);
    expect_invalid([&] { p.validate(); }, "kerple_variant = 5");
    p = ap;
    p.bias = AttentionBias::T5;
    p.t5.log = static_cast<T5Log>(7);
    expect_invalid([&] { p.validate(); }, "log = 7");
  }
  const AttentionMergeParams merge{2, 4, 8, dtype9};
  expect_invalid([&] { merge.validate(); }, "dtype = 9");
  T5Params t5;
  t5.queries = t5.keys = 4;
  t5.log = static_cast<T5Log>(7);
  expect_invalid([&] { t5.validate(); }, "log = 7");
  AlibiParams alibi;
  alibi.heads = 3;
  alibi.rule = static_cast<AlibiSlopeRule>(9);
  expect_invalid([&] { alibi.validate(); }, "rule = 9");
  expect_invalid([&] { alibi_slopes(alibi); }, "rule = 9");
  expect_invalid([&] { kerple_bias_value(1.0f, 1.0f, static_cast<KerpleVariant>(5), 3); }, "variant = 5");

  RopeParams rope_p;
  rope_p.seq = 4;
  rope_p.head_dim = 8;
  {
    RopeParams p = rope_p;
    p.scaling = {.type = static_cast<RopeScaling>(9), .factor = 2.0, .original_max_position = 8};
    expect_invalid([&] { p.validate(); }, "scaling.type = 9");
    expect_invalid([&] { rope_frequencies(p); }, "scaling.type = 9");
    p = rope_p;
    p.style = static_cast<RopeStyle>(9);
    expect_invalid([&] { p.validate(); }, "style = 9");
    p = rope_p;
    p.layout = static_cast<RopeLayout>(9);
    expect_invalid([&] { p.validate(); }, "layout = 9");
  }
  expect_invalid([&] { (void)cache_row_bytes(static_cast<CacheFormat>(9), 32); }, "cache_format = 9");

  const std::vector<float> values(4, 1.5f);
  expect_invalid([&] { make_float_buffer(ctx, values, dtype9); }, "dtype = 9");
  expect_invalid([&] { rounded_to_storage(values, dtype9); }, "dtype = 9");
  expect_invalid([&] { Buffer b(ctx, 64, static_cast<MemoryUse>(7)); }, "use = 7");
  const std::uint64_t shape[] = {4};
  expect_invalid([&] { write_npy("never_written.npy", dtype9, shape, values.data()); }, "dtype = 9");

  // The ops' own enum arguments, refused before anything is recorded.
  Recorder r(ctx);
  Buffer x = make_buffer(ctx, std::vector<float>(32, 1.0f));
  expect_invalid([&] { rope(r, rope_p, x, dtype9); }, "dtype = 9");
  FourierParams fp;
  fp.queries = fp.keys = fp.max_keys = 4;
  fp.vector_size = 8;
  const std::vector<float> rotation = fourier_default_rotation(fp);
  const Buffer rot = make_buffer(ctx, rotation);
  Buffer out(ctx, 4 * 4 * 4);
  expect_invalid([&] { fourier_bias(r, fp, rot, out, static_cast<FourierPath>(9)); }, "path = 9");
  expect_invalid([&] { fourier_error_bound(fp, rotation, static_cast<FourierPath>(9)); }, "path = 9");
  alibi.rule = AlibiSlopeRule::Interleaved;
  alibi.queries = alibi.keys = 2;
  expect_invalid([&] { alibi_bias(r, alibi, out, dtype9); }, "out_dtype = 9");
  EXPECT_EQ(r.dispatch_count(), 0u);

  // A Context's tuning, before it makes anything.
  ContextOptions bad_kernels;
  bad_kernels.tuning.kernels = static_cast<Kernels>(9);
  expect_invalid([&] { Context c(bad_kernels); }, "tuning.kernels = 9");
  ContextOptions bad_expansion;
  bad_expansion.tuning.distance_expansion = static_cast<DistanceExpansion>(9);
  expect_invalid([&] { Context c(bad_expansion); }, "tuning.distance_expansion = 9");
}

// A moved-from Recorder, Context or plan holds nothing: each call on one is an InvalidArgument that
// says so (before, a null dereference).
TEST_F(ApiMisuse, MovedFromObjectsAreRefusedByName) {
  Context& ctx = gpu();
  std::mt19937 rng(6);
  T5Params t5;
  t5.queries = t5.keys = 8;
  Buffer buckets(ctx, 8 * 8 * 4);

  Recorder r(ctx);
  Recorder taken(std::move(r));
  const std::string recorder = "Recorder: used after it was moved from";
  expect_invalid([&] { t5_buckets(r, t5, buckets); }, recorder);
  expect_invalid([&] { r.submit_and_wait(); }, recorder);
  expect_invalid([&] { (void)r.dispatch_count(); }, recorder);
  expect_invalid([&] { (void)r.context(); }, recorder);
  expect_invalid([&] { r.release(); }, recorder);

  auto moved = std::make_unique<Context>(relpos::test::validated_context_options());
  Context owner(std::move(*moved));
  const std::string context = "Context: used after it was moved from";
  expect_invalid([&] { Buffer b(*moved, 64); }, context);
  expect_invalid([&] { Recorder rec(*moved); }, context);
  expect_invalid([&] { (void)moved->limits(); }, context);
  expect_invalid([&] { moved->wait_idle(); }, context);

  Attention at(ctx, rng);
  AttentionPlan attention_plan(ctx, at.p);
  AttentionPlan attention_taken(std::move(attention_plan));
  expect_invalid([&] { attention_plan.record(taken, {1, 40, 39}, at.buffers()); }, "AttentionPlan: used after it was moved from");
  expect_invalid([&] { (void)attention_plan.envelope(); }, "AttentionPlan: used after it was moved from");
  AlibiParams ap;
  ap.heads = 2;
  ap.queries = ap.keys = 4;
  BiasPlan bias_plan(ctx, ap, DType::F32, false);
  BiasPlan bias_taken(std::move(bias_plan));
  Buffer bias_out(ctx, 2 * 4 * 4 * 4);
  expect_invalid([&] { bias_plan.record(taken, {4, 4, 0}, bias_out); }, "BiasPlan: used after it was moved from");
  RopeParams rp;
  rp.seq = 4;
  rp.head_dim = 8;
  RopePlan rope_plan(ctx, rp);
  RopePlan rope_taken(std::move(rope_plan));
  Buffer x = floats(ctx, 4 * 8, rng);
  expect_invalid([&] { rope_plan.record(taken, {4, 0}, x); }, "RopePlan: used after it was moved from");
  Append append(ctx, rng);
  KvAppendPlan append_plan(ctx, append.p);
  KvAppendPlan append_taken(std::move(append_plan));
  expect_invalid([&] { (void)append_plan.params(); }, "KvAppendPlan: used after it was moved from");
  expect_invalid([&] { append_plan.record(taken, append.buffers()); }, "KvAppendPlan: used after it was moved from");
  auto transports = make_in_process_ring(2, std::chrono::seconds(10));
  RingRank rank(ctx, *transports[0]);
  RingRank rank_taken(std::move(rank));
  expect_invalid([&] { (void)rank.rank(); }, "RingRank: used after it was moved from");
  expect_invalid([&] { (void)rank.context(); }, "RingRank: used after it was moved from");
  EXPECT_EQ(rank_taken.rank(), 0u);

  // What they moved into works.
  EXPECT_EQ(taken.dispatch_count(), 0u);
  t5_buckets(taken, t5, buckets);
  rope_taken.record(taken, {4, 0}, x);
  taken.submit_and_wait();
  EXPECT_EQ(buckets.download<std::int32_t>(8 * 8), t5_buckets_reference(t5));
}

// A Recorder keeps its Context's device as buffers and plans do: it records and submits as before
// after its Context was moved into another variable, or destroyed (before, context() was the
// Context's address, and the next op read a moved-from or destroyed Context).
TEST_F(ApiMisuse, RecordersOutliveTheirContext) {
  T5Params t5;
  t5.queries = t5.keys = 8;
  AlibiParams ap;
  ap.heads = 2;
  ap.queries = ap.keys = 4;
  auto a = std::make_unique<Context>(relpos::test::validated_context_options());
  Buffer moved_out(*a, 8 * 8 * 4), destroyed_out(*a, 8 * 8 * 4), bias_out(*a, 2 * 4 * 4 * 4);
  Recorder before_move(*a);
  Context b(std::move(*a));
  Recorder before_destroy(b);
  BiasPlan plan(b, ap, DType::F32, false);
  t5_buckets(before_move, t5, moved_out);
  before_move.submit_and_wait();
  {
    Context ends = std::move(b);
  }
  t5_buckets(before_destroy, t5, destroyed_out);
  plan.record(before_destroy, {4, 4, 0}, bias_out);
  before_destroy.submit_and_wait();
  EXPECT_EQ(moved_out.download<std::int32_t>(8 * 8), t5_buckets_reference(t5));
  EXPECT_EQ(destroyed_out.download<std::int32_t>(8 * 8), t5_buckets_reference(t5));
  EXPECT_EQ(bias_out.download<float>(2 * 4 * 4), alibi_bias_reference(ap));
  EXPECT_EQ(before_destroy.context().validation_message_count(), 0u);
}

// What is wrong with a buffer is said as it is: an empty Buffer is not one "of another Context",
// and x given as an out-of-place RoPE plan's out is not a missing out.
TEST_F(ApiMisuse, BufferMessagesSayWhatIsWrong) {
  Context& ctx = gpu();
  std::mt19937 rng(7);
  T5Params t5;
  t5.queries = t5.keys = 8;
  Recorder r(ctx);
  const Buffer empty;
  expect_invalid([&] { t5_buckets(r, t5, empty); }, "out buffer = an empty Buffer (default-constructed or moved from)");
  AlibiParams ap;
  ap.heads = 1;
  ap.queries = ap.keys = 4;
  Buffer logits = floats(ctx, 16, rng);
  const Buffer taken(std::move(logits));
  expect_invalid([&] { alibi_bias_add(r, ap, logits); }, "logits buffer = an empty Buffer (default-constructed or moved from)");

  RopeParams rp;
  rp.seq = 8;
  rp.head_dim = 8;
  RopePlan out_of_place(ctx, rp, DType::F32, false);
  Buffer x = floats(ctx, 8 * 8, rng);
  expect_invalid([&] { out_of_place.record(r, {8, 0}, x, &x); }, "out = x: must be a buffer other than x");
  expect_invalid([&] { out_of_place.record(r, {8, 0}, x); }, "out = null: must be a buffer other than x");
  RopePlan in_place(ctx, rp);
  Buffer other = floats(ctx, 8 * 8, rng);
  expect_invalid([&] { in_place.record(r, {8, 0}, x, &other); }, "out = a buffer other than x: must be null or x");
  EXPECT_EQ(r.dispatch_count(), 0u);
}

// Recorder calls on a command buffer in flight are refused (release() recorded its barrier into
// it); timestamps read in reverse give a negative time, not 2^64 ticks.
TEST_F(ApiMisuse, RecorderInFlightAndReversedTimestamps) {
  Context& ctx = gpu();
  Buffer b(ctx, 64);
  Recorder r(ctx);
  const bool timestamps = ctx.limits().timestamps;
  const std::uint32_t t0 = timestamps ? r.write_timestamp() : 0;
  b.upload<float>(std::vector<float>(16, 1.0f));
  AlibiParams p;
  p.queries = p.keys = 4;
  alibi_bias(r, p, b);
  const std::uint32_t t1 = timestamps ? r.write_timestamp() : 0;
  r.submit();
  expect_invalid([&] { r.release(); }, "Recorder: recording after submit() needs wait() first");
  r.wait();
  if (timestamps) {
    const double forward = r.elapsed_ms(t0, t1);
    EXPECT_GE(forward, 0.0);
    EXPECT_EQ(r.elapsed_ms(t1, t0), -forward);
    if (forward > 0.0) EXPECT_LT(r.elapsed_ms(t1, t0), 0.0);
  }
}

// Ring attention and sequence-parallel (sharded) attention over in-process ranks against single-
// device attention() of the whole sequence (and the float64 reference): every bias mode, both
// layouts, grouped-query heads, f32 and f16, causal or not, lengths not divisible by the chunks,
// 1 to 4 ranks, ranks sharing one context or each with its own, chunks through host-visible device
// memory or through staging; the blocks a causal mask hides skipped; bad input and failing ranks
// stopping every rank with a message naming the rank and the step, never a hang.
#include <relpos/relpos.hpp>
#include <relpos/ring.hpp>

#include <algorithm>
#include <iterator>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <tuple>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/ring_data.hpp"
#include "support/test_data.hpp"
#include "ring/rank.hpp"
#include "sharded_slices.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::gpu;
using relpos::test::GpuTest;
using relpos::test::random_whole_inputs;
using relpos::test::WholeInputs;

namespace {

// As in test_attention_gpu.cpp: the fused kernel's tolerances against the reference (f32: float32
// accumulation ~1e-5 relative; f16: the output rounded to half once). Ring attention merges float32
// partial results and rounds once too, so it is held to the same bounds against both the reference
// and attention() on one device.
constexpr double kTolF32 = 1e-4;
constexpr double kTolF16 = 1e-3;
constexpr auto kTimeout = std::chrono::milliseconds(60000);

std::string describe(const AttentionParams& p) {
  return std::string(attention_bias_info(p.bias).name) + (p.bias == AttentionBias::T5 && !p.t5.bidirectional ? " (causal buckets)" : "") +
         " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) + " Q=" + std::to_string(p.queries) +
         " K=" + std::to_string(p.keys) + " D=" + std::to_string(p.head_dim) + " " + std::string(dtype_name(p.dtype)) +
         (p.causal ? " causal" : "") + " off=" + std::to_string(p.query_offset);
}

std::vector<Context*> shared(Context& ctx, std::uint32_t ranks) { return std::vector<Context*>(ranks, &ctx); }

AttentionResult empty_result(const AttentionParams& p) {
  return {std::vector<float>(p.rows() * p.head_dim, std::numeric_limits<float>::quiet_NaN()),
          std::vector<float>(p.rows(), std::numeric_limits<float>::quiet_NaN())};
}

// Sharded attention over `ranks` in-process ranks sharing the test's context: each rank's result
// (empty where it receives none).
std::vector<AttentionResult> run_sharded(const ShardedParams& sp, const WholeInputs& in) {
  std::vector<AttentionResult> got(sp.ranks);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), sp.ranks), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    relpos::test::sharded_rank(rank, sp, in, got[r]);
  });
  EXPECT_TRUE(outcome.ok()) << outcome.describe();
  return got;
}

// The ring over `contexts` against attention() on `single` and the reference.
std::vector<RingTiming> expect_ring_matches(const std::vector<Context*>& contexts, const RingParams& rp, const WholeInputs& in, Context& single) {
  SCOPED_TRACE(describe(rp.attention) + " ranks=" + std::to_string(rp.ranks) + " " + std::string(ring_layout_name(rp.layout)));
  const AttentionParams& p = rp.attention;
  const AttentionResult want = attention_reference(p, in.host());
  const AttentionResult one = relpos::test::single_device(single, p, in);
  AttentionResult got = empty_result(p);
  std::vector<RingTiming> timings(rp.ranks);
  const InProcessRingOutcome outcome = run_in_process_ring(contexts, kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    timings[r] = relpos::test::ring_rank(rank, rp, in, got);
  });
  EXPECT_TRUE(outcome.ok()) << outcome.describe();
  const double tol = p.output_dtype() == DType::F16 ? kTolF16 : kTolF32;
  EXPECT_LE(normalised_error(got.out, one.out), tol);
  EXPECT_LE(normalised_error(got.lse, one.lse), kTolF32);
  EXPECT_LE(normalised_error(got.out, want.out), tol);
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
  return timings;
}

// Every family the library has (Sandwich, added after the ring, takes it unchanged).
constexpr AttentionBias kModes[] = {AttentionBias::None,  AttentionBias::T5,     AttentionBias::Distance, AttentionBias::Alibi,
                                    AttentionBias::Shaw,  AttentionBias::Dense,  AttentionBias::Kerple,   AttentionBias::Sandwich};
constexpr int kModeCount = static_cast<int>(std::size(kModes));

class RingAttention : public GpuTest {};

// A transport that breaks at one exchange ("step N"): throws (a transport error), dies silently (the
// rank vanishes: it tells no one), or sends four bytes short.
class FaultyTransport final : public RingTransport {
 public:
  enum class Fault { Throw, Die, Short };
  FaultyTransport(RingTransport& inner, std::string at, Fault fault) : inner_(inner), at_(std::move(at)), fault_(fault) {}
  std::uint32_t rank() const override { return inner_.rank(); }
  std::uint32_t ranks() const override { return inner_.ranks(); }
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  void post(const Buffer& send, std::uint64_t so, std::uint64_t sb, Buffer& recv, std::uint64_t ro, std::uint64_t rb, std::string_view what) override {
    if (what == at_) {
      if (fault_ == Fault::Throw) throw RingError("injected transport error");
      if (fault_ == Fault::Die) {
        dead_ = true;
        throw Error("rank died");
      }
      sb -= 4;
    }
    inner_.post(send, so, sb, recv, ro, rb, what);
  }
  void wait() override { inner_.wait(); }
  void fail(const std::string& why) noexcept override {
    if (!dead_) inner_.fail(why);
  }

 private:
  RingTransport& inner_;
  std::string at_;
  Fault fault_;
  bool dead_ = false;
};

// Runs a ring of `ranks` threads whose rank `faulty` breaks at `at`; returns each rank's error.
std::vector<std::string> faulty_ring(std::uint32_t ranks, std::uint32_t faulty, const std::string& at, FaultyTransport::Fault fault,
                                     std::chrono::milliseconds timeout) {
  std::mt19937 rng(5);
  RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::Alibi, DType::F32, ranks), ranks, RingLayout::Contiguous};
  const WholeInputs in = random_whole_inputs(rng, rp.attention);
  AttentionResult got = empty_result(rp.attention);
  auto transports = make_in_process_ring(ranks, timeout);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      FaultyTransport t(*transports[r], r == faulty ? at : "", fault);
      try {
        RingRank rank(gpu(), t);
        relpos::test::ring_rank(rank, rp, in, got);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// How a rank's call was refused: "invalid" (InvalidArgument: its own input), "refused"
// (RingRefused: another rank's), or "" where it ran; and the message.
struct Refusal {
  std::string kind, text;
};
Refusal refusal_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return {"invalid", e.what()};
  } catch (const RingRefused& e) {
    return {"refused", e.what()};
  }
  return {};
}

// Each rank's refusal of `call` on its RingRank over in-process ranks sharing the test's context;
// a refusal never stops the ring.
std::vector<Refusal> refusals(std::uint32_t ranks, const std::function<void(std::uint32_t, Context&, RingRank&)>& call) {
  std::vector<Refusal> out(ranks);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), ranks), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    out[r] = refusal_of([&] { call(r, ctx, rank); });
    EXPECT_FALSE(rank.stopped()) << "rank " << r;
  });
  EXPECT_TRUE(outcome.ok()) << outcome.describe();
  return out;
}

}  // namespace

TEST_F(RingAttention, EveryBiasModeBothLayoutsMatchSingleDevice) {
  std::mt19937 rng(2025);
  for (int trial = 0; trial < 4 * kModeCount; ++trial) {
    const RingLayout layout = trial % 2 ? RingLayout::Zigzag : RingLayout::Contiguous;
    const std::uint32_t ranks = 1 + (trial / 2) % 4;
    const DType dtype = trial % kModeCount < kModeCount / 2 ? DType::F32 : DType::F16;
    RingParams rp{relpos::test::random_ring_params(rng, kModes[trial % kModeCount], dtype, layout == RingLayout::Zigzag ? 2 * ranks : ranks),
                  ranks, layout};
    if (trial % (2 * kModeCount) == 1) rp.attention.t5.bidirectional = false;
    expect_ring_matches(shared(gpu(), ranks), rp, random_whole_inputs(rng, rp.attention), gpu());
  }
}

// A NaN in one chunk's keys makes the rows that see it NaN, out and lse, as on one device and in
// the reference; the others are as before. (The merge once took a NaN part for a masked one and
// skipped it: the ring answered as if the chunk were not there.)
TEST_F(RingAttention, ANaNInOneChunkMakesItsRowsNaN) {
  std::mt19937 rng(11);
  for (RingLayout layout : {RingLayout::Contiguous, RingLayout::Zigzag}) {
    RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::None, DType::F32, 4), 2, layout};
    AttentionParams& p = rp.attention;
    p.batch = 1;
    p.heads = p.kv_heads = 1;
    p.queries = p.keys = 8;
    p.head_dim = 8;
    p.causal = true;
    p.query_offset = 0;
    SCOPED_TRACE(describe(p) + " " + std::string(ring_layout_name(layout)));
    WholeInputs in = random_whole_inputs(rng, p);
    in.k[6 * 8 + 2] = std::numeric_limits<float>::quiet_NaN();  // key 6: seen by queries 6 and 7 only
    const AttentionResult want = attention_reference(p, in.host());
    const AttentionResult one = relpos::test::single_device(gpu(), p, in);
    AttentionResult got = empty_result(p);
    const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 2), kTimeout, [&](std::uint32_t, Context& ctx, RingTransport& t) {
      RingRank rank(ctx, t);
      relpos::test::ring_rank(rank, rp, in, got);
    });
    ASSERT_TRUE(outcome.ok()) << outcome.describe();
    const std::vector<bool> nan_rows = {false, false, false, false, false, false, true, true};
    for (const auto* ref : {&want, &one}) {
      const char* against = ref == &want ? " against the reference" : " against one device";
      relpos::test::expect_nan_rows_match(got.out, ref->out, p.head_dim, kTolF32, std::string("out") + against);
      EXPECT_EQ(relpos::test::expect_nan_rows_match(got.lse, ref->lse, 1, kTolF32, std::string("lse") + against), nan_rows);
    }
  }
}

// T5 in both directions (bidirectional and causal buckets), at head_dim 20, causal, with each
// layout: every block's bucket row is computed for its own window.
TEST_F(RingAttention, T5BothDirections) {
  std::mt19937 rng(7);
  for (bool bidirectional : {true, false})
    for (RingLayout layout : {RingLayout::Contiguous, RingLayout::Zigzag}) {
      RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::T5, DType::F32, 6), 3, layout};
      rp.attention.t5.bidirectional = bidirectional;
      rp.attention.t5.num_buckets = 8;
      rp.attention.t5.max_distance = 12;
      rp.attention.causal = !bidirectional;
      rp.attention.head_dim = 20;
      rp.attention.queries = rp.attention.keys = 47;
      rp.attention.query_offset = 0;
      expect_ring_matches(shared(gpu(), 3), rp, random_whole_inputs(rng, rp.attention), gpu());
    }
}

// A causal self-attention skips the blocks the mask hides: contiguous rank r computes r + 1 of
// its R blocks, every zigzag rank 2R + 1 of its 4R.
TEST_F(RingAttention, CausalBlocksSkippedAndZigzagBalanced) {
  std::mt19937 rng(3);
  const std::uint32_t R = 4;
  for (RingLayout layout : {RingLayout::Contiguous, RingLayout::Zigzag}) {
    RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::Alibi, DType::F32, 2 * R), R, layout};
    rp.attention.causal = true;
    rp.attention.queries = rp.attention.keys = 64;
    rp.attention.query_offset = 0;
    const auto timings = expect_ring_matches(shared(gpu(), R), rp, random_whole_inputs(rng, rp.attention), gpu());
    for (std::uint32_t r = 0; r < R; ++r) {
      if (layout == RingLayout::Contiguous) {
        EXPECT_EQ(timings[r].blocks_computed, r + 1) << "rank " << r;
        EXPECT_EQ(timings[r].blocks_skipped, R - 1 - r) << "rank " << r;
      } else {
        // Query chunks r and 2R-1-r meet key chunks 0..r and 0..2R-1-r: 2R + 1 of the 4R pairs.
        EXPECT_EQ(timings[r].blocks_computed, 2 * R + 1) << "rank " << r;
        EXPECT_EQ(timings[r].blocks_skipped, 2 * R - 1) << "rank " << r;
      }
      EXPECT_EQ(timings[r].steps.size(), R);
    }
  }
}

// Chunks through staging buffers (a device whose memory the host cannot map), and every rank on a
// context of its own chosen by device selector, as the tool's --devices does.
TEST_F(RingAttention, StagingPathAndAContextPerRank) {
  std::mt19937 rng(11);
  for (RingLayout layout : {RingLayout::Contiguous, RingLayout::Zigzag}) {
    RingParams rp{relpos::test::random_ring_params(rng, kModes[2 + static_cast<int>(layout)], DType::F16, 6), 3, layout};
    expect_ring_matches(shared(relpos::test::gpu_staging_only(), 3), rp, random_whole_inputs(rng, rp.attention), gpu());
  }
  RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::Dense, DType::F32, 4), 2, RingLayout::Zigzag};
  const WholeInputs in = random_whole_inputs(rng, rp.attention);
  const AttentionResult one = relpos::test::single_device(gpu(), rp.attention, in);
  AttentionResult got = empty_result(rp.attention);
  InProcessRingOptions options;
  options.context = relpos::test::validated_context_options();
  options.devices = {std::to_string(gpu().device_info().index), gpu().device_info().name};
  const InProcessRingOutcome outcome = run_in_process_ring(2, options, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    EXPECT_EQ(ctx.device_info().index, gpu().device_info().index) << "rank " << r;
    RingRank rank(ctx, t);
    relpos::test::ring_rank(rank, rp, in, got);
  });
  ASSERT_TRUE(outcome.ok()) << outcome.describe();
  EXPECT_LE(normalised_error(got.out, one.out), kTolF32);
  EXPECT_LE(normalised_error(got.lse, one.lse), kTolF32);
}

// A RingRank keeps its buffers: a second call of the same shape makes no new Vulkan buffer, also
// where its steps take turns with blocks of different shapes (causal: diagonal, full and skipped
// blocks; each created two buffers a call while the recorder kept only the last step's scratch).
TEST_F(RingAttention, RepeatedCallsReuseBuffers) {
  for (bool causal : {false, true}) {  // causal: the steps take turns with diagonal and full blocks
  SCOPED_TRACE(causal ? "causal" : "not causal");
  std::mt19937 rng(17);
  RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::Distance, DType::F32, 4), 2, RingLayout::Zigzag};
  rp.attention.causal = causal;
  rp.attention.queries = rp.attention.keys = 32;
  const WholeInputs in = random_whole_inputs(rng, rp.attention);
  const AttentionResult one = relpos::test::single_device(gpu(), rp.attention, in);
  auto transports = make_in_process_ring(2, kTimeout);
  std::vector<std::uint64_t> buffers_after(3);
  AttentionResult got = empty_result(rp.attention);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      RingRank rank(gpu(), *transports[r]);
      const std::uint32_t Qr = rp.local_queries(r);
      const auto qp = rp.query_pieces(r), kp = rp.key_pieces(r);
      const AttentionParams& a = rp.attention;
      const std::uint64_t BH = std::uint64_t{a.batch} * a.heads, BHkv = std::uint64_t{a.batch} * a.kv_heads, D = a.head_dim;
      relpos::test::DeviceInputs d = relpos::test::upload(gpu(), a.dtype, take_pieces<float>(in.q, BH, a.queries, D, qp),
                                                          take_pieces<float>(in.k, BHkv, a.keys, D, kp), take_pieces<float>(in.v, BHkv, a.keys, D, kp),
                                                          in.bias, in, BH * Qr * D, BH * Qr);
      for (int call = 0; call < 3; ++call) {
        ring_attention(rank, rp, d.buffers());
        if (r == 0) buffers_after[call] = resource_counts(gpu()).buffers;
      }
      put_pieces<float>(d.out.download<float>(BH * Qr * D), got.out, BH, a.queries, D, qp);
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(normalised_error(got.out, one.out), kTolF32);
  EXPECT_EQ(buffers_after[1], buffers_after[2]);
  }
}

// Sharded decoding whose batch changes from step to step (sequences joining and leaving, as in
// continuous batching): after a step of the largest batch, smaller ones create no Vulkan object
// (the call's scratch is taken from what the larger one left, as a plan's envelope would).
TEST_F(RingAttention, ShardedStepsWhoseBatchShrinksCreateNothing) {
  for (AttentionBias mode : {AttentionBias::Alibi, AttentionBias::T5}) {
    std::mt19937 rng(61);
    ShardedParams sp{relpos::test::random_ring_params(rng, mode, DType::F32, 2), 2, RingGather::All};
    AttentionParams& a = sp.attention;
    a.heads = 4;
    a.kv_heads = 2;
    a.queries = 1;
    a.keys = 3000;  // split keys: partial results in the call's scratch
    a.query_offset = a.keys - 1;
    a.causal = true;
    SCOPED_TRACE(describe(a));
    const std::vector<std::uint32_t> batches = {4, 3, 2, 4, 1, 3};
    std::vector<std::vector<std::uint64_t>> objects(2);
    InProcessRingOptions options;
    options.context = relpos::test::validated_context_options();
    options.timeout = kTimeout;
    const InProcessRingOutcome outcome = run_in_process_ring(2, options, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
      std::vector<relpos::test::DeviceInputs> inputs;
      std::vector<ShardedParams> calls;
      for (std::uint32_t B : {4u, 3u, 2u, 1u}) {
        ShardedParams c = sp;
        c.attention.batch = B;
        std::mt19937 draws(B);
        const WholeInputs in = random_whole_inputs(draws, c.attention);
        const auto kp = c.key_pieces(r);
        const std::uint64_t D = a.head_dim, BHkv = std::uint64_t{B} * a.kv_heads;
        inputs.push_back(relpos::test::upload(ctx, a.dtype, in.q, take_pieces<float>(in.k, BHkv, a.keys, D, kp), take_pieces<float>(in.v, BHkv, a.keys, D, kp),
                                              in.bias, in, c.attention.rows() * D, c.attention.rows()));
        calls.push_back(c);
      }
      RingRank rank(ctx, t);
      for (std::uint32_t B : batches) {
        const std::size_t i = 4 - B;
        sharded_attention(rank, calls[i], inputs[i].buffers());
        objects[r].push_back(resource_counts(ctx).objects());
      }
    });
    ASSERT_TRUE(outcome.ok()) << outcome.describe();
    for (std::uint32_t r = 0; r < 2; ++r)
      for (std::size_t step = 1; step < batches.size(); ++step)
        EXPECT_EQ(objects[r][step], objects[r][0]) << "rank " << r << ", step " << step << " (batch " << batches[step] << ")";
  }
}

// One RingRank per rank through calls of other shapes (larger, then smaller and uneven, without and
// with lse, both layouts): what it keeps is cut to each call.
TEST_F(RingAttention, ShapesChangeBetweenCalls) {
  std::mt19937 rng(19);
  std::vector<RingParams> calls;
  for (std::uint32_t n : {40u, 23u, 31u}) {
    RingParams rp{relpos::test::random_ring_params(rng, kModes[n % kModeCount], n == 23 ? DType::F16 : DType::F32, 6), 3,
                  n == 31 ? RingLayout::Zigzag : RingLayout::Contiguous};
    rp.attention.queries = rp.attention.keys = n;
    rp.attention.causal = true;  // rank 0 meets one block: its result goes straight to the output
    rp.attention.query_offset = 0;
    rp.attention.batch = 1;
    rp.attention.heads = 2;
    rp.attention.kv_heads = 1;
    calls.push_back(rp);
  }
  std::vector<WholeInputs> inputs;
  for (const RingParams& rp : calls) inputs.push_back(random_whole_inputs(rng, rp.attention));
  std::vector<AttentionResult> got;
  for (const RingParams& rp : calls) got.push_back(empty_result(rp.attention));
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 3), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    // The first two calls without an lse buffer: the rank keeps one, of the first call's size.
    for (std::size_t c = 0; c < calls.size(); ++c) relpos::test::ring_rank(rank, calls[c], inputs[c], got[c], c >= 2);
  });
  ASSERT_TRUE(outcome.ok()) << outcome.describe();
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const AttentionResult one = relpos::test::single_device(gpu(), calls[c].attention, inputs[c]);
    EXPECT_LE(normalised_error(got[c].out, one.out), calls[c].attention.dtype == DType::F16 ? kTolF16 : kTolF32) << "call " << c;
    if (c >= 2) EXPECT_LE(normalised_error(got[c].lse, one.lse), kTolF32) << "call " << c;
  }
}

TEST_F(RingAttention, ShardedDecodingMatchesSingleDevice) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 2 * kModeCount; ++trial) {
    const std::uint32_t ranks = 1 + trial % 4;
    ShardedParams sp{relpos::test::random_ring_params(rng, kModes[trial % kModeCount], trial % 3 ? DType::F32 : DType::F16, ranks), ranks,
                     trial % 2 ? RingGather::All : RingGather::Root, static_cast<std::uint32_t>(trial) % ranks};
    AttentionParams& p = sp.attention;
    p.queries = 1 + trial % 3;
    p.keys = ranks + 5 + static_cast<std::uint32_t>(rng() % 80);
    p.query_offset = trial % 5 == 4 ? 3 : std::int64_t{p.keys} - p.queries;  // a decoding step, or queries among the keys
    SCOPED_TRACE(describe(p) + " ranks=" + std::to_string(ranks));
    const WholeInputs in = random_whole_inputs(rng, p);
    const AttentionResult one = relpos::test::single_device(gpu(), p, in);
    const AttentionResult want = attention_reference(p, in.host());
    const std::vector<AttentionResult> got = run_sharded(sp, in);
    const double tol = p.dtype == DType::F16 ? kTolF16 : kTolF32;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      if (sp.gather == RingGather::Root && r != sp.root) {
        EXPECT_TRUE(got[r].out.empty()) << "rank " << r;
        continue;
      }
      EXPECT_LE(normalised_error(got[r].out, one.out), tol) << "rank " << r;
      EXPECT_LE(normalised_error(got[r].lse, one.lse), kTolF32) << "rank " << r;
      EXPECT_LE(normalised_error(got[r].out, want.out), tol) << "rank " << r;
    }
  }
}

// Each row's lse within 2^-22 of its own size (normalised_error divides by the largest |lse|, up
// to 1e9 here, which would let a wrong reference pass).
void expect_lse_rows(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::isnan(got[i]) && std::isnan(want[i])) && !(got[i] == want[i]) &&
        !(std::abs(double{got[i]} - want[i]) <= 0x1p-22 * std::max(1.0, std::abs(double{want[i]}))) && ++bad <= 3)
      ADD_FAILURE() << what << " lse row " << i << ": " << got[i] << " against " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

// ALiBi with the queries far past (or before) every key: logits near -slope·1e6 .. -slope·2^31.
// Each block's lse stays relative to its rows' nearest-key bias and the merges weigh the blocks by
// exact differences of those references, so the ring and sharded calls match the reference as one
// device does (before: a block's lse rounded at its size, 2.6e-3 off at an offset of 1e6).
TEST_F(RingAttention, AlibiFarFromTheKeysMergesExactly) {
  std::mt19937 rng(41);
  const std::int64_t far = (std::int64_t{1} << 31) - 400;
  const std::int64_t offsets[] = {1000000, -1000000, 100000000, far};
  for (std::uint32_t ranks : {2u, 3u}) {
    for (std::int64_t offset : offsets) {
      for (RingLayout layout : {RingLayout::Contiguous, RingLayout::Zigzag}) {
        RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::Alibi, DType::F32, 2 * ranks), ranks, layout};
        AttentionParams& p = rp.attention;
        p.heads = 3;
        p.kv_heads = 1;
        p.keys = 2 * ranks * 7 + ranks;  // uneven chunks
        p.queries = offset == far ? 2 * ranks : p.keys;
        p.causal = offset > 0 && offset != far;
        p.query_offset = offset == far ? far - p.queries : offset;
        SCOPED_TRACE(describe(p) + " ranks=" + std::to_string(ranks) + " " + std::string(ring_layout_name(layout)));
        WholeInputs in = random_whole_inputs(rng, p);
        in.bias = {0.5f, 0.0039f, 0.0032f};  // slopes that are not powers of two: products round
        const AttentionResult want = attention_reference(p, in.host());
        const AttentionResult one = relpos::test::single_device(gpu(), p, in);
        AttentionResult got = empty_result(p);
        const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), ranks), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
          RingRank rank(ctx, t);
          relpos::test::ring_rank(rank, rp, in, got);
        });
        ASSERT_TRUE(outcome.ok()) << outcome.describe();
        EXPECT_LE(normalised_error(one.out, want.out), kTolF32);
        EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
        expect_lse_rows(got.lse, want.lse, "ring");

        ShardedParams sp{p, ranks, RingGather::All, 0};
        sp.attention.queries = 2;
        sp.attention.causal = false;
        const WholeInputs sin = [&] {
          WholeInputs x = random_whole_inputs(rng, sp.attention);
          x.bias = in.bias;
          return x;
        }();
        const AttentionResult swant = attention_reference(sp.attention, sin.host());
        const std::vector<AttentionResult> sgot = run_sharded(sp, sin);
        EXPECT_LE(normalised_error(sgot[ranks - 1].out, swant.out), kTolF32);
        expect_lse_rows(sgot[ranks - 1].lse, swant.lse, "sharded");
      }
    }
  }
}

// The same for sharded decoding whose ranks split their keys (1,500 a rank, one query): each rank's
// splits share its rows' reference, its merge keeps the lse relative to it and passes it on.
TEST_F(RingAttention, AlibiFarFromTheKeysShardedWithSplitKeys) {
  std::mt19937 rng(43);
  for (std::uint32_t ranks : {2u, 3u}) {
    for (std::int64_t offset : {std::int64_t{1000000}, std::int64_t{-1000000}, (std::int64_t{1} << 31) - 5000}) {
      ShardedParams sp{relpos::test::random_ring_params(rng, AttentionBias::Alibi, DType::F32, ranks), ranks, RingGather::Root, ranks - 1};
      AttentionParams& p = sp.attention;
      p.heads = 3;
      p.kv_heads = 1;
      p.queries = 1;
      p.keys = ranks * 1500;
      p.causal = false;
      p.query_offset = offset;
      SCOPED_TRACE(describe(p) + " ranks=" + std::to_string(ranks));
      WholeInputs in = random_whole_inputs(rng, p);
      in.bias = {0.5f, 0.0039f, 0.0032f};
      const AttentionResult want = attention_reference(p, in.host());
      const std::vector<AttentionResult> got = run_sharded(sp, in);
      EXPECT_LE(normalised_error(got[sp.root].out, want.out), kTolF32);
      expect_lse_rows(got[sp.root].lse, want.lse, "sharded");
    }
  }
}

// Sharded, causal: the query at key 2,200 (rank 1's keys), the last ranks' keys all after it (filled
// with -inf: their reference slots are never read), every rank's 1,500 keys split, slopes down to
// 0.001: the ranks' references differ by more than a factor of two (0 against 700·slope) while
// their parts both weigh, so the merge must move to the reference of the larger maximum.
TEST_F(RingAttention, AlibiRanksWhoseReferencesDifferWidely) {
  std::mt19937 rng(9);
  for (std::uint32_t ranks : {3u, 4u}) {
    ShardedParams sp{relpos::test::random_ring_params(rng, AttentionBias::Alibi, DType::F32, ranks), ranks, RingGather::All, 0};
    AttentionParams& p = sp.attention;
    p.batch = 1;
    p.heads = 4;
    p.kv_heads = 2;
    p.head_dim = 16;
    p.queries = 1;
    p.keys = ranks * 1500;
    p.causal = true;
    p.query_offset = 2200;
    SCOPED_TRACE(describe(p) + " ranks=" + std::to_string(ranks));
    WholeInputs in = random_whole_inputs(rng, p);
    in.bias = {0.5f, 0.0039f, 0.0032f, 0.001f};
    const AttentionResult want = attention_reference(p, in.host());
    const std::vector<AttentionResult> got = run_sharded(sp, in);
    for (std::uint32_t r = 0; r < ranks; ++r) {
      EXPECT_LE(normalised_error(got[r].out, want.out), kTolF32) << "rank " << r;
      expect_lse_rows(got[r].lse, want.lse, "sharded rank " + std::to_string(r));
    }
  }
}

// A NaN in one kv head's key far from the queries: that kv head's rows NaN (out and lse), through
// the merges of parts with references of their own, the other rows exact; f16 and grouped-query
// heads far from the keys.
TEST_F(RingAttention, AlibiFarNaNAndHalfPrecision) {
  std::mt19937 rng(8);
  for (const DType dtype : {DType::F32, DType::F16})
    for (std::uint32_t ranks : {2u, 4u}) {
      RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::Alibi, dtype, 2 * ranks), ranks, RingLayout::Zigzag};
      AttentionParams& p = rp.attention;
      p.batch = 2;
      p.heads = 4;
      p.kv_heads = 2;
      p.head_dim = 16;
      p.keys = p.queries = 2 * ranks * 4 + 3;
      p.causal = true;
      p.query_offset = 1000000;
      SCOPED_TRACE(describe(p) + " ranks=" + std::to_string(ranks));
      WholeInputs in = random_whole_inputs(rng, p);
      in.bias = {0.5f, 0.0039f, 0.0032f, 0.77f};
      const bool nan = dtype == DType::F32;
      if (nan) in.k[(1 * p.keys + 3) * p.head_dim + 1] = std::numeric_limits<float>::quiet_NaN();  // batch 0, kv head 1, key 3
      const AttentionResult want = attention_reference(p, in.host());
      AttentionResult got = empty_result(p);
      const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), ranks), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
        RingRank rank(ctx, t);
        relpos::test::ring_rank(rank, rp, in, got);
      });
      ASSERT_TRUE(outcome.ok()) << outcome.describe();
      const double tol = dtype == DType::F16 ? kTolF16 : kTolF32;
      relpos::test::expect_nan_rows_match(got.out, want.out, p.head_dim, tol, "out");
      relpos::test::expect_nan_rows_match(got.lse, want.lse, 1, kTolF32, "lse");
      expect_lse_rows(got.lse, want.lse, "ring");
    }
}

// A rank's buffers for sharded paged attention: q (as given), its cache, the bias inputs of `in`,
// out and lse for a's rows, and the query lengths where given.
struct PagedRankBuffers {
  Buffer q, k, v, table, held, out, lse, bias, rel_keys, rel_values, query_lengths;
  PagedRankBuffers(Context& ctx, const std::vector<float>& q_values, const detail::PagedPart& slices, const WholeInputs& in, const AttentionParams& a,
                   const std::vector<std::int32_t>& lengths_of_queries = {})
      : q(make_buffer(ctx, q_values)), k(make_buffer(ctx, slices.k)), v(make_buffer(ctx, slices.v)), table(make_buffer(ctx, slices.table)),
        held(make_buffer(ctx, slices.lengths)), out(ctx, a.rows() * a.head_dim * 4), lse(ctx, a.rows() * 4) {
    if (!in.bias.empty()) bias = make_buffer(ctx, in.bias);
    if (!in.rel_keys.empty()) {
      rel_keys = make_buffer(ctx, in.rel_keys);
      rel_values = make_buffer(ctx, in.rel_values);
    }
    if (!lengths_of_queries.empty()) query_lengths = make_buffer(ctx, lengths_of_queries);
  }
  AttentionBuffers buffers() const {
    AttentionBuffers ab{&q, &k, &v, &out, &lse};
    if (bias.handle()) ab.bias = &bias;
    if (rel_keys.handle()) {
      ab.rel_keys = &rel_keys;
      ab.rel_values = &rel_values;
    }
    ab.block_table = &table;
    ab.cache_lengths = &held;
    if (query_lengths.handle()) ab.query_lengths = &query_lengths;
    return ab;
  }
};

// The reference of sequence b of `whole` alone ([B, Hkv, Lmax, D] keys, q [B, H, whole.queries, D]):
// its last n queries over its first `length` keys, the queries being the sequence's last n positions.
AttentionResult sequence_reference(const WholeInputs& in, const AttentionParams& whole, std::uint32_t Lmax, std::uint32_t b,
                                   std::int32_t length, std::uint32_t n) {
  const std::uint32_t Q = whole.queries, D = whole.head_dim, Hkv = whole.kv_heads;
  AttentionParams one = whole;
  one.batch = 1;
  one.queries = n;
  one.keys = static_cast<std::uint32_t>(length);
  one.query_offset = length - std::int64_t{n};
  WholeInputs seq = in;
  seq.q.clear();
  for (std::uint32_t h = 0; h < whole.heads; ++h) {
    const std::size_t from = ((std::size_t{b} * whole.heads + h) * Q + (Q - n)) * D;
    seq.q.insert(seq.q.end(), in.q.begin() + from, in.q.begin() + from + std::size_t{n} * D);
  }
  seq.k.clear();
  seq.v.clear();
  for (std::uint32_t h = 0; h < Hkv; ++h) {
    const std::size_t from = (std::size_t{b} * Hkv + h) * Lmax * D;
    seq.k.insert(seq.k.end(), in.k.begin() + from, in.k.begin() + from + one.keys * D);
    seq.v.insert(seq.v.end(), in.v.begin() + from, in.v.begin() + from + one.keys * D);
  }
  return attention_reference(one, seq.host());
}

// Sharded decoding over paged caches: every rank holds, of each of two sequences, a slice of
// S keys counted from the sequence's end (rank r: keys [L - (r+1)S, L - rS)), in a cache of its own
// with the blocks in a shuffled order; its calls' query_offset is r·S.
TEST_F(RingAttention, ShardedPagedDecoding) {
  std::mt19937 rng(37);
  for (AttentionBias mode : {AttentionBias::None, AttentionBias::T5, AttentionBias::Alibi, AttentionBias::Kerple, AttentionBias::Shaw,
                             AttentionBias::Sandwich}) {
    const std::uint32_t R = 3, S = 48, bs = 16, Q = 2;
    const std::vector<std::int32_t> lengths = {130, 61};  // the second leaves the last rank empty
    AttentionParams whole = relpos::test::random_ring_params(rng, mode, DType::F32, R);
    whole.batch = 2;
    whole.queries = Q;
    whole.causal = true;
    whole.t5.bidirectional = false;
    SCOPED_TRACE(describe(whole));
    // The whole sequences, contiguous: [B, Hkv, Lmax, D], and the reference per sequence.
    const std::uint32_t Lmax = 130, D = whole.head_dim, Hkv = whole.kv_heads;
    whole.keys = Lmax;
    const WholeInputs in = random_whole_inputs(rng, whole);
    std::vector<float> want_out, want_lse;
    for (std::uint32_t b = 0; b < 2; ++b) {
      const AttentionResult r = sequence_reference(in, whole, Lmax, b, lengths[b], Q);
      want_out.insert(want_out.end(), r.out.begin(), r.out.end());
      want_lse.insert(want_lse.end(), r.lse.begin(), r.lse.end());
    }
    AttentionResult got;
    const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), R), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
      ShardedParams sp{whole, R, RingGather::Root, 1};
      AttentionParams& a = sp.attention;
      const detail::PagedPart slices = detail::sharded_paged_part(in.k, in.v, whole, Lmax, lengths, r, S, bs, a);
      PagedRankBuffers bufs(ctx, in.q, slices, in, a);
      const AttentionBuffers ab = bufs.buffers();
      Buffer &out = bufs.out, &lse = bufs.lse;
      RingRank rank(ctx, t);
      sharded_attention(rank, sp, ab);
      if (r == sp.root) got = {out.download<float>(a.rows() * D), lse.download<float>(a.rows())};
    });
    ASSERT_TRUE(outcome.ok()) << outcome.describe();
    EXPECT_LE(normalised_error(got.out, want_out), kTolF32);
    EXPECT_LE(normalised_error(got.lse, want_lse), kTolF32);
  }
}

// Chunked prefill and decoding in one sharded call: packed queries (query_lengths, FlashAttention's
// varlen layout) over paged caches sliced across the ranks. Sequences of 0, 1, a few and many
// queries, one whose chunk is longer than the last rank's slice (its first queries lie before that
// slice: they see none of its keys) and one that leaves a rank empty; every mode a paged sharded
// call takes. Each sequence equals its reference alone.
TEST_F(RingAttention, ShardedPagedPackedChunkedPrefill) {
  std::mt19937 rng(59);
  for (AttentionBias mode : {AttentionBias::None, AttentionBias::T5, AttentionBias::Alibi, AttentionBias::Kerple, AttentionBias::Shaw,
                             AttentionBias::Sandwich}) {
    const std::uint32_t R = 3, S = 48, bs = 16, Lmax = 130;
    const std::vector<std::int32_t> lengths = {130, 61, 40, 97, 9}, query_lengths = {60, 1, 0, 17, 9};
    AttentionParams whole = relpos::test::random_ring_params(rng, mode, DType::F32, R);
    whole.batch = static_cast<std::uint32_t>(lengths.size());
    whole.queries = 60;  // the longest sequence's
    whole.keys = Lmax;
    whole.causal = mode != AttentionBias::Kerple;  // (one mode both ways)
    whole.t5.bidirectional = false;
    SCOPED_TRACE(describe(whole));
    const std::uint32_t D = whole.head_dim, H = whole.heads;
    const WholeInputs in = random_whole_inputs(rng, whole);  // q [B, H, 60, D]: a sequence's last n rows are its queries
    // Packed q and the wanted rows, token-major: [T, H, D] and [T, H].
    std::vector<float> q_packed, want_out, want_lse;
    for (std::uint32_t b = 0; b < whole.batch; ++b) {
      const std::uint32_t n = static_cast<std::uint32_t>(query_lengths[b]);
      if (n == 0) continue;
      const AttentionResult ref = sequence_reference(in, whole, Lmax, b, lengths[b], n);
      for (std::uint32_t i = 0; i < n; ++i)
        for (std::uint32_t h = 0; h < H; ++h) {
          const std::size_t from = ((std::size_t{b} * H + h) * whole.queries + (whole.queries - n + i)) * D;
          q_packed.insert(q_packed.end(), in.q.begin() + from, in.q.begin() + from + D);
          want_out.insert(want_out.end(), ref.out.begin() + (std::size_t{h} * n + i) * D, ref.out.begin() + (std::size_t{h} * n + i + 1) * D);
          want_lse.push_back(ref.lse[std::size_t{h} * n + i]);
        }
    }
    whole.total_queries = static_cast<std::uint32_t>(q_packed.size() / (std::size_t{H} * D));
    for (Kernels kernels : {Kernels::Cpu, Kernels::Gpu}) {
      SCOPED_TRACE(kernels == Kernels::Cpu ? "cpu kernels" : "gpu kernels");
      ContextOptions options = relpos::test::validated_context_options();
      options.tuning.kernels = kernels;
      Context ctx_of_class(options);
      AttentionResult got;
      const InProcessRingOutcome outcome = run_in_process_ring(shared(ctx_of_class, R), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
        ShardedParams sp{whole, R, RingGather::All};
        const detail::PagedPart slices = detail::sharded_paged_part(in.k, in.v, whole, Lmax, lengths, r, S, bs, sp.attention);
        PagedRankBuffers bufs(ctx, q_packed, slices, in, sp.attention, query_lengths);
        RingRank rank(ctx, t);
        sharded_attention(rank, sp, bufs.buffers());
        if (r == 2) got = {bufs.out.download<float>(sp.attention.rows() * D), bufs.lse.download<float>(sp.attention.rows())};
      });
      ASSERT_TRUE(outcome.ok()) << outcome.describe();
      EXPECT_LE(normalised_error(got.out, want_out), kTolF32);
      EXPECT_LE(normalised_error(got.lse, want_lse), kTolF32);
    }
  }
}

// Sharded decoding over caches in the formats engines keep (bf16, q8_0, fp8 e4m3 with a scale a kv
// head): each rank's keys and values encoded as its own contiguous cache; the merged result equals
// the reference over the decoded values (only partial results travel, as float32).
TEST_F(RingAttention, ShardedDecodingOverEveryCacheFormat) {
  std::mt19937 rng(47);
  for (const CacheFormat f : {CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
    for (const AttentionBias mode : {AttentionBias::None, AttentionBias::Alibi, AttentionBias::T5}) {
      const std::uint32_t ranks = mode == AttentionBias::T5 ? 3 : 2;
      ShardedParams sp{relpos::test::random_ring_params(rng, mode, DType::F32, ranks), ranks, RingGather::Root, ranks - 1};
      AttentionParams& p = sp.attention;
      p.heads = 4;
      p.kv_heads = 2;
      p.head_dim = 64;
      p.queries = 2;
      p.keys = ranks * 40 + 7;
      p.query_offset = std::int64_t{p.keys} - p.queries;
      p.causal = true;
      p.cache_format = f;
      if (f == CacheFormat::FP8_E4M3) {
        p.k_scales = {0.01f, 0.02f};
        p.v_scales = {0.015f, 0.005f};
      }
      SCOPED_TRACE(describe(p) + " cache " + std::string(cache_format_name(f)));
      WholeInputs in = random_whole_inputs(rng, p);
      // The caches as the format stores them (the reference decodes them).
      const std::uint64_t D = p.head_dim, rows = std::uint64_t{p.batch} * p.kv_heads * p.keys, row_bytes = cache_row_bytes(f, p.head_dim);
      std::vector<std::uint8_t> k_bytes(rows * row_bytes), v_bytes(rows * row_bytes);
      for (std::uint64_t n = 0; n < rows; ++n) {
        const std::uint32_t h = static_cast<std::uint32_t>(n / p.keys % p.kv_heads);
        for (auto [values, bytes, scales] : {std::tuple{&in.k, &k_bytes, &p.k_scales}, std::tuple{&in.v, &v_bytes, &p.v_scales}})
          encode_cache_row(f, std::span<const float>(values->data() + n * D, D), std::span<std::uint8_t>(bytes->data() + n * row_bytes, row_bytes),
                           scales->empty() ? 1.0f : (*scales)[h]);
      }
      AttentionHostInputs host = in.host();
      host.k = host.v = {};
      host.k_bytes = k_bytes;
      host.v_bytes = v_bytes;
      const AttentionResult want = attention_reference(p, host);
      AttentionResult got;
      const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), ranks), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
        const auto kp = sp.key_pieces(r);
        const std::uint64_t outer = std::uint64_t{p.batch} * p.kv_heads;
        Buffer qb = make_buffer(ctx, in.q), kb = make_buffer(ctx, take_pieces<std::uint8_t>(k_bytes, outer, p.keys, row_bytes, kp)),
               vb = make_buffer(ctx, take_pieces<std::uint8_t>(v_bytes, outer, p.keys, row_bytes, kp));
        Buffer out(ctx, p.rows() * D * 4), lse(ctx, p.rows() * 4), bias;
        AttentionBuffers ab{&qb, &kb, &vb, &out, &lse};
        if (sp.local_bias_elements(r) > 0) ab.bias = &(bias = make_buffer(ctx, in.bias));
        RingRank rank(ctx, t);
        sharded_attention(rank, sp, ab);
        if (r == sp.root) got = {out.download<float>(p.rows() * D), lse.download<float>(p.rows())};
      });
      ASSERT_TRUE(outcome.ok()) << outcome.describe();
      EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
      expect_lse_rows(got.lse, want.lse, "sharded");
    }
}

// A paged rank beside a contiguous one: named as the setting that differs (the paged ranks' key
// counts are their own, sent as 0, so that both send as many settings).
TEST_F(RingAttention, PagedAndContiguousRanksAreNamed) {
  std::vector<std::string> errors(2);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 2), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    ShardedParams sp{AttentionParams{.heads = 2, .kv_heads = 1, .queries = 1, .keys = 16, .head_dim = 8}, 2};
    if (r == 0) sp.attention.paged = {16, 2, 1};
    Buffer any(ctx, 4096);
    RingRank rank(ctx, t);
    try {
      sharded_attention(rank, sp, AttentionBuffers{&any, &any, &any, &any});
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  for (std::uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("paged = "), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("disagree"), std::string::npos) << errors[r];
  }
  (void)outcome;
}

// After a failure a ring stops for good: every later call on its RingRanks says so, instead of
// repeating the old failure as its own.
TEST_F(RingAttention, ACallAfterAFailureSaysTheRingStopped) {
  std::mt19937 rng(49);
  RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::None, DType::F32, 2), 2, RingLayout::Contiguous};
  const WholeInputs in = random_whole_inputs(rng, rp.attention);
  std::vector<std::string> first(2), second(2);
  auto transports = make_in_process_ring(2, kTimeout);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FaultyTransport t(*transports[r], r == 1 ? "step 0" : "", FaultyTransport::Fault::Throw);  // after the admission
      RingRank rank(gpu(), t);
      AttentionResult got = empty_result(rp.attention);
      try {
        relpos::test::ring_rank(rank, rp, in, got);
      } catch (const RingError& e) {
        first[r] = e.what();
      }
      EXPECT_TRUE(rank.stopped());
      try {
        relpos::test::ring_rank(rank, rp, in, got);
      } catch (const RingError& e) {
        second[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (std::uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(first[r].find("injected transport error"), std::string::npos) << first[r];
    EXPECT_NE(second[r].find("stopped in an earlier call"), std::string::npos) << second[r];
    EXPECT_NE(second[r].find("make a new transport and RingRank"), std::string::npos) << second[r];
  }
}

// A call every rank refuses by its parameters (validate()) leaves the ring running: the same
// RingRanks then run a good call.
TEST_F(RingAttention, ARefusedCallLeavesTheRingRunning) {
  std::mt19937 rng(53);
  RingParams good{relpos::test::random_ring_params(rng, AttentionBias::Alibi, DType::F32, 2), 2, RingLayout::Contiguous};
  good.attention.head_dim = 32;
  RingParams bad = good;
  bad.attention.cache_format = CacheFormat::Q8_0;  // refused by every rank's validate()
  const WholeInputs in = random_whole_inputs(rng, good.attention);
  const AttentionResult want = attention_reference(good.attention, in.host());
  AttentionResult got = empty_result(good.attention);
  std::vector<std::string> refused(2);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 2), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    for (int call = 0; call < 2; ++call) {
      try {
        relpos::test::ring_rank(rank, bad, in, got);
      } catch (const InvalidArgument& e) {
        refused[r] = e.what();
      }
      relpos::test::ring_rank(rank, good, in, got);
    }
  });
  ASSERT_TRUE(outcome.ok()) << outcome.describe();
  for (std::uint32_t r = 0; r < 2; ++r) EXPECT_NE(refused[r].find("cache_format = q8_0"), std::string::npos) << refused[r];
  EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
  EXPECT_LE(normalised_error(got.lse, want.lse), kTolF32);
}

TEST_F(RingAttention, BadParametersAreRefused) {
  const AttentionParams a{.heads = 2, .kv_heads = 1, .queries = 7, .keys = 9, .head_dim = 8};
  expect_invalid([&] { RingParams{a, 0}.validate(); }, "ranks = 0");
  expect_invalid([&] { RingParams{a, 8}.validate(); }, "queries = 7: must be >= 8");
  expect_invalid([&] { RingParams{a, 4, RingLayout::Zigzag}.validate(); }, "queries = 7: must be >= 8");
  AttentionParams more_queries = a;
  more_queries.queries = 20;
  expect_invalid([&] { RingParams{more_queries, 5, RingLayout::Zigzag}.validate(); }, "keys = 9: must be >= 10");
  AttentionParams memory = a;
  memory.memory_prefix = 2;
  expect_invalid([&] { RingParams{memory, 2}.validate(); }, "memory_prefix");
  AttentionParams splits = a;
  splits.key_splits = 2;
  expect_invalid([&] { RingParams{splits, 2}.validate(); }, "key_splits");
  AttentionParams packed = a;
  packed.total_queries = 3;
  expect_invalid([&] { RingParams{packed, 2}.validate(); }, "total_queries = 3: must be 0 in ring attention (packed queries over a paged cache are sharded");
  expect_invalid([&] { ShardedParams{a, 10}.validate(); }, "keys = 9: must be >= ranks = 10");
  expect_invalid([&] { ShardedParams{a, 2, RingGather::Root, 2}.validate(); }, "root = 2: must be < ranks = 2 (ranks are numbered 0 .. 1)");
  AttentionParams paged_row = a;
  paged_row.bias = AttentionBias::Distance;
  paged_row.paged = {16, 4, 1};
  paged_row.keys = 16;
  expect_invalid([&] { ShardedParams{paged_row, 2}.validate(); }, "paged cache");
  expect_invalid([&] { make_in_process_ring(0, kTimeout); }, "ranks = 0");
}

// A rank's pieces: a rank past the ring is refused with the ranks there are (a one-rank ring's bare
// `rank = 1: must be < ranks = 1` read like a misprint), and ranks outside [1, kMaxRanks] as ranks
// (ranks = 0 had been blamed on the rank; zigzag's 2 * ranks chunks of 2^31 ranks wrapped to none,
// a division by zero).
TEST(RingPieces, ARankPastTheRingIsRefusedWithTheRanksThereAre) {
  const AttentionParams a{.heads = 2, .kv_heads = 1, .queries = 7, .keys = 9, .head_dim = 8};
  expect_invalid([&] { (void)RingParams{a, 1}.query_pieces(1); }, "rank = 1: must be < ranks = 1 (ranks are numbered from 0: a ring of one rank has rank 0 only)");
  expect_invalid([&] { (void)RingParams{a, 3, RingLayout::Zigzag}.local_keys(3); }, "rank = 3: must be < ranks = 3 (ranks are numbered 0 .. 2)");
  expect_invalid([&] { (void)ShardedParams{a, 1}.key_pieces(1); }, "rank = 1: must be < ranks = 1 (ranks are numbered from 0: a ring of one rank has rank 0 only)");
  expect_invalid([&] { (void)RingParams{a, 0}.query_pieces(0); }, "ranks = 0: must be in [1, 4096]");
  expect_invalid([&] { (void)ShardedParams{a, 0}.key_pieces(0); }, "ranks = 0: must be in [1, 4096]");
  expect_invalid([&] { (void)RingParams{a, 1u << 31, RingLayout::Zigzag}.query_pieces(0); }, "ranks = 2147483648: must be in [1, 4096]");
  EXPECT_EQ((RingParams{a, 1}.query_pieces(0)), (std::vector<RingPiece>{{0, 7}}));
  EXPECT_EQ((ShardedParams{a, 1}.key_pieces(0)), (std::vector<RingPiece>{{0, 9}}));
}

namespace {
// Every rank's InvalidArgument text (empty where none) of a ring call that rank 1 makes with
// `change`d settings (its pieces sized by the agreed call), each rank then checked to run on (and,
// with `again`, making the agreed call, whose result lands in `got`).
std::vector<std::string> refusals_with_rank_1_changed(const RingParams& rp, const WholeInputs& in, const std::function<void(RingParams&)>& change,
                                                      AttentionResult& got, bool again) {
  std::vector<std::string> errors(rp.ranks);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), rp.ranks), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingParams mine = rp;
    if (r == 1) change(mine);
    RingRank rank(ctx, t);
    try {
      relpos::test::ring_rank(rank, rp, in, got, true, &mine);
    } catch (const InvalidArgument& e) {
      errors[r] = e.what();
    }
    EXPECT_FALSE(rank.stopped());
    if (again) relpos::test::ring_rank(rank, rp, in, got);
  });
  EXPECT_TRUE(outcome.ok()) << outcome.describe();
  return errors;
}
}  // namespace

// Ranks that disagree on the shape are all refused before any data moves, every one of them with
// InvalidArgument naming the difference, whatever the timing; the ring then runs on.
TEST_F(RingAttention, RanksThatDisagreeAreAllRefused) {
  std::mt19937 rng(41);
  RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::None, DType::F32, 3), 3};
  rp.attention.queries = rp.attention.keys = 30;
  rp.attention.scale = 0.25f;
  const WholeInputs in = random_whole_inputs(rng, rp.attention);
  const AttentionResult want = attention_reference(rp.attention, in.host());
  // Rank 1 differs in one setting; the ranks agree before any buffer is checked, so a bias rank 1
  // alone takes (and has no buffer for) is named as the disagreement, by the family's name, and a
  // scale by its value. Each rank names its own value and the first other rank's that differs.
  struct Case { const char* what; std::function<void(RingParams&)> change; std::string value0, value1; };
  const std::string causal0 = rp.attention.causal ? "causal = 1" : "causal = 0", causal1 = rp.attention.causal ? "causal = 0" : "causal = 1";
  const std::vector<Case> cases = {
      {"causal", [](RingParams& p) { p.attention.causal = !p.attention.causal; }, causal0, causal1},
      {"bias", [](RingParams& p) { p.attention.bias = AttentionBias::Alibi; }, "bias = none", "bias = alibi"},
      {"scale", [](RingParams& p) { p.attention.scale = 0.5f; }, "scale = 0.25", "scale = 0.5"},
      // A value no name belongs to (rank 1 refuses it too): shown as its number.
      {"layout", [](RingParams& p) { p.layout = static_cast<RingLayout>(5); }, "layout = contiguous", "layout = 5"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    AttentionResult got = empty_result(rp.attention);
    const std::vector<std::string> errors = refusals_with_rank_1_changed(rp, in, c.change, got, true);
    for (std::uint32_t r = 0; r < 3; ++r) {
      EXPECT_NE(errors[r].find("the ranks disagree"), std::string::npos) << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find(c.what), std::string::npos) << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find(c.value0), std::string::npos) << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find(c.value1), std::string::npos) << "rank " << r << ": " << errors[r];
    }
    EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
  }
}

// Every setting the ranks exchange is compared: one rank differing in any one of them (every field
// of detail::ring_fields, which the cases must cover) is refused on both ranks, naming it; a rank
// that computed with its own T5 buckets or KERPLE variant would return wrong numbers silently.
TEST_F(RingAttention, EveryAdmittedFieldIsCompared) {
  std::mt19937 rng(47);
  RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::T5, DType::F32, 2), 2};
  rp.attention.queries = rp.attention.keys = 12;
  rp.attention.query_offset = 0;
  const WholeInputs in = random_whole_inputs(rng, rp.attention);
  using Change = std::function<void(AttentionParams&)>;
  const std::vector<std::pair<std::string, Change>> cases = {
      {"batch", [](AttentionParams& a) { ++a.batch; }},
      {"heads", [](AttentionParams& a) { a.heads *= 2; }},
      {"kv_heads", [](AttentionParams& a) { a.kv_heads = a.kv_heads == 1 ? 2 : 1; }},
      {"queries", [](AttentionParams& a) { a.queries += 2; }},
      {"total_queries", [](AttentionParams& a) { a.total_queries = 3; }},
      {"keys", [](AttentionParams& a) { a.keys += 2; }},
      {"head_dim", [](AttentionParams& a) { a.head_dim = 16; }},
      {"dtype", [](AttentionParams& a) { a.dtype = DType::F16; }},
      {"out_dtype", [](AttentionParams& a) { a.out_dtype = DType::F16; }},
      {"scale", [](AttentionParams& a) { a.scale = a.effective_scale() * 2; }},
      {"causal", [](AttentionParams& a) { a.causal = !a.causal; }},
      {"bias", [](AttentionParams& a) { a.bias = AttentionBias::None; }},
      {"t5.num_buckets", [](AttentionParams& a) { a.t5.num_buckets += 2; }},
      {"t5.max_distance", [](AttentionParams& a) { a.t5.max_distance += 1; }},
      {"t5.bidirectional", [](AttentionParams& a) { a.t5.bidirectional = !a.t5.bidirectional; }},
      {"t5.log", [](AttentionParams& a) { a.t5.log = a.t5.log == T5Log::HuggingFace ? T5Log::FlaxEps : T5Log::HuggingFace; }},
      {"t5.scale", [](AttentionParams& a) { a.t5.scale *= 3; }},
      {"max_relative_position", [](AttentionParams& a) { ++a.max_relative_position; }},
      {"kerple_variant", [](AttentionParams& a) { a.kerple_variant = a.kerple_variant == KerpleVariant::Log ? KerpleVariant::Power : KerpleVariant::Log; }},
      {"sandwich_dim", [](AttentionParams& a) { a.sandwich_dim += 2; }},
      {"sandwich_first_frequency", [](AttentionParams& a) { a.sandwich_first_frequency ^= 1; }},
  };
  std::vector<std::string> covered, fields;
  for (const auto& [name, change] : cases) covered.push_back(name);
  for (const auto& f : detail::ring_fields(rp.attention)) fields.push_back(f.name);
  ASSERT_EQ(covered, fields) << "a case for every field the ranks compare";
  for (const auto& [name, change] : cases) {
    SCOPED_TRACE(name);
    AttentionResult got = empty_result(rp.attention);
    const std::vector<std::string> errors =
        refusals_with_rank_1_changed(rp, in, [&, &change = change](RingParams& p) { change(p.attention); }, got, false);
    for (std::uint32_t r = 0; r < 2; ++r) {
      EXPECT_NE(errors[r].find("the ranks disagree"), std::string::npos) << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find(" " + name + " = "), std::string::npos) << "rank " << r << ": " << errors[r];
    }
  }
}

// A buffer of the wrong size on one rank: InvalidArgument there, a RingError naming it elsewhere,
// and the ring runs on. In sharded attention too, where a paged rank's block table is checked by
// attention()'s own rules before any data moves.
TEST_F(RingAttention, BadBufferOnOneRankIsRefusedEverywhere) {
  std::mt19937 rng(43);
  RingParams rp{relpos::test::random_ring_params(rng, AttentionBias::Alibi, DType::F32, 3), 3};
  const WholeInputs in = random_whole_inputs(rng, rp.attention);
  const AttentionResult want = attention_reference(rp.attention, in.host());
  AttentionResult got = empty_result(rp.attention);
  std::vector<std::string> kinds(3), errors(3);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 3), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    relpos::test::DeviceInputs d = relpos::test::upload(ctx, DType::F32, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, in.bias, in, 4, 1);
    const Refusal refused = refusal_of([&] {
      if (r != 2) relpos::test::ring_rank(rank, rp, in, got);
      else ring_attention(rank, rp, d.buffers());
    });
    kinds[r] = refused.kind;
    errors[r] = refused.text;
    EXPECT_FALSE(rank.stopped());
    relpos::test::ring_rank(rank, rp, in, got);
  });
  ASSERT_TRUE(outcome.ok()) << outcome.describe();
  EXPECT_EQ(kinds[2], "invalid");
  EXPECT_NE(errors[2].find("q buffer"), std::string::npos) << errors[2];
  for (std::uint32_t r : {0u, 1u}) {
    EXPECT_EQ(kinds[r], "refused") << errors[r];
    EXPECT_NE(errors[r].find("rank 2 refused the call (ring attention): q buffer"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("the ring runs on"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
  EXPECT_LE(normalised_error(got.out, want.out), kTolF32);
}

TEST_F(RingAttention, ShardedBadBlockTableOnOneRankIsRefusedEverywhere) {
  const AttentionParams a{.heads = 2, .kv_heads = 1, .queries = 1, .keys = 16, .head_dim = 8, .paged = {16, 2, 1}};
  const auto got = refusals(2, [&](std::uint32_t r, Context& ctx, RingRank& rank) {
    Buffer q(ctx, a.rows() * a.head_dim * 4), out(ctx, a.rows() * a.head_dim * 4), k(ctx, a.kv_bytes()), v(ctx, a.kv_bytes());
    Buffer table(ctx, r == 1 ? 8 : 4), lengths(ctx, 4);  // max_blocks = 1: 4 bytes
    table.upload<std::int32_t>(std::vector<std::int32_t>(table.size() / 4, 0));
    lengths.upload<std::int32_t>(std::vector<std::int32_t>{16});
    AttentionBuffers ab{&q, &k, &v, &out};
    ab.block_table = &table;
    ab.cache_lengths = &lengths;
    sharded_attention(rank, ShardedParams{a, 2}, ab);
  });
  EXPECT_EQ(got[1].kind, "invalid") << got[1].text;
  EXPECT_NE(got[1].text.find("block_table buffer"), std::string::npos) << got[1].text;
  EXPECT_EQ(got[0].kind, "refused") << got[0].text;
  EXPECT_NE(got[0].text.find("rank 1 refused the call (sharded attention): block_table buffer"), std::string::npos) << got[0].text;
}

// Ranks making different ring calls (one times the link, the other runs sharded attention) are
// refused on every rank, and the ring runs on.
TEST_F(RingAttention, DifferentCallsOnDifferentRanksAreRefused) {
  std::vector<std::string> errors(2);
  std::vector<double> ms(2, -1);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 2), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    try {
      if (r == 0) {
        ring_exchange_ms(rank, 64);
      } else {
        const ShardedParams sp{AttentionParams{.heads = 2, .kv_heads = 1, .queries = 1, .keys = 16, .head_dim = 8}, 2};
        Buffer any(ctx, 4096);
        sharded_attention(rank, sp, AttentionBuffers{&any, &any, &any, &any});
      }
    } catch (const InvalidArgument& e) {
      errors[r] = e.what();
    }
    ms[r] = ring_exchange_ms(rank, 64);
  });
  ASSERT_TRUE(outcome.ok()) << outcome.describe();
  EXPECT_NE(errors[0].find("call = ring_exchange_ms on rank 0: the ranks disagree: rank 1 makes another call"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("call = sharded attention on rank 1: the ranks disagree: rank 0 makes another call"), std::string::npos) << errors[1];
  EXPECT_GE(ms[0], 0.0);
  EXPECT_GE(ms[1], 0.0);
}

// An exchange larger than one allocation of the device (each rank stages it in host buffers of
// that size) is refused by `bytes` on every rank before anything is allocated, with the limit; it
// had been the allocation's refusal, naming no parameter. The ring then runs on.
TEST_F(RingAttention, ExchangeLargerThanAnAllocationIsRefusedByBytes) {
  const std::uint64_t allocation = gpu().limits().max_memory_allocation_size;
  const std::uint64_t most = (allocation ? allocation : ~std::uint64_t{0}) / 16 * 16;
  std::vector<std::uint64_t> sizes{~std::uint64_t{0}};
  if (most < std::uint64_t{1} << 40) sizes.push_back(std::uint64_t{1} << 40);
  if (most < ~std::uint64_t{0}) sizes.push_back(most + 1);
  std::vector<std::vector<std::string>> errors(2, std::vector<std::string>(sizes.size()));
  std::vector<double> ms(2, -1);
  const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 2), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      try {
        ring_exchange_ms(rank, sizes[i], 1);
        errors[r][i] = "accepted";
      } catch (const InvalidArgument& e) {
        errors[r][i] = e.what();
      }
    }
    ms[r] = ring_exchange_ms(rank, 64, 1);
  });
  ASSERT_TRUE(outcome.ok()) << outcome.describe();
  for (std::uint32_t r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < sizes.size(); ++i)
      EXPECT_NE(errors[r][i].find("bytes = " + std::to_string(sizes[i]) + ": must be <= " + std::to_string(most)), std::string::npos)
          << "rank " << r << ": " << errors[r][i];
  EXPECT_GE(ms[0], 0.0);
  EXPECT_GE(ms[1], 0.0);
}

// A rank whose keys the causal mask hides entirely still checks its inputs as attention() would:
// an input its bias mode does not read is refused there, whatever the keys it holds.
TEST_F(RingAttention, ShardedMaskedRankStillChecksItsInputs) {
  const AttentionParams a{.heads = 2, .kv_heads = 1, .queries = 1, .keys = 32, .head_dim = 8, .query_offset = 10, .causal = true};
  const auto got = refusals(2, [&](std::uint32_t r, Context& ctx, RingRank& rank) {
    Buffer q(ctx, a.rows() * 8 * 4), out(ctx, a.rows() * 8 * 4), kv(ctx, 16 * 8 * 4), lse(ctx, a.rows() * 4), stray(ctx, 64);
    AttentionBuffers ab{&q, &kv, &kv, &out, &lse};
    if (r == 1) ab.bias = &stray;
    sharded_attention(rank, ShardedParams{a, 2}, ab);  // rank 1 holds keys 16..31: past query 10, masked
  });
  EXPECT_EQ(got[1].kind, "invalid") << got[1].text;
  EXPECT_NE(got[1].text.find("bias buffer = given: is not read by bias = none"), std::string::npos) << got[1].text;
  EXPECT_EQ(got[0].kind, "refused") << got[0].text;
}

// Bodies that do not catch, as docs/ring_attention.md's example: the refusing rank ends with its
// InvalidArgument and the others with RingRefused, whatever the timing. A rank that had sent all
// of the refusal's reasons and then failed (its RingRefused uncaught) stopped a rank still taking
// its last reasons, which then ended with "stopped at" (10 of 20 runs for the refusing rank).
TEST_F(RingAttention, ARefusalIsReportedAsSuchWhenNoBodyCatches) {
  const AttentionParams a{.heads = 2, .kv_heads = 1, .queries = 1, .keys = 48, .head_dim = 8};
  for (int run = 0; run < 12; ++run) {
    const InProcessRingOutcome outcome = run_in_process_ring(shared(gpu(), 3), kTimeout, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
      RingRank rank(ctx, t);
      Buffer q(ctx, a.rows() * 8 * 4), out(ctx, a.rows() * 8 * 4), kv(ctx, 16 * 8 * 4), stray(ctx, 64);
      AttentionBuffers ab{&q, &kv, &kv, &out};
      if (r == 0) ab.bias = &stray;
      sharded_attention(rank, ShardedParams{a, 3}, ab);
    });
    SCOPED_TRACE("run " + std::to_string(run));
    EXPECT_NE(outcome.errors[0].find("bias buffer = given: is not read by bias = none"), std::string::npos) << outcome.errors[0];
    for (std::uint32_t r : {1u, 2u}) EXPECT_NE(outcome.errors[r].find("rank 0 refused the call"), std::string::npos) << outcome.errors[r];
    for (const std::string& e : outcome.errors) EXPECT_EQ(e.find("stopped at"), std::string::npos) << e;
  }
}

TEST_F(RingAttention, TransportErrorStopsEveryRank) {
  const auto errors = faulty_ring(4, 1, "step 1", FaultyTransport::Fault::Throw, kTimeout);
  EXPECT_NE(errors[1].find("injected transport error"), std::string::npos) << errors[1];
  for (std::uint32_t r : {0u, 2u, 3u}) EXPECT_NE(errors[r].find("rank 1 failed: injected transport error"), std::string::npos) << errors[r];
}

// A rank that vanishes at step 1 tells no one: its successor times out naming it and the step, and
// reports that to the others, within a few timeouts, not a hang. The same ring runs once whole
// first: its pipelines compiled there, no step of the timed run takes near the short timeout (under
// the sanitizers on a loaded machine, compiling at step 0 took rank 0 past 0.8 s, and rank 1 timed
// out on rank 0 before it could vanish).
TEST_F(RingAttention, RankThatDiesMidRingTimesOutTheOthers) {
  for (const std::string& e : faulty_ring(4, 1, "", FaultyTransport::Fault::Die, kTimeout)) ASSERT_EQ(e, "");
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = faulty_ring(4, 1, "step 1", FaultyTransport::Fault::Die, std::chrono::milliseconds(2000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  for (std::uint32_t r : {0u, 2u, 3u}) EXPECT_NE(errors[r].find("rank 1 posted nothing for step 1"), std::string::npos) << errors[r];
}

// A message of the wrong size is refused by its receiver, naming the sender.
TEST_F(RingAttention, ShortMessageIsRefused) {
  const auto errors = faulty_ring(3, 0, "step 0", FaultyTransport::Fault::Short, kTimeout);
  EXPECT_NE(errors[1].find("rank 0 sent"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("were expected"), std::string::npos) << errors[1];
  for (std::uint32_t r : {0u, 2u}) EXPECT_NE(errors[r].find("rank 1 failed"), std::string::npos) << errors[r];
}

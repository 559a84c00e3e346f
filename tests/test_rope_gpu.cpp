// RoPE on the GPU against the CPU reference over random shapes, layouts, pairings, rotary dims,
// positions, scalings and both directions, in place and into a new buffer, f32 and f16.
#include <relpos/relpos.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"
#include "support/tolerance.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_small_limits;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

// tests/support/tolerance.hpp says why.
constexpr double kTolF32 = relpos::test::kRopeTolF32;
constexpr double kTolF16 = relpos::test::kRopeTolF16;

struct Case {
  RopeParams p;
  DType dtype = DType::F32;
  bool in_place = true;
  bool use_positions = false;
};

Case random_case(std::mt19937& rng) {
  std::uniform_int_distribution<int> coin(0, 1);
  Case c;
  RopeParams& p = c.p;
  static const std::uint32_t dims[] = {2, 4, 6, 8, 10, 16, 24, 32, 64, 80, 96, 128};
  p.head_dim = dims[std::uniform_int_distribution<int>(0, 11)(rng)];
  // Full rotation half the time (the quad path when head_dim % 8 == 0), otherwise any even d.
  p.rotary_dim = coin(rng) ? 0 : 2 * std::uniform_int_distribution<std::uint32_t>(1, p.head_dim / 2)(rng);
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng);
  p.seq = std::uniform_int_distribution<std::uint32_t>(1, 40)(rng);
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 5)(rng);
  p.layout = coin(rng) ? RopeLayout::BSHD : RopeLayout::BHSD;
  p.style = coin(rng) ? RopeStyle::NeoX : RopeStyle::GptJ;
  p.base = coin(rng) ? 10000.0 : 500000.0;
  p.inverse = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
  p.position_offset = coin(rng) ? 0 : std::uniform_int_distribution<std::int64_t>(-5000, 200000)(rng);
  auto& s = p.scaling;
  s.type = static_cast<RopeScaling>(std::uniform_int_distribution<int>(0, 5)(rng));
  s.factor = std::uniform_real_distribution<double>(1.0, 16.0)(rng);
  s.original_max_position = std::uniform_int_distribution<std::uint32_t>(64, 8192)(rng);
  s.seq_len = std::uniform_int_distribution<std::uint64_t>(1, 20000)(rng);
  if (s.type == RopeScaling::DynamicNtk && p.rot_dim() < 4) s.type = RopeScaling::Linear;
  if (s.type == RopeScaling::LongRope)
    for (std::uint32_t k = 0; k < p.rot_dim() / 2; ++k) {
      s.long_factor.push_back(std::uniform_real_distribution<float>(1.0f, 64.0f)(rng));
      s.short_factor.push_back(std::uniform_real_distribution<float>(0.9f, 4.0f)(rng));
    }
  c.dtype = coin(rng) ? DType::F32 : DType::F16;
  c.in_place = coin(rng);
  c.use_positions = coin(rng);
  return c;
}

std::string describe(const Case& c) {
  const RopeParams& p = c.p;
  return "B=" + std::to_string(p.batch) + " S=" + std::to_string(p.seq) + " H=" + std::to_string(p.heads) + " D=" +
         std::to_string(p.head_dim) + " d=" + std::to_string(p.rot_dim()) + (p.layout == RopeLayout::BSHD ? " bshd" : " bhsd") +
         (p.style == RopeStyle::NeoX ? " neox" : " gptj") + " scaling=" + std::to_string(static_cast<int>(p.scaling.type)) +
         " factor=" + std::to_string(p.scaling.factor) + " off=" + std::to_string(p.position_offset) + (p.inverse ? " inverse" : "") +
         (c.dtype == DType::F16 ? " f16" : " f32") + (c.in_place ? " in-place" : " out") + (c.use_positions ? " positions" : "");
}


// Runs the case on the GPU and checks it against the reference; the pass-through features and
// (out of place) the untouched input must be bit-exact.
// Draws one position of a position buffer.
using PositionSource = std::function<std::int32_t(std::mt19937&)>;

std::int32_t ordinary_position(std::mt19937& rng) { return std::uniform_int_distribution<std::int32_t>(-1000, 300000)(rng); }

// Positions where the angles are large: within 64 of +-(2^31 - 1) (and int32's minimum), around
// 2^24, and anywhere in int32.
std::int32_t far_position(std::mt19937& rng) {
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::int32_t near = std::uniform_int_distribution<std::int32_t>(0, 64)(rng);
  switch (std::uniform_int_distribution<int>(0, 4)(rng)) {
    case 0: return kMax - near;
    case 1: return -kMax + near - 1;  // down to int32's minimum
    case 2: return (1 << 24) - 32 + near;
    case 3: return -(1 << 24) + 32 - near;
    default: return std::uniform_int_distribution<std::int32_t>(std::numeric_limits<std::int32_t>::min(), kMax)(rng);
  }
}

void expect_matches(Context& ctx, const Case& c, std::mt19937& rng, const PositionSource& position = ordinary_position) {
  SCOPED_TRACE(describe(c));
  const RopeParams& p = c.p;
  const std::size_t n = p.elements();
  const std::vector<float> x = rounded_to_storage(random_floats(rng, n, -3.0f, 3.0f), c.dtype);
  std::vector<std::int32_t> positions;
  if (c.use_positions) {
    positions.resize(std::size_t{p.batch} * p.seq);
    for (auto& v : positions) v = position(rng);
  }
  std::vector<float> want = x;
  rope_reference(p, want, positions);
  want = rounded_to_storage(want, c.dtype);

  Buffer xb = make_float_buffer(ctx, x, c.dtype);
  Buffer out(ctx, n * dtype_size(c.dtype));
  Buffer pb = make_buffer(ctx, positions);
  const Buffer* pos = c.use_positions ? &pb : nullptr;
  run(ctx, [&](Recorder& r) {
    if (c.in_place) rope(r, p, xb, c.dtype, pos);
    else rope_into(r, p, xb, out, c.dtype, pos);
  });
  const std::vector<float> got = download_floats(c.in_place ? xb : out, n, c.dtype);
  EXPECT_LE(normalised_error(got, want), c.dtype == DType::F16 ? kTolF16 : kTolF32);
  for (std::size_t row = 0; row < n / p.head_dim; ++row)
    for (std::uint32_t e = p.rot_dim(); e < p.head_dim; ++e)
      ASSERT_EQ(got[row * p.head_dim + e], x[row * p.head_dim + e]) << "pass-through row " << row << " e=" << e;
  if (!c.in_place) ASSERT_EQ(download_floats(xb, n, c.dtype), x) << "input modified";
}

class RopeGpu : public GpuTest {};

}  // namespace

TEST_F(RopeGpu, RandomConfigurationsMatchReference) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 40; ++trial) expect_matches(gpu(), random_case(rng), rng);
}

// Positions up to int32's limits with the first frequency 1 (angles up to 2^31), from a position
// buffer, on every path of the shader: four-pair units (f32, f16, with a tail), eight-pair f16
// units (with a tail), element-wise rows; NeoX and GPT-J, each in place (BSHD) and out of place
// (BHSD, which recomputes the angles along l). Offsets at both ends of int32 on two paths.
TEST_F(RopeGpu, FarPositionsStayAccurate) {
  std::mt19937 rng(77);
  struct Shape { std::uint32_t head_dim, rotary_dim; DType dtype; };
  const Shape shapes[] = {{64, 0, DType::F32}, {20, 8, DType::F32}, {40, 24, DType::F16}, {64, 48, DType::F16},
                          {32, 0, DType::F16}, {10, 6, DType::F32}, {12, 0, DType::F16}};
  for (std::size_t i = 0; i < std::size(shapes); ++i)
    for (auto style : {RopeStyle::NeoX, RopeStyle::GptJ}) {
      const bool in_place = (i + (style == RopeStyle::GptJ)) % 2 == 0;
      Case c;
      c.p.batch = 2;
      c.p.seq = 24;
      c.p.heads = 3;
      c.p.head_dim = shapes[i].head_dim;
      c.p.rotary_dim = shapes[i].rotary_dim;
      c.p.style = style;
      c.p.layout = in_place ? RopeLayout::BSHD : RopeLayout::BHSD;
      c.dtype = shapes[i].dtype;
      c.in_place = in_place;
      c.use_positions = true;
      expect_matches(gpu(), c, rng, far_position);
      if (i == 0 || i == 5) {
        c.use_positions = false;
        c.p.position_offset = std::numeric_limits<std::int32_t>::max() - (c.p.seq - 1);
        expect_matches(gpu(), c, rng);
        c.p.position_offset = -std::numeric_limits<std::int32_t>::max();
        expect_matches(gpu(), c, rng);
      }
    }
}

// A rotation keeps every pair's norm, at any position (the scaled frequencies too).
TEST_F(RopeGpu, RotationKeepsEveryPairsNorm) {
  std::mt19937 rng(12);
  RopeParams p;
  p.seq = 256;
  p.heads = 2;
  p.head_dim = 64;
  p.scaling.type = RopeScaling::Llama3;
  p.scaling.factor = 8.0;
  p.scaling.original_max_position = 8192;
  const std::vector<float> x = random_floats(rng, p.elements(), -3.0f, 3.0f);
  std::vector<std::int32_t> positions(p.seq);
  for (auto& v : positions) v = far_position(rng);
  Buffer xb = make_buffer(gpu(), x), pb = make_buffer(gpu(), positions);
  run(gpu(), [&](Recorder& r) { rope(r, p, xb, DType::F32, &pb); });
  const std::vector<float> got = xb.download<float>(x.size());
  const std::uint32_t half = p.head_dim / 2;
  for (std::size_t row = 0; row < x.size() / p.head_dim; ++row)
    for (std::uint32_t k = 0; k < half; ++k) {
      const std::size_t a = row * p.head_dim + k, b = a + half;
      const double before = std::hypot(x[a], x[b]), after = std::hypot(got[a], got[b]);
      ASSERT_NEAR(after, before, 1e-6 * (1.0 + before)) << "row " << row << " pair " << k << " position " << positions[row / p.heads];
    }
}

// Long sequences give each invocation a block of several (batch, head) rows: with BHSD and a
// position buffer the block crosses from one batch into the next, whose positions differ, so
// the angles are recomputed inside the loop (L_POSITIONS); out of place, the pass-through tail
// units copy every row of the block (TAIL). 3 x 3 rows in blocks of 5 cross at rows 3 and 6.
TEST_F(RopeGpu, InvocationBlocksCrossBatches) {
  std::mt19937 rng(31);
  for (auto [in_place, dtype, rot] : {std::tuple{true, DType::F32, 0u}, {false, DType::F32, 8u}, {false, DType::F16, 16u}}) {
    Case c;
    c.p.batch = 3;
    c.p.heads = 3;
    c.p.seq = 4096;
    c.p.head_dim = 32;
    c.p.rotary_dim = rot;
    c.p.layout = RopeLayout::BHSD;
    c.in_place = in_place;
    c.dtype = dtype;
    c.use_positions = true;
    expect_matches(gpu(), c, rng);
  }
}

// With a 4 KiB binding limit and 3 workgroups per dispatch dimension, tensors split into
// rectangles of rows at unaligned offsets, in both layouts (BHSD rows of one head span S * D).
TEST_F(RopeGpu, SplitPathsUnderLoweredLimits) {
  std::mt19937 rng(9);
  for (auto [b, s, h, d, rot] : {std::tuple{2u, 37u, 3u, 64u, 0u}, {3u, 50u, 5u, 16u, 8u}, {1u, 300u, 2u, 8u, 0u}, {2u, 9u, 7u, 24u, 6u},
                                 {2u, 70u, 4u, 128u, 96u}}) {
    for (auto layout : {RopeLayout::BSHD, RopeLayout::BHSD}) {
      Case c;
      c.p.batch = b;
      c.p.seq = s;
      c.p.heads = h;
      c.p.head_dim = d;
      c.p.rotary_dim = rot;
      c.p.layout = layout;
      c.p.position_offset = 5;
      c.in_place = layout == RopeLayout::BSHD;
      c.use_positions = s % 2 == 0;
      c.dtype = d == 24 || d == 128 ? DType::F16 : DType::F32;  // 24: element path; 128 (rot 96): 16-byte words of halves
      expect_matches(gpu_small_limits(), c, rng);
    }
  }
}

// The element-wise path loops over a row's pairs (and, out of place, its pass-through features)
// in one invocation, whose loops RELPOS_MAX_LOOP_ITERATIONS bounds: rows up to the bound run, longer
// ones are refused (lavapipe would leave the loop silently after 65,535 iterations).
TEST_F(RopeGpu, ElementWiseRowsUpToTheLoopBound) {
  std::mt19937 rng(3);
  Case c;
  c.p.seq = 2;
  c.p.head_dim = 65532;  // % 8 == 4: element-wise, 32766 pairs
  c.p.position_offset = 1000;
  expect_matches(gpu(), c, rng);
  c.in_place = false;
  c.p.rotary_dim = 65530;  // 32765 pairs and 2 pass-through features: 32767 iterations with the loop over rows
  expect_matches(gpu(), c, rng);

  Recorder r(gpu());
  RopeParams p = c.p;
  p.rotary_dim = 65526;  // 32763 pairs and 6 features out of place: one iteration too many
  Buffer x(gpu(), p.elements() * 4), out(gpu(), p.elements() * 4);
  expect_invalid([&] { rope_into(r, p, x, out); }, "head_dim");
  p.head_dim = p.rotary_dim = 65538;  // 32769 pairs
  Buffer big(gpu(), p.elements() * 4);
  expect_invalid([&] { rope(r, p, big); }, "head_dim");
  r.submit_and_wait();  // nothing was recorded
}

TEST_F(RopeGpu, InverseUndoesTheRotation) {
  std::mt19937 rng(5);
  RopeParams p;
  p.batch = 2;
  p.seq = 33;
  p.heads = 4;
  p.head_dim = 64;
  p.scaling.type = RopeScaling::Yarn;
  p.scaling.factor = 4.0;
  p.scaling.original_max_position = 4096;
  const std::vector<float> x = random_floats(rng, p.elements());
  Buffer b = make_buffer(gpu(), x);
  RopeParams inv = p;
  inv.inverse = true;
  run(gpu(), [&](Recorder& r) {
    rope(r, p, b);
    rope(r, inv, b);  // begin_op orders it after the forward rotation
  });
  EXPECT_LE(normalised_error(b.download<float>(x.size()), x), 2 * kTolF32);
}

TEST_F(RopeGpu, InvalidInputIsRejectedBeforeDispatch) {
  Context& ctx = gpu();
  RopeParams p;
  p.batch = 2;
  p.seq = 4;
  p.heads = 2;
  p.head_dim = 8;
  Buffer x(ctx, p.elements() * 4), small(ctx, 16), positions(ctx, 8 * 4), short_positions(ctx, 7 * 4);
  Recorder r(ctx);
  expect_invalid([&] { rope(r, p, small); }, "x buffer");
  expect_invalid([&] { rope_into(r, p, x, small); }, "output buffer");
  expect_invalid([&] { rope(r, p, x, DType::I32); }, "dtype");
  expect_invalid([&] { rope(r, p, x, DType::F32, &short_positions); }, "positions buffer");
  RopeParams bad = p;
  bad.rotary_dim = 3;
  expect_invalid([&] { rope(r, bad, x); }, "rotary_dim");
  bad.rotary_dim = 10;
  expect_invalid([&] { rope(r, bad, x); }, "rotary_dim");
  bad = p;
  bad.heads = 0;
  expect_invalid([&] { rope(r, bad, x); }, "heads");
  bad = p;
  bad.scaling.type = RopeScaling::Llama3;
  bad.scaling.factor = 8.0;
  bad.scaling.original_max_position = 0;
  expect_invalid([&] { rope(r, bad, x); }, "original_max_position");
  bad.scaling.original_max_position = 8192;
  bad.scaling.low_freq_factor = 4.0;
  expect_invalid([&] { rope(r, bad, x); }, "high_freq_factor");
  bad = p;
  bad.scaling.type = RopeScaling::DynamicNtk;
  bad.scaling.factor = 2.0;
  bad.scaling.original_max_position = 2048;
  expect_invalid([&] { rope(r, bad, x, DType::F32, &positions); }, "seq_len");
  bad = p;
  bad.head_dim = 7;
  bad.rotary_dim = 6;
  Buffer odd(ctx, bad.elements() * 2);
  expect_invalid([&] { rope(r, bad, odd, DType::F16); }, "head_dim");
  // The same check without a buffer (a reference computation refuses what the GPU would), and a
  // plan refuses it when built rather than at every step.
  expect_invalid([&] { bad.validate(DType::F16); }, "head_dim = 7: must be even for f16 storage");
  expect_invalid([&] { RopePlan plan(ctx, bad, DType::F16); }, "head_dim = 7: must be even for f16 storage");
  r.submit_and_wait();  // nothing was recorded
}

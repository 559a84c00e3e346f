// The sinusoidal encoding and both Fourier bias paths on the GPU against the float64 reference,
// at small and large positions, under lowered limits, and every invalid input the issue lists.
#include <relpos/relpos.hpp>

#include <cmath>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;
using relpos::test::gpu_expansion;
using relpos::test::gpu_small_limits;
using relpos::test::gpu_without_shuffles;
using relpos::test::random_floats;
using relpos::test::run;

namespace {

constexpr double kUlp = 0x1p-24;  // one float32 rounding, relative
const double kEncodingError = sinusoidal_error_bound();

double distance_bound(const FourierParams& p, const std::vector<float>& rot) {
  return fourier_error_bound(p, rot, FourierPath::Distance);
}
double direct_bound(const FourierParams& p, const std::vector<float>& rot) { return fourier_error_bound(p, rot, FourierPath::Direct); }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

// normalised_error divides by max(1, max |want|).
double normalised(double bound, const std::vector<float>& want) { return bound / std::max(1.0, max_abs(want)); }

std::vector<float> gpu_sinusoidal(Context& ctx, const SinusoidalParams& p) {
  const std::size_t n = std::size_t{p.positions} * p.vector_size;
  Buffer out(ctx, n * 4);
  run(ctx, [&](Recorder& r) { sinusoidal(r, p, out); });
  return out.download<float>(n);
}

std::vector<float> gpu_bias(Context& ctx, const FourierParams& p, const std::vector<float>& rot, FourierPath path,
                            DType dtype = DType::F32) {
  const std::size_t n = std::size_t{p.heads} * p.queries * p.keys;
  Buffer rb = make_buffer(ctx, rot);
  Buffer out(ctx, n * dtype_size(dtype));
  run(ctx, [&](Recorder& r) { fourier_bias(r, p, rb, out, path, dtype); });
  return download_floats(out, n, dtype);
}

// The [H, Q + K - 1] per-distance row; `spare` more bytes in the buffer than the row needs.
std::vector<float> gpu_row(Context& ctx, const FourierParams& p, const std::vector<float>& rot, std::size_t spare = 0) {
  const std::size_t n = std::size_t{p.heads} * p.row_len();
  Buffer rb = make_buffer(ctx, rot), row(ctx, n * 4 + spare);
  run(ctx, [&](Recorder& r) { fourier_distance_row(r, p, rb, row); });
  return row.download<float>(n);
}

// Q != K, every kind of offset (default last-aligned, first-aligned, decoding step, far), odd head
// counts across the 8-head passes of the row shader, several vector sizes and wavelengths.
FourierParams random_params(std::mt19937& rng) {
  std::uniform_int_distribution<std::uint32_t> size(1, 40);
  FourierParams p;
  p.heads = std::uniform_int_distribution<std::uint32_t>(1, 11)(rng);
  p.queries = size(rng);
  p.keys = size(rng);
  p.vector_size = 2 * std::uniform_int_distribution<std::uint32_t>(1, 64)(rng);
  p.max_keys = std::uniform_int_distribution<std::uint32_t>(1, 4096)(rng);
  p.batch = std::uniform_int_distribution<std::uint32_t>(1, 2)(rng);
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0: if (p.keys >= p.queries) break; [[fallthrough]];
    case 1: p.query_offset = 0; break;
    case 2: p.query_offset = std::uniform_int_distribution<std::int64_t>(-2'000'000'000, 2'000'000'000)(rng); break;
    default: p.query_offset = std::uniform_int_distribution<std::int64_t>(-300, 300)(rng); break;
  }
  return p;
}

std::string describe(const FourierParams& p) {
  return "H=" + std::to_string(p.heads) + " Q=" + std::to_string(p.queries) + " K=" + std::to_string(p.keys) +
         " d=" + std::to_string(p.vector_size) + " M=" + std::to_string(p.max_keys) + " off=" + std::to_string(p.offset()) +
         " B=" + std::to_string(p.batch);
}

class FourierGpu : public GpuTest {};

}  // namespace

TEST_F(FourierGpu, SinusoidalMatchesFloat64AtAnyPosition) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 12; ++trial) {
    SinusoidalParams p;
    p.positions = std::uniform_int_distribution<std::uint32_t>(1, 300)(rng);
    p.vector_size = 2 * std::uniform_int_distribution<std::uint32_t>(1, 70)(rng);
    p.offset = trial < 4 ? 0 : std::uniform_int_distribution<std::int64_t>(-2'147'483'000, 2'147'483'000)(rng);
    p.max_wavelength = trial % 3 == 0 ? 0.0 : std::uniform_real_distribution<double>(1.5, 1e6)(rng);
    SCOPED_TRACE("N=" + std::to_string(p.positions) + " d=" + std::to_string(p.vector_size) + " off=" + std::to_string(p.offset) +
                 " W=" + std::to_string(p.wavelength()));
    EXPECT_LE(normalised_error(gpu_sinusoidal(gpu(), p), sinusoidal_reference(p)), kEncodingError);
  }
  // The extremes of the position range, where a float32 angle would be off by whole turns.
  for (std::int64_t off : {std::int64_t{2'147'483'647 - 64}, std::int64_t{-2'147'483'646}}) {
    SinusoidalParams p{64, 128, off, 2048.0};
    EXPECT_LE(normalised_error(gpu_sinusoidal(gpu(), p), sinusoidal_reference(p)), kEncodingError) << "offset " << off;
  }
}

TEST_F(FourierGpu, BothPathsMatchFloat64) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 14; ++trial) {
    FourierParams p = random_params(rng);
    SCOPED_TRACE(describe(p));
    const auto rot = trial % 4 == 0 ? fourier_default_rotation(p) : random_floats(rng, std::size_t{p.heads} * p.vector_size, -1.0f, 1.0f);
    const auto want = fourier_bias_reference(p, rot);
    EXPECT_LE(normalised_error(gpu_bias(gpu(), p, rot, FourierPath::Distance), want), normalised(distance_bound(p, rot), want));
    EXPECT_LE(normalised_error(gpu_bias(gpu(), p, rot, FourierPath::Direct), want), normalised(direct_bound(p, rot), want));
  }
}

TEST_F(FourierGpu, DistanceRowIsPublic) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 6; ++trial) {
    FourierParams p = random_params(rng);
    SCOPED_TRACE(describe(p));
    const auto rot = random_floats(rng, std::size_t{p.heads} * p.vector_size, -1.0f, 1.0f);
    const auto want = fourier_distance_row_reference(p, rot);
    // A buffer larger than needed is fine.
    EXPECT_LE(normalised_error(gpu_row(gpu(), p, rot, 64), want), normalised(distance_bound(p, rot), want));
  }
}

// The row with the rotation loads shared by subgroup shuffles (CPU devices) and without: the same
// terms summed in the same order, so the same bits, and within the bound. Head counts above 8
// take several passes; half dimensions that are not a multiple of the subgroup size end on a
// partial block of shuffles.
TEST_F(FourierGpu, RowWithAndWithoutSharedLoads) {
  std::mt19937 rng(71);
  for (int trial = 0; trial < 8; ++trial) {
    FourierParams p = random_params(rng);
    if (trial == 0) p.heads = 19, p.vector_size = 26;
    SCOPED_TRACE(describe(p));
    const auto rot = random_floats(rng, std::size_t{p.heads} * p.vector_size, -1.0f, 1.0f);
    const auto shared = gpu_row(gpu(), p, rot);
    EXPECT_EQ(shared, gpu_row(gpu_without_shuffles(), p, rot));
    const auto want = fourier_distance_row_reference(p, rot);
    EXPECT_LE(normalised_error(shared, want), normalised(distance_bound(p, rot), want));
  }
}

// meliad at initialisation: 1 at rp = 0, within [-1, 1], symmetric in rp; on the GPU within the
// stated bound of each property (d = 128, W = 2048: S = 2, bound about 1.6e-5 direct).
TEST_F(FourierGpu, InitialisationPropertiesOnBothPaths) {
  FourierParams p;
  p.heads = 2;
  p.queries = p.keys = 96;
  p.query_offset = 0;
  const auto rot = fourier_default_rotation(p);
  for (FourierPath path : {FourierPath::Distance, FourierPath::Direct}) {
    const auto got = gpu_bias(gpu(), p, rot, path);
    const double tol = path == FourierPath::Direct ? direct_bound(p, rot) : distance_bound(p, rot);
    for (std::uint32_t h = 0; h < p.heads; ++h)
      for (std::uint32_t i = 0; i < p.queries; ++i)
        for (std::uint32_t j = 0; j < p.keys; ++j) {
          const float v = got[(std::size_t{h} * p.queries + i) * p.keys + j];
          if (i == j) ASSERT_NEAR(v, 1.0, tol);
          ASSERT_LE(std::abs(v), 1.0 + tol);
          ASSERT_NEAR(v, got[(std::size_t{h} * p.queries + j) * p.keys + i], 2 * tol) << "rp -> -rp at " << i << "," << j;
        }
  }
}

TEST_F(FourierGpu, HalfOutputAndInPlaceAdd) {
  std::mt19937 rng(51);
  for (int trial = 0; trial < 6; ++trial) {
    FourierParams p = random_params(rng);
    SCOPED_TRACE(describe(p));
    const auto rot = random_floats(rng, std::size_t{p.heads} * p.vector_size, -0.2f, 0.2f);
    const auto want = fourier_bias_reference(p, rot);
    const double bound = distance_bound(p, rot);
    // f16: one more rounding, half an f16 ulp (2^-11 relative) of values up to max |want|.
    EXPECT_LE(normalised_error(gpu_bias(gpu(), p, rot, FourierPath::Distance, DType::F16), want),
              normalised(bound, want) + std::ldexp(1.0, -11));

    const std::size_t n = std::size_t{p.batch} * p.heads * p.queries * p.keys;
    auto logits = random_floats(rng, n, -10.0f, 10.0f);
    auto sum = logits;
    fourier_bias_add_reference(p, rot, sum);
    Buffer rb = make_buffer(gpu(), rot), l32 = make_buffer(gpu(), logits);
    run(gpu(), [&](Recorder& r) { fourier_bias_add(r, p, rb, l32, DType::F32); });
    // The add rounds once more in float32: 2^-24 of max |sum| beyond the bias bound.
    EXPECT_LE(normalised_error(l32.download<float>(n), sum), normalised(bound, sum) + kUlp);

    auto stored = from_half(to_half(logits));
    auto sum16 = stored;
    fourier_bias_add_reference(p, rot, sum16);
    Buffer l16 = make_buffer(gpu(), to_half(logits));
    run(gpu(), [&](Recorder& r) { fourier_bias_add(r, p, rb, l16, DType::F16); });
    EXPECT_LE(normalised_error(from_half(l16.download<std::uint16_t>(n)), sum16), normalised(bound, sum16) + std::ldexp(1.0, -11));
  }
}

// The distance path's output written by the shader and by transfer copies (DistanceExpansion) is
// the same expansion of the same row: identical bits, f32 and f16, and within the bound.
TEST_F(FourierGpu, BothExpansionPathsWriteTheSameBits) {
  std::mt19937 rng(61);
  Context& shader = gpu_expansion(DistanceExpansion::Shader);
  Context& copies = gpu_expansion(DistanceExpansion::Copies);
  for (int trial = 0; trial < 6; ++trial) {
    FourierParams p = random_params(rng);
    if (trial == 0) p.keys = 300;  // rows of several vectors, and more rows than one copy command takes
    if (trial == 0) p.queries = 1400;
    SCOPED_TRACE(describe(p));
    const auto rot = random_floats(rng, std::size_t{p.heads} * p.vector_size, -1.0f, 1.0f);
    const auto want = fourier_bias_reference(p, rot);
    for (DType dtype : {DType::F32, DType::F16}) {
      const auto by_copies = gpu_bias(copies, p, rot, FourierPath::Distance, dtype);
      ASSERT_EQ(by_copies, gpu_bias(shader, p, rot, FourierPath::Distance, dtype)) << dtype_name(dtype);
      const double half = dtype == DType::F16 ? std::ldexp(1.0, -11) : 0.0;
      EXPECT_LE(normalised_error(by_copies, want), normalised(distance_bound(p, rot), want) + half) << dtype_name(dtype);
    }
  }
}

// A 4 KiB binding limit and 3 workgroups per dispatch: the encoding, the direct output and the
// expansion all take many chunks and group ranges.
TEST_F(FourierGpu, SplitPathsUnderLoweredLimits) {
  Context& ctx = gpu_small_limits();
  std::mt19937 rng(61);
  for (auto [h, q, k, d] : {std::tuple{3u, 37u, 41u, 8u}, {2u, 64u, 64u, 16u}, {1u, 5u, 120u, 8u}, {9u, 29u, 3u, 4u}}) {
    FourierParams p;
    p.heads = h;
    p.queries = q;
    p.keys = k;
    p.vector_size = d;
    p.max_keys = 64;
    p.query_offset = 11;
    SCOPED_TRACE(describe(p));
    const auto rot = random_floats(rng, std::size_t{h} * d, -1.0f, 1.0f);
    const auto want = fourier_bias_reference(p, rot);
    EXPECT_LE(normalised_error(gpu_bias(ctx, p, rot, FourierPath::Distance), want), normalised(distance_bound(p, rot), want));
    EXPECT_LE(normalised_error(gpu_bias(ctx, p, rot, FourierPath::Direct), want), normalised(direct_bound(p, rot), want));
  }
  // d = 14: flat element chunks; d = 16, 64: paired quads in chunks of whole rows.
  for (std::uint32_t d : {14u, 16u, 64u}) {
    SinusoidalParams s{300, d, -77, 0.0};  // 16.8 to 76.8 KB of encoding
    EXPECT_LE(normalised_error(gpu_sinusoidal(ctx, s), sinusoidal_reference(s)), kEncodingError) << "d=" << d;
  }
}

// Wide vector sizes: d/2 = 65536 features is more than one invocation may loop over
// (RELPOS_MAX_LOOP_ITERATIONS), so the host sums them in chunks of dispatches (the first writes,
// the rest add), and 9 heads take two dispatches of head passes each; d/2 = 131073 ends on a
// one-feature chunk. Head h's cos weights are positive and scaled by h + 1, so a lost, repeated
// or misplaced feature chunk or head moves the bias at rp = 0 by far more than the bound. Shared
// and unshared loads sum the same chunks: the same bits.
TEST_F(FourierGpu, WideVectorSizesSplitTheFeatureSum) {
  std::mt19937 rng(81);
  for (auto [d, h, q, k, off] : {std::tuple{131072u, 9u, 3u, 5u, std::int64_t{2}}, {262146u, 2u, 2u, 3u, std::int64_t{-1'000'000}}}) {
    FourierParams p;
    p.heads = h;
    p.queries = q;
    p.keys = k;
    p.vector_size = d;
    p.max_keys = 1 << 20;
    p.query_offset = off;
    SCOPED_TRACE(describe(p));
    std::vector<float> rot(std::size_t{h} * d);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (std::uint32_t head = 0; head < h; ++head)
      for (std::uint32_t e = 0; e < d; ++e)
        rot[std::size_t{head} * d + e] = e < d / 2 ? unit(rng) * 4.0f * (head + 1) / (float(d) * h) : (unit(rng) - 0.5f) * 2.0f / float(d);
    const auto want_row = fourier_distance_row_reference(p, rot);
    const auto row = gpu_row(gpu(), p, rot);
    EXPECT_LE(normalised_error(row, want_row), normalised(distance_bound(p, rot), want_row));
    EXPECT_EQ(row, gpu_row(gpu_without_shuffles(), p, rot));
    const auto want = fourier_bias_reference(p, rot);
    EXPECT_LE(normalised_error(gpu_bias(gpu(), p, rot, FourierPath::Distance), want), normalised(distance_bound(p, rot), want));
    EXPECT_LE(normalised_error(gpu_bias(gpu(), p, rot, FourierPath::Direct), want), normalised(direct_bound(p, rot), want));
  }
}

// 70 000 heads: more 8-head passes than one invocation may loop over, so the row takes several
// dispatches of as many passes as fit.
TEST_F(FourierGpu, ManyHeadsTakeSeveralDispatches) {
  std::mt19937 rng(83);
  for (std::uint32_t d : {16u, 128u}) {
    FourierParams p;
    p.heads = 70'000;
    p.queries = 2;
    p.keys = 2;
    p.vector_size = d;
    SCOPED_TRACE(describe(p));
    const auto rot = random_floats(rng, std::size_t{p.heads} * d, -1.0f, 1.0f);
    const auto want = fourier_distance_row_reference(p, rot);
    const auto row = gpu_row(gpu(), p, rot);
    EXPECT_LE(normalised_error(row, want), normalised(distance_bound(p, rot), want));
    EXPECT_EQ(row, gpu_row(gpu_without_shuffles(), p, rot));
  }
}

TEST_F(FourierGpu, InvalidInputIsRejectedBeforeDispatch) {
  Context& ctx = gpu();
  FourierParams p;
  p.heads = 2;
  p.queries = 4;
  p.keys = 6;
  p.vector_size = 8;
  const std::size_t n = 2 * 4 * 6;
  Buffer rot(ctx, 2 * 8 * 4), out(ctx, n * 4), small(ctx, 16), wrong_rot(ctx, 2 * 6 * 4);
  Recorder r(ctx);
  for (FourierPath path : {FourierPath::Distance, FourierPath::Direct}) {
    expect_invalid([&] { fourier_bias(r, p, wrong_rot, out, path); }, "rotation");
    expect_invalid([&] { fourier_bias(r, p, rot, small, path); }, "output buffer");
    FourierParams bad = p;
    bad.vector_size = 7;
    expect_invalid([&] { fourier_bias(r, bad, rot, out, path); }, "vector_size");
    bad = p;
    bad.max_keys = 0;
    expect_invalid([&] { fourier_bias(r, bad, rot, out, path); }, "max_keys");
    bad = p;
    bad.queries = 7;  // K < Q and no offset
    expect_invalid([&] { fourier_bias(r, bad, rot, Buffer(ctx, 2 * 7 * 6 * 4), path); }, "query_offset");
  }
  expect_invalid([&] { fourier_bias(r, p, rot, out, FourierPath::Direct, DType::F16); }, "direct");
  expect_invalid([&] { fourier_bias(r, p, rot, out, FourierPath::Distance, DType::I32); }, "out_dtype");
  expect_invalid([&] { fourier_bias_add(r, p, rot, out, DType::I32); }, "dtype");
  p.batch = 3;  // logits hold one batch only
  expect_invalid([&] { fourier_bias_add(r, p, rot, out); }, "output buffer");
  p.batch = 1;
  expect_invalid([&] { fourier_distance_row(r, p, rot, small); }, "row buffer");
  expect_invalid([&] { sinusoidal(r, SinusoidalParams{4, 5, 0, 0.0}, out); }, "vector_size");
  expect_invalid([&] { sinusoidal(r, SinusoidalParams{4, 8, 0, 0.5}, out); }, "max_wavelength");
  expect_invalid([&] { sinusoidal(r, SinusoidalParams{40, 8, 0, 0.0}, out); }, "output buffer");
  r.submit_and_wait();  // nothing was recorded
}

#pragma once
// The checks of a per-distance bias family whose GPU values carry an error bound (KERPLE,
// Sandwich): every value within the bound of the float64 reference, f16 the float32 value rounded
// once, the in-place add, masked entries -inf.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"

namespace relpos::test {

// Every value of `got` ([batch, heads, Q, K]; [heads, Q, K] when `base` is empty) within
// bound(h, rp) of base + value(h, rp) (value in float64), -inf where the causal mask hides it.
template <class Params, class Value, class Bound>
void expect_distance_bias_within(const Params& p, const std::vector<float>& got, const std::vector<float>& base, Value&& value,
                                 Bound&& bound) {
  const std::size_t Q = p.queries, K = p.keys, per_batch = p.heads * Q * K;
  ASSERT_EQ(got.size(), base.empty() ? per_batch : per_batch * p.batch);
  for (std::size_t e = 0; e < got.size(); ++e) {
    const std::uint32_t h = static_cast<std::uint32_t>(e / (Q * K) % p.heads);
    const std::size_t i = e / K % Q, j = e % K;
    const std::int64_t rp = static_cast<std::int64_t>(j) - static_cast<std::int64_t>(i) - p.query_offset;
    if (p.causal && rp > 0) {
      ASSERT_EQ(got[e], -std::numeric_limits<float>::infinity()) << e;
      continue;
    }
    const double want = (base.empty() ? 0.0 : base[e]) + value(h, rp);
    // The reference rounds once; an add rounds the sum once more.
    const double limit = bound(h, rp) + std::ldexp(std::fabs(want), -23);
    ASSERT_LE(std::fabs(got[e] - want), limit) << "h=" << h << " rp=" << rp << " got " << got[e] << " want " << want;
  }
}

// The family's bias in f32 and f16 and its add into random logits, through `bias(r, p, out,
// dtype)` and `bias_add(r, p, logits, dtype)`.
template <class Params, class Value, class Bound, class Bias, class BiasAdd>
void expect_distance_bias_ops(Context& ctx, const Params& p, std::mt19937& rng, Value&& value, Bound&& bound, Bias&& bias, BiasAdd&& bias_add) {
  const std::size_t n = std::size_t{p.heads} * p.queries * p.keys;
  Buffer out(ctx, n * 4);
  run(ctx, [&](Recorder& r) { bias(r, p, out, DType::F32); });
  const std::vector<float> f32 = download_floats(out, n, DType::F32);
  expect_distance_bias_within(p, f32, {}, value, bound);
  // f16: the GPU's float32 value rounded to half once (give or take one half ulp).
  Buffer half(ctx, n * 2);
  run(ctx, [&](Recorder& r) { bias(r, p, half, DType::F16); });
  expect_half_close(download_floats(half, n, DType::F16), f32, "f16 bias");
  const std::vector<float> logits = random_floats(rng, n * p.batch, -10.0f, 10.0f);
  Buffer l = make_float_buffer(ctx, logits, DType::F32);
  run(ctx, [&](Recorder& r) { bias_add(r, p, l, DType::F32); });
  expect_distance_bias_within(p, download_floats(l, logits.size(), DType::F32), logits, value, bound);
}

}  // namespace relpos::test

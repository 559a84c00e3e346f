// The CPU reference of RoPE: frequency tables of every scaling against float64 values computed
// independently by HuggingFace's formulas (tests/data/gen_alibi_rope.py), rotations at known
// positions, and the properties the layouts, positions and inverse must have.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "support/expect.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::data_lines;
using relpos::test::expect_invalid;
using relpos::test::random_floats;

namespace {

RopeParams one_head(std::uint32_t dim, RopeStyle style = RopeStyle::NeoX) {
  RopeParams p;
  p.head_dim = dim;
  p.style = style;
  return p;
}

// Parses "type dim base params... attention : inv_freq..." into params and expected values.
RopeParams frequency_case(const std::vector<std::string>& w, std::vector<double>& want, double& attention) {
  RopeParams p = one_head(static_cast<std::uint32_t>(std::stoul(w[1])));
  p.base = std::stod(w[2]);
  RopeScalingParams& s = p.scaling;
  std::size_t k = 3;
  auto num = [&] { return std::stod(w[k++]); };
  const std::string& type = w[0];
  if (type == "linear") {
    s.type = RopeScaling::Linear;
    s.factor = num();
  } else if (type == "ntk") {
    s.type = RopeScaling::DynamicNtk;
    s.factor = num();
    s.original_max_position = static_cast<std::uint32_t>(num());
    s.seq_len = static_cast<std::uint64_t>(num());
  } else if (type == "yarn") {
    s.type = RopeScaling::Yarn;
    s.factor = num();
    s.original_max_position = static_cast<std::uint32_t>(num());
    s.beta_fast = num();
    s.beta_slow = num();
    s.truncate = num() != 0.0;
    s.mscale = num();
    s.mscale_all_dim = num();
  } else if (type == "llama3") {
    s.type = RopeScaling::Llama3;
    s.factor = num();
    s.low_freq_factor = num();
    s.high_freq_factor = num();
    s.original_max_position = static_cast<std::uint32_t>(num());
  } else if (type == "longrope") {
    s.type = RopeScaling::LongRope;
    s.factor = num();
    s.original_max_position = static_cast<std::uint32_t>(num());
    s.seq_len = static_cast<std::uint64_t>(num());
    for (auto* factors : {&s.long_factor, &s.short_factor})
      for (std::uint32_t k = 0; k < p.head_dim / 2; ++k) factors->push_back(static_cast<float>(num()));
  }
  attention = num();
  EXPECT_EQ(w[k++], ":");
  for (; k < w.size(); ++k) want.push_back(std::stod(w[k]));
  return p;
}

}  // namespace

TEST(RopeReference, FrequencyTablesMatchIndependentFloat64) {
  int tables = 0;
  for (const auto& w : data_lines("rope_frequencies.txt")) {
    std::vector<double> want;
    double attention = 0.0;
    const RopeParams p = frequency_case(w, want, attention);
    SCOPED_TRACE(w[0] + " dim=" + w[1] + " base=" + w[2] + " " + w[3]);
    const RopeFrequencies f = rope_frequencies(p);
    ASSERT_EQ(f.inv_freq.size(), want.size());
    // Both sides compute in double; ours is rounded to float32 once: half an ulp, 2^-24 relative.
    for (std::size_t k = 0; k < want.size(); ++k)
      EXPECT_LE(std::abs(f.inv_freq[k] - want[k]), 0x1p-24 * want[k]) << "k=" << k << ": " << f.inv_freq[k] << " vs " << want[k];
    EXPECT_LE(std::abs(f.attention_factor - attention), 0x1p-24 * attention);
    ++tables;
  }
  EXPECT_EQ(tables, 4 * 18);
}

TEST(RopeReference, RotationsAtKnownPositions) {
  int checked = 0;
  for (const auto& w : data_lines("rope_angles.txt")) {
    RopeParams p = one_head(static_cast<std::uint32_t>(std::stoul(w[1])), w[0] == "neox" ? RopeStyle::NeoX : RopeStyle::GptJ);
    p.position_offset = std::stoll(w[2]);
    std::vector<float> x(p.head_dim);
    for (std::uint32_t e = 0; e < p.head_dim; ++e) x[e] = static_cast<float>(e + 1);
    rope_reference(p, x);
    // The file's values are float64 of the same float32 angles: ours round them once.
    for (std::uint32_t e = 0; e < p.head_dim; ++e, ++checked)
      EXPECT_EQ(x[e], static_cast<float>(std::stod(w[4 + e]))) << w[0] << " dim=" << w[1] << " pos=" << w[2] << " e=" << e;
  }
  EXPECT_EQ(checked, 2 * 6 * (8 + 16));
}

// Positions at the ends of int32 and past 2^24, where float32 positions round (2^31 - 1 to 2^31):
// cos and sin of the rounded position, against float64 values of mpmath at 200 bits.
TEST(RopeReference, PositionsUpToTheInt32Limits) {
  struct Known { std::int64_t offset; double cos, sin; };
  for (const Known& k : {Known{2147483647, 0.23781619457280336, -0.97131017579293924},
                         Known{-2147483647, 0.23781619457280336, 0.97131017579293924},
                         Known{16777218, 0.44821291395016176, 0.89392683356542379},
                         Known{1000000000, 0.83788718136390233, 0.54584344944869956}}) {
    RopeParams p = one_head(2);
    p.position_offset = k.offset;
    std::vector<float> x = {1.0f, 0.0f};
    rope_reference(p, x);
    EXPECT_EQ(x[0], static_cast<float>(k.cos)) << k.offset;
    EXPECT_EQ(x[1], static_cast<float>(k.sin)) << k.offset;
  }
  // From a buffer, int32's minimum too: -2^31 is the float of -(2^31 - 1).
  RopeParams p = one_head(2);
  p.seq = 2;
  std::vector<float> x = {1.0f, 0.0f, 1.0f, 0.0f};
  const std::vector<std::int32_t> positions = {std::numeric_limits<std::int32_t>::min(), -2147483647};
  rope_reference(p, x, positions);
  EXPECT_EQ(x[0], static_cast<float>(0.23781619457280336));
  EXPECT_EQ(x[1], static_cast<float>(0.97131017579293924));
  EXPECT_EQ(x[2], x[0]);
  EXPECT_EQ(x[3], x[1]);
}

TEST(RopeReference, PartialRotaryLeavesTheRestUntouched) {
  RopeParams p = one_head(10);
  p.rotary_dim = 4;
  p.position_offset = 3;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  rope_reference(p, x);
  for (std::uint32_t e = 4; e < 10; ++e) EXPECT_EQ(x[e], static_cast<float>(e + 1));
  const float a0 = 3.0f * 1.0f, a1 = 3.0f * static_cast<float>(1.0 / std::pow(10000.0, 2.0 / 4));  // pairs (0, 2), (1, 3)
  EXPECT_FLOAT_EQ(x[0], static_cast<float>(1 * std::cos(a0) - 3 * std::sin(a0)));
  EXPECT_FLOAT_EQ(x[2], static_cast<float>(1 * std::sin(a0) + 3 * std::cos(a0)));
  EXPECT_FLOAT_EQ(x[1], static_cast<float>(2 * std::cos(a1) - 4 * std::sin(a1)));
}

TEST(RopeReference, LayoutsPositionsAndInverseAgree) {
  std::mt19937 rng(11);
  RopeParams p;
  p.batch = 2;
  p.seq = 5;
  p.heads = 3;
  p.head_dim = 8;
  p.position_offset = 40;
  const std::vector<float> x = random_floats(rng, p.elements());
  std::vector<float> bshd = x;
  rope_reference(p, bshd);
  // The same tensor transposed to [B, H, S, D] rotates to the transposed result.
  auto transpose = [&](const std::vector<float>& v) {
    std::vector<float> t(v.size());
    for (std::uint32_t b = 0; b < 2; ++b)
      for (std::uint32_t s = 0; s < 5; ++s)
        for (std::uint32_t h = 0; h < 3; ++h)
          for (std::uint32_t e = 0; e < 8; ++e) t[(((b * 3 + h) * 5 + s) * 8) + e] = v[(((b * 5 + s) * 3 + h) * 8) + e];
    return t;
  };
  RopeParams q = p;
  q.layout = RopeLayout::BHSD;
  std::vector<float> bhsd = transpose(x);
  rope_reference(q, bhsd);
  EXPECT_EQ(bhsd, transpose(bshd));
  // An explicit position buffer holding offset + s gives the same.
  std::vector<std::int32_t> positions(10);
  for (std::uint32_t k = 0; k < 10; ++k) positions[k] = 40 + static_cast<std::int32_t>(k % 5);
  std::vector<float> explicit_positions = x;
  rope_reference(p, explicit_positions, positions);
  EXPECT_EQ(explicit_positions, bshd);
  // The inverse undoes it, attention factor included.
  p.scaling.type = RopeScaling::Yarn;
  p.scaling.factor = 8.0;
  p.scaling.original_max_position = 4096;
  std::vector<float> y = x;
  rope_reference(p, y);
  RopeParams inv = p;
  inv.inverse = true;
  rope_reference(inv, y);
  EXPECT_LT(normalised_error(y, x), 1e-6);
}

TEST(RopeReference, YarnScalesTheNorm) {
  RopeParams p = one_head(8);
  p.position_offset = 7;
  p.scaling.type = RopeScaling::Yarn;
  p.scaling.factor = 4.0;
  p.scaling.original_max_position = 2048;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  rope_reference(p, x);
  double norm = 0;
  for (float v : x) norm += double{v} * v;
  EXPECT_NEAR(std::sqrt(norm), std::sqrt(204.0) * (0.1 * std::log(4.0) + 1.0), 1e-4);
}

TEST(RopeReference, DynamicNtkLengthDefaultsToTheLastPosition) {
  RopeParams p = one_head(16);
  p.seq = 100;
  p.position_offset = 3000;
  p.scaling.type = RopeScaling::DynamicNtk;
  p.scaling.factor = 2.0;
  p.scaling.original_max_position = 2048;
  RopeParams given = p;
  given.scaling.seq_len = 3100;
  EXPECT_EQ(rope_frequencies(p).inv_freq, rope_frequencies(given).inv_freq);
  RopeParams short_seq = p;
  short_seq.position_offset = 0;  // below original_max_position: no scaling at all
  EXPECT_EQ(rope_frequencies(short_seq).inv_freq, rope_frequencies(one_head(16)).inv_freq);
  expect_invalid([&] { rope_frequencies(p, true); }, "seq_len");
}

// Phi-3-mini-128k: 4k trained, 128k extended (factor 32). The long factors apply from sequence
// length 4097 (the last position + 1 where no seq_len is given), the short ones up to 4096.
TEST(RopeReference, LongRopeChoosesItsFactorsByTheSequenceLength) {
  RopeParams p = one_head(8);
  p.seq = 96;
  RopeScalingParams& s = p.scaling;
  s.type = RopeScaling::LongRope;
  s.factor = 32.0;
  s.original_max_position = 4096;
  s.long_factor = {1.0f, 2.0f, 4.0f, 8.0f};
  s.short_factor = {1.0f, 1.5f, 1.25f, 1.125f};
  const std::vector<float> plain = rope_frequencies(one_head(8)).inv_freq;
  auto divided = [&](const std::vector<float>& by) {
    std::vector<float> f(4);
    for (int k = 0; k < 4; ++k) f[k] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * k / 8) / by[k]);
    return f;
  };
  p.position_offset = 4000;  // last position 4095: length 4096
  RopeFrequencies f = rope_frequencies(p);
  EXPECT_EQ(f.inv_freq, divided(s.short_factor));
  EXPECT_NE(f.inv_freq, plain);
  // Phi-3-mini-128k's attention factor, as its config's scaling_factor gives it.
  EXPECT_FLOAT_EQ(f.attention_factor, 1.1902380714238083f);
  p.position_offset = 4001;  // length 4097
  EXPECT_EQ(rope_frequencies(p).inv_freq, divided(s.long_factor));
  RopeParams given = p;
  given.position_offset = 0;
  given.scaling.seq_len = 4097;
  EXPECT_EQ(rope_frequencies(given).inv_freq, divided(s.long_factor));
  given.scaling.seq_len = 4096;
  EXPECT_EQ(rope_frequencies(given, true).inv_freq, divided(s.short_factor));
  expect_invalid([&] { rope_frequencies(p, true); }, "scaling.seq_len = 0: must be given for LongRoPE scaling");
  // An attention factor given replaces the default; a factor of 1 (no extension) gives 1.
  given.scaling.attention_factor = 1.5;
  EXPECT_EQ(rope_frequencies(given).attention_factor, 1.5f);
  given.scaling.attention_factor = 0.0;
  given.scaling.factor = 1.0;
  EXPECT_EQ(rope_frequencies(given).attention_factor, 1.0f);
  // The inverse undoes the rotation, attention factor included.
  std::vector<float> x = {1, -2, 3, 0.5f, 7, 6, -5, 4}, y = x;
  p.seq = 1;
  rope_reference(p, y);
  EXPECT_NE(y, x);
  p.inverse = true;
  rope_reference(p, y);
  EXPECT_LT(normalised_error(y, x), 1e-6);
}

TEST(RopeReference, LongRopeFactorsAreChecked) {
  RopeParams p = one_head(8);
  p.rotary_dim = 6;
  RopeScalingParams& s = p.scaling;
  s.type = RopeScaling::LongRope;
  s.factor = 32.0;
  s.original_max_position = 4096;
  s.long_factor = {1.0f, 2.0f, 4.0f};
  s.short_factor = {1.0f, 1.0f, 1.0f};
  EXPECT_NO_THROW(p.validate());
  s.long_factor.push_back(8.0f);  // one per rotated pair: rotary_dim 6 has 3
  expect_invalid([&] { p.validate(); }, "scaling.long_factor = 4 values: must hold rotary_dim / 2 = 3");
  s.long_factor = {1.0f, 2.0f, 4.0f};
  s.short_factor.clear();
  expect_invalid([&] { p.validate(); }, "scaling.short_factor = 0 values");
  // Down to 2^-64: an int32 position over it stays a finite float32 angle (a subnormal one
  // overflowed to inf, which the reference made NaN and the shader did not).
  for (float bad : {0.0f, -1.0f, NAN, INFINITY, 1e-40f, 0x1p-65f}) {
    s.short_factor = {1.0f, bad, 1.0f};
    expect_invalid([&] { p.validate(); }, "scaling.short_factor[1]");
  }
  s.short_factor = {1.0f, 0x1p-64f, 1.0f};
  EXPECT_NO_THROW(p.validate());
  p.position_offset = 2147483647 - (p.seq - 1);
  s.seq_len = 1;  // the short table
  for (float f : rope_frequencies(p).inv_freq) EXPECT_TRUE(std::isfinite(2147483647.0f * f));
  s.seq_len = 0;
  s.short_factor = {1.0f, 1.0f, 1.0f};
  s.attention_factor = -1.0;
  expect_invalid([&] { p.validate(); }, "scaling.attention_factor");
  s.attention_factor = 0.0;
  // The default attention factor divides by ln(original_max_position): 0 and 1 get the same message.
  for (std::uint32_t bad : {0u, 1u}) {
    s.original_max_position = bad;
    expect_invalid([&] { p.validate(); }, "scaling.original_max_position = " + std::to_string(bad) + ": must be >= 2");
  }
  s.attention_factor = 1.2;  // given: only a position of 1 or more is needed
  EXPECT_NO_THROW(p.validate());
  s.original_max_position = 0;
  expect_invalid([&] { p.validate(); }, "scaling.original_max_position = 0: must be >= 1");
}

TEST(RopeReference, InvalidParametersAreRejected) {
  RopeParams ok = one_head(8);
  ok.heads = 2;
  EXPECT_NO_THROW(ok.validate());
  RopeParams p = ok;
  p.rotary_dim = 5;
  expect_invalid([&] { p.validate(); }, "rotary_dim");
  p.rotary_dim = 10;
  expect_invalid([&] { p.validate(); }, "rotary_dim");
  p = ok;
  p.heads = 0;
  expect_invalid([&] { p.validate(); }, "heads");
  p = ok;
  p.seq = 0;
  expect_invalid([&] { p.validate(); }, "seq");
  p = ok;
  p.head_dim = 0;
  expect_invalid([&] { p.validate(); }, "head_dim");
  p = ok;
  p.base = 1.0;
  expect_invalid([&] { p.validate(); }, "base");
  // Positions are int32: position_offset + s within +-(2^31 - 1).
  p = ok;
  p.position_offset = 2147483647 - (p.seq - 1);
  EXPECT_NO_THROW(p.validate());
  p.position_offset += 1;
  expect_invalid([&] { p.validate(); }, "position_offset");
  p.position_offset = -2147483647;
  EXPECT_NO_THROW(p.validate());
  p.position_offset -= 1;
  expect_invalid([&] { p.validate(); }, "position_offset");
  for (auto type : {RopeScaling::Linear, RopeScaling::DynamicNtk, RopeScaling::Yarn, RopeScaling::Llama3, RopeScaling::LongRope}) {
    p = ok;
    p.scaling.type = type;
    p.scaling.original_max_position = 1024;
    if (type == RopeScaling::LongRope) p.scaling.long_factor = p.scaling.short_factor = {1.0f, 1.0f, 1.0f, 1.0f};
    EXPECT_NO_THROW(p.validate());
    p.scaling.factor = 0.5;
    expect_invalid([&] { p.validate(); }, "scaling.factor");
    p.scaling.factor = NAN;
    expect_invalid([&] { p.validate(); }, "scaling.factor");
    p.scaling.factor = 2.0;
    p.scaling.original_max_position = 0;
    // Linear scaling reads only its factor (the CLI had filled the position in to pass).
    if (type == RopeScaling::Linear) EXPECT_NO_THROW(p.validate());
    else expect_invalid([&] { p.validate(); }, "original_max_position");
  }
  p = ok;
  p.scaling.type = RopeScaling::Yarn;
  p.scaling.original_max_position = 1024;
  p.scaling.beta_fast = 0.0;
  expect_invalid([&] { p.validate(); }, "beta_fast");
  p.scaling.beta_fast = 1.0;  // below beta_slow = 32: the ramp reversed
  p.scaling.beta_slow = 32.0;
  expect_invalid([&] { p.validate(); }, "scaling.beta_fast = 1: must be >= beta_slow = 32");
  p.scaling.beta_fast = p.scaling.beta_slow = 4.0;  // equal: a step at one dimension, as HuggingFace takes it
  p.validate();
  p.scaling.beta_fast = 32.0;
  p.scaling.beta_slow = 1.0;
  p.scaling.attention_factor = -1.0;
  expect_invalid([&] { p.validate(); }, "attention_factor");
  p = ok;
  p.scaling.type = RopeScaling::Llama3;
  p.scaling.original_max_position = 8192;
  p.scaling.high_freq_factor = 1.0;  // == low_freq_factor
  expect_invalid([&] { p.validate(); }, "high_freq_factor");
  p = ok;
  p.head_dim = 2;
  p.scaling.type = RopeScaling::DynamicNtk;
  p.scaling.original_max_position = 1024;
  expect_invalid([&] { p.validate(); }, "rotary_dim");
  std::vector<float> x(16);
  std::vector<std::int32_t> positions(3);
  expect_invalid([&] { rope_reference(ok, x, positions); }, "positions");
  std::vector<float> short_x(15);
  expect_invalid([&] { rope_reference(ok, short_x); }, "x");
}

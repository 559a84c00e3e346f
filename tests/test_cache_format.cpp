// The cache formats (relpos/cache_format.hpp): the host's codecs against their definitions (fp8
// against the nearest of all 256 codes, ties to the even code; bf16 and q8_0 at their ties; ggml's
// q8_0 block bytes), bad formats and scales refused; the shaders' decoders (cache_format.glsl,
// through decode_cache) equal to the host's bit for bit over every format and random rows, with
// odd (34-byte) q8_0 rows and fp8 rows starting mid-word.
#include <relpos/relpos.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "support/expect.hpp"
#include "support/gpu_fixture.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::expect_invalid;
using relpos::test::GpuTest;
using relpos::test::gpu;

namespace {

constexpr CacheFormat kFormats[] = {CacheFormat::F32, CacheFormat::F16, CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3};

TEST(CacheFormat, NamesRowBytesAndParsing) {
  for (CacheFormat f : kFormats) EXPECT_EQ(parse_cache_format(cache_format_name(f)), f);
  EXPECT_FALSE(parse_cache_format("q4_0"));
  EXPECT_EQ(cache_row_bytes(CacheFormat::F32, 128), 512u);
  EXPECT_EQ(cache_row_bytes(CacheFormat::BF16, 128), 256u);
  EXPECT_EQ(cache_row_bytes(CacheFormat::Q8_0, 128), 136u);  // 4 blocks of 34 bytes
  EXPECT_EQ(cache_row_bytes(CacheFormat::Q8_0, 32), 34u);
  EXPECT_EQ(cache_row_bytes(CacheFormat::FP8_E4M3, 128), 128u);
}

TEST(CacheFormat, Fp8IsTheNearestCodeTiesToEvenSaturating) {
  // Every code decodes as OCP E4M3FN defines it and encodes back to itself.
  for (int b = 0; b < 256; ++b) {
    const float x = fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(x)) << b;
      continue;
    }
    EXPECT_EQ(float_to_fp8_e4m3(x), b == 0x80 ? 0x80 : b) << b;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);  // a tie between 1 and 1.125: the even code
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);  // between 1.125 and 1.25: 1.25
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);
  EXPECT_EQ(float_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(std::nanf("")) & 0x7f, 0x7f);
  // Random values: the nearest of the finite codes, ties to the even one.
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> mag(-12.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(mag(rng)) * (rng() & 1 ? -1.0f : 1.0f);
    int best = 0;
    float best_d = std::numeric_limits<float>::infinity();
    for (int b = 0; b < 0x7f; ++b) {
      const float d = std::fabs(std::fabs(x) - fp8_e4m3_to_float(static_cast<std::uint8_t>(b)));
      if (d < best_d || (d == best_d && (b & 1) == 0)) best = b, best_d = d;
    }
    ASSERT_EQ(float_to_fp8_e4m3(x), (x < 0 ? 0x80 : 0) | best) << x;
  }
}

TEST(CacheFormat, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie: even
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
}

TEST(CacheFormat, Q8_0IsGgmlsBlock) {
  // amax 127: d = 1, so q = roundf(x), ties away from zero; d stored as binary16 1.0 (0x3c00).
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f, x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.49f, x[4] = -126.5f;
  std::vector<std::uint8_t> y(34);
  encode_cache_row(CacheFormat::Q8_0, x, y);
  EXPECT_EQ(y[0], 0x00);
  EXPECT_EQ(y[1], 0x3c);
  EXPECT_EQ(static_cast<std::int8_t>(y[2]), 127);
  EXPECT_EQ(static_cast<std::int8_t>(y[3]), 3);
  EXPECT_EQ(static_cast<std::int8_t>(y[4]), -3);
  EXPECT_EQ(static_cast<std::int8_t>(y[5]), 0);
  EXPECT_EQ(static_cast<std::int8_t>(y[6]), -127);
  // A zero block: d = 0 and every q 0.
  std::vector<float> zeros(64, 0.0f), back(64);
  std::vector<std::uint8_t> z(68, 0xff);
  encode_cache_row(CacheFormat::Q8_0, zeros, z);
  EXPECT_EQ(z, std::vector<std::uint8_t>(68, 0));
  // A block holding a NaN keeps it in d, one holding an infinity d = +inf; q = 0 in both, so every
  // value decodes to NaN (ggml's own bytes are undefined there).
  for (float special : {std::nanf(""), -std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> row(64, 1.5f);
    row[33] = special;
    row[40] = -2.0f;
    encode_cache_row(CacheFormat::Q8_0, row, z);
    const std::uint16_t d = static_cast<std::uint16_t>(z[34] | z[35] << 8);
    EXPECT_EQ(d, std::isnan(special) ? 0x7e00 : 0x7c00) << special;
    EXPECT_EQ(std::vector<std::uint8_t>(z.begin() + 36, z.end()), std::vector<std::uint8_t>(32, 0)) << special;
    decode_cache_row(CacheFormat::Q8_0, z, back);
    for (std::size_t i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(back[i])) << special << " value " << i;
    EXPECT_NEAR(back[0], 1.5f, 1e-3f) << special;  // the finite block before it keeps its values
  }
  // A block of values so small that d = max|x| / 127 is below float32's smallest normal: q = 0
  // (1 / d would overflow, and a device that flushes subnormals sees d = 0); d's binary16 is 0.
  for (float tiny : {1e-37f, 1e-38f, 1e-40f, 1.4e-36f}) {
    std::vector<float> row(32, tiny);
    row[5] = -tiny / 3;
    std::vector<std::uint8_t> t(34, 0xff);
    encode_cache_row(CacheFormat::Q8_0, row, t);
    EXPECT_EQ(t, std::vector<std::uint8_t>(34, 0)) << tiny;
  }
  // Decoding: d * q with d the stored binary16; within half a step of the input.
  std::mt19937 rng(5);
  const std::vector<float> r = relpos::test::random_floats(rng, 64, -3.0f, 3.0f);
  encode_cache_row(CacheFormat::Q8_0, r, z);
  decode_cache_row(CacheFormat::Q8_0, z, back);
  for (std::size_t i = 0; i < 64; ++i) {
    float amax = 0.0f;
    for (std::size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(r[j]));
    EXPECT_NEAR(back[i], r[i], amax / 127.0f * 0.51f + 1e-3f * amax) << i;
  }
}

TEST(CacheFormat, BadHeadDimsAndScalesAreRefused) {
  expect_invalid([] { check_cache_head_dim(CacheFormat::Q8_0, 48); }, "multiple of 32");
  expect_invalid([] { check_cache_head_dim(CacheFormat::FP8_E4M3, 7); }, "head_dim");
  EXPECT_NO_THROW(check_cache_head_dim(CacheFormat::Q8_0, 96));
  const std::vector<float> two = {0.5f, 2.0f};
  EXPECT_NO_THROW(check_cache_scales(CacheFormat::FP8_E4M3, two, 2, "k_scales"));
  expect_invalid([&] { check_cache_scales(CacheFormat::FP8_E4M3, two, 3, "k_scales"); }, "kv_heads = 3");
  expect_invalid([&] { check_cache_scales(CacheFormat::FP8_E4M3, std::vector<float>{1.0f, std::nanf("")}, 2, "v_scales"); }, "v_scales[1]");
  expect_invalid([&] { check_cache_scales(CacheFormat::FP8_E4M3, std::vector<float>{INFINITY, 1.0f}, 2, "k_scales"); }, "k_scales[0]");
  expect_invalid([&] { check_cache_scales(CacheFormat::FP8_E4M3, std::vector<float>{0.0f, 1.0f}, 2, "k_scales"); }, "k_scales[0]");
  expect_invalid([&] { check_cache_scales(CacheFormat::FP8_E4M3, std::vector<float>{-1.0f, 1.0f}, 2, "k_scales"); }, "k_scales[0]");
  expect_invalid([&] { check_cache_scales(CacheFormat::FP8_E4M3, std::vector<float>{1e-39f, 1.0f}, 2, "k_scales"); }, "k_scales[0]");
  expect_invalid([&] { check_cache_scales(CacheFormat::Q8_0, two, 2, "k_scales"); }, "only fp8_e4m3");
}

// Random rows of a format: encoded values (with specials for the float formats) and, for q8_0
// and fp8, random bytes too (every code decodes).
std::vector<std::uint8_t> random_rows(std::mt19937& rng, CacheFormat f, std::uint32_t rows, std::uint32_t head_dim, const std::vector<float>& scales) {
  const std::uint64_t rb = cache_row_bytes(f, head_dim);
  std::vector<std::uint8_t> bytes(rows * rb);
  std::uniform_real_distribution<float> mag(-14.0f, 10.0f);
  for (std::uint32_t i = 0; i < rows; ++i) {
    std::vector<float> x(head_dim);
    for (float& v : x) v = std::exp2(mag(rng)) * (rng() & 1 ? -1.0f : 1.0f);
    if (i % 5 == 1) x[0] = 0.0f;
    encode_cache_row(f, x, std::span(bytes).subspan(i * rb, rb), scales.empty() ? 1.0f : scales[i % scales.size()]);
    if ((f == CacheFormat::Q8_0 || f == CacheFormat::FP8_E4M3) && i % 3 == 2)
      for (std::uint64_t b = 0; b < rb; ++b) bytes[i * rb + b] = static_cast<std::uint8_t>(rng());
    if (f == CacheFormat::Q8_0)  // keep scales finite: a NaN or inf d would make every value NaN or inf alike
      for (std::uint32_t blk = 0; blk < head_dim / 32; ++blk) bytes[i * rb + blk * 34 + 1] &= 0x7b;
  }
  return bytes;
}

class CacheFormatGpu : public GpuTest {};

TEST_F(CacheFormatGpu, ShaderDecodersEqualTheHosts) {
  Context& ctx = gpu();
  std::mt19937 rng(2026);
  int odd_rows = 0;
  for (CacheFormat f : kFormats)
    for (std::uint32_t head_dim : {32u, 64u, 96u, 128u, 2u, 6u, 10u}) {
      if (f == CacheFormat::Q8_0 && head_dim % 32) continue;
      for (std::uint32_t rows : {1u, 3u, 37u}) {
        CacheDecodeParams p{.format = f, .rows = rows, .kv_heads = rows == 1 ? 1u : 3u, .head_dim = head_dim};
        if (f == CacheFormat::FP8_E4M3) p.scales = relpos::test::random_floats(rng, p.kv_heads, 0.01f, 4.0f);
        // Any byte count (3 q8_0 rows of 34 bytes: 102): the buffer's capacity is whole words.
        std::vector<std::uint8_t> bytes = random_rows(rng, f, rows, head_dim, p.scales);
        odd_rows += p.cache_bytes() % 4 != 0;
        Buffer cache = make_buffer(ctx, bytes), out(ctx, std::uint64_t{rows} * head_dim * 4);
        Recorder r(ctx);
        decode_cache(r, p, cache, out);
        r.submit_and_wait();
        std::vector<float> want(std::size_t{rows} * head_dim);
        decode_cache_reference(p, bytes, want);
        const std::vector<float> got = out.download<float>(want.size());
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_TRUE(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]) || (std::isnan(got[i]) && std::isnan(want[i])))
              << cache_format_name(f) << " head_dim " << head_dim << " rows " << rows << " at " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  EXPECT_GT(odd_rows, 0);  // rows that start and end mid-word were decoded
}

TEST_F(CacheFormatGpu, DecodeRefusesBadInputBeforeRecording) {
  Context& ctx = gpu();
  Buffer cache(ctx, 34 * 4), out(ctx, 4 * 32 * 4);
  Recorder r(ctx);
  expect_invalid([&] { decode_cache(r, {.format = CacheFormat::Q8_0, .rows = 4, .head_dim = 48}, cache, out); }, "multiple of 32");
  expect_invalid([&] { decode_cache(r, {.format = CacheFormat::Q8_0, .rows = 3, .head_dim = 32}, cache, out); }, "cache buffer");
  expect_invalid([&] { decode_cache(r, {.format = CacheFormat::FP8_E4M3, .rows = 4, .kv_heads = 2, .head_dim = 32, .scales = {1.0f}}, cache, out); },
                 "scales");
  EXPECT_EQ(r.dispatch_count(), 0u);
}

}  // namespace

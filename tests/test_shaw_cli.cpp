// `relpos run shaw-logits` and `relpos run shaw-attention` as scripts use them: the documented
// flags, .npy in and out, and errors for shapes that do not fit together.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>

#include "support/shaw_seed.hpp"
#include "support/test_data.hpp"

#include "support/run_tool.hpp"

using namespace relpos;
using relpos::test::tool;

namespace {

std::string temp(const std::string& name) { return (std::filesystem::temp_directory_path() / ("relpos_shaw_cli_" + name)).string(); }

std::string save(const std::string& name, const std::vector<float>& x, std::vector<std::uint64_t> shape) {
  write_npy(temp(name), DType::F32, shape, x.data());
  return temp(name);
}

std::vector<float> random(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  return relpos::test::random_floats(rng, n, -1.0f, 1.0f);
}

}  // namespace

TEST(ShawCli, LogitsOfTheSeedAreExact) {
  const relpos::test::ShawSeed seed = relpos::test::shaw_seed();
  const std::string args = "run shaw-logits --q " + save("q.npy", seed.q, {2, 3, 4, 5}) + " --rel-keys " + save("e.npy", seed.table, {5, 5}) +
                           " --max-relative-position 2 --keys 4 --out " + temp("o.npy");
  auto r = tool(args);
  ASSERT_EQ(r.status, 0) << r.output;
  auto a = read_npy(temp("o.npy"));
  EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{2, 3, 4, 4}));
  EXPECT_EQ(a.to_f32("o"), seed.expected);
}

TEST(ShawCli, LogitsWithKeysAddTheContentTerm) {
  const auto q = random(2 * 3 * 8, 1), k = random(2 * 5 * 8, 2), e = random(7 * 8, 3);
  auto r = tool("run shaw-logits --q " + save("q2.npy", q, {1, 2, 3, 8}) + " --k " + save("k2.npy", k, {1, 2, 5, 8}) + " --rel-keys " +
                save("e2.npy", e, {7, 8}) + " --max-relative-position 3 --align-last --scale 0.5 --out " + temp("o2.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  ShawParams p;
  p.max_relative_position = 3;
  p.heads = 2;
  p.queries = 3;
  p.keys = 5;
  p.head_dim = 8;
  p.query_offset = 2;
  p.scale = 0.5f;
  UnfusedAttentionParams a;
  a.heads = 2;
  a.queries = 3;
  a.keys = 5;
  a.head_dim = 8;
  a.scale = 0.5f;
  auto want = shaw_logits_direct_reference(p, q, e);
  const auto content = unfused_logits_reference(a, q, k);
  for (std::size_t x = 0; x < want.size(); ++x) want[x] += content[x];
  // Sums of 8 products <= 1 in magnitude, times 0.5: far below 1e-5.
  EXPECT_LE(normalised_error(read_npy(temp("o2.npy")).to_f32("o2"), want), 1e-5);
}

TEST(ShawCli, AttentionOnGpuMatchesReferenceInBothDtypes) {
  const auto q = random(2 * 2 * 4 * 8, 4), k = random(2 * 2 * 6 * 8, 5), v = random(2 * 2 * 6 * 8, 6);
  const auto ek = random(5 * 8, 7), ev = random(5 * 8, 8);
  const std::string inputs = "--q " + save("aq.npy", q, {2, 2, 4, 8}) + " --k " + save("ak.npy", k, {2, 2, 6, 8}) + " --v " +
                             save("av.npy", v, {2, 2, 6, 8}) + " --rel-keys " + save("aek.npy", ek, {5, 8}) + " --rel-values " +
                             save("aev.npy", ev, {5, 8}) + " --max-relative-position 2 --causal --query-offset 2 --key-lengths 6,3";
  for (std::string dtype : {"f32", "f16"}) {
    auto g = tool("run shaw-attention " + inputs + " --dtype " + dtype + " --out " + temp("ag.npy"));
    ASSERT_EQ(g.status, 0) << g.output;
    auto c = tool("run shaw-attention " + inputs + " --dtype " + dtype + " --reference --out " + temp("ac.npy"));
    ASSERT_EQ(c.status, 0) << c.output;
    const auto got = read_npy(temp("ag.npy")), want = read_npy(temp("ac.npy"));
    EXPECT_EQ(got.descr, dtype == "f16" ? "<f2" : "<f4");
    EXPECT_EQ(got.shape, (std::vector<std::uint64_t>{2, 2, 4, 8}));
    // Both round to the output dtype; f32 sums of <= 16 terms of magnitude <= 2 differ far below 1e-5.
    EXPECT_LE(normalised_error(got.to_f32("g"), want.to_f32("c")), dtype == "f16" ? 2.0 / 1024 : 1e-5) << dtype;
  }
}

TEST(ShawCli, MismatchedShapesAreClearErrors) {
  const std::string q = save("eq.npy", random(2 * 3 * 8, 9), {1, 2, 3, 8});
  const std::string k3 = save("ek3.npy", random(3 * 5 * 8, 10), {1, 3, 5, 8});  // three heads
  const std::string e = save("ee.npy", random(5 * 8, 11), {5, 8});
  auto r = tool("run shaw-logits --q " + q + " --k " + k3 + " --rel-keys " + e + " --max-relative-position 2 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("relpos: error: --k heads"), std::string::npos) << r.output;
  r = tool("run shaw-logits --q " + q + " --rel-keys " + e + " --max-relative-position 3 --keys 4 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("2 * max_relative_position + 1"), std::string::npos) << r.output;
  r = tool("run shaw-logits --q " + q + " --rel-keys " + e + " --max-relative-position 0 --keys 4 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("max-relative-position"), std::string::npos) << r.output;
  const std::string e4 = save("ee4.npy", random(5 * 4, 12), {5, 4});  // head_dim 4, q has 8
  r = tool("run shaw-logits --q " + q + " --rel-keys " + e4 + " --max-relative-position 2 --keys 4 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("rel table head_dim"), std::string::npos) << r.output;
  r = tool("run shaw-attention --q " + q + " --k " + k3 + " --v " + k3 + " --rel-keys " + e + " --rel-values " + e +
           " --max-relative-position 2 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("relpos: error:"), std::string::npos) << r.output;
}

// --keys sets the logits' width without --k: 0 is refused naming the flag, the value and the limit.
TEST(ShawCli, LogitsKeysNameTheValueAndTheLimit) {
  const std::string q = save("kq.npy", random(1 * 2 * 3 * 8, 20), {1, 2, 3, 8});
  const std::string e = save("ke.npy", random(5 * 8, 21), {5, 8});
  const std::string run = "run shaw-logits --q " + q + " --rel-keys " + e + " --max-relative-position 2 --out " + temp("x.npy");
  auto r = tool(run + " --keys 0");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --keys = 0: must be a whole number in [1, 4294967295]"), std::string::npos) << r.output;
  r = tool(run);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --keys is required without --k"), std::string::npos) << r.output;
}

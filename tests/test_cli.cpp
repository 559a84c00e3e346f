// The relpos tool as scripts use it: documented commands, .npy in and out, clear errors.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

using namespace relpos;

namespace {

struct Result {
  int status;
  std::string output;
};

Result tool(const std::string& args) {
  const std::string cmd = std::string(RELPOS_TOOL) + " " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  int status = pclose(pipe.release());
  return {WEXITSTATUS(status), out};
}

std::string temp(const std::string& name) { return (std::filesystem::temp_directory_path() / ("relpos_cli_" + name)).string(); }

}  // namespace

TEST(Cli, DevicesMarksTheChosenOne) {
  auto r = tool("devices");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("* "), std::string::npos) << r.output;
}

TEST(Cli, T5BucketsWritesInt32Npy) {
  auto r = tool("run t5-buckets --queries 14 --keys 14 --num-buckets 6 --max-distance 20 --causal --out " + temp("b.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto a = read_npy(temp("b.npy"));
  EXPECT_EQ(a.descr, "<i4");
  EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{14, 14}));
  T5Params p;
  p.num_buckets = 6;
  p.max_distance = 20;
  p.bidirectional = false;
  p.queries = p.keys = 14;
  EXPECT_EQ(a.to_i32("b"), t5_buckets_reference(p));
}

TEST(Cli, T5BiasReadsTableAndWritesF32AndF16) {
  std::vector<float> table(32 * 3);
  for (std::size_t k = 0; k < table.size(); ++k) table[k] = 0.25f * static_cast<float>(k) - 5.0f;
  std::vector<std::uint64_t> shape = {32, 3};
  write_npy(temp("table.npy"), DType::F32, shape, table.data());
  T5Params p;
  p.queries = 5;
  p.keys = 9;
  p.heads = 3;
  p.max_distance = 64;
  p.query_offset = 4;
  p.scale = 2.0f;
  auto want = t5_bias_reference(p, table);
  auto r = tool("run t5-bias --table " + temp("table.npy") + " --queries 5 --keys 9 --max-distance 64 --query-offset 4 --scale 2 --out " +
                temp("bias.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto a = read_npy(temp("bias.npy"));
  EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{3, 5, 9}));
  EXPECT_EQ(a.to_f32("bias"), want);
  r = tool("run t5-bias --table " + temp("table.npy") + " --queries 5 --keys 9 --max-distance 64 --query-offset 4 --scale 2 --dtype f16 --out " +
           temp("bias16.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto h = read_npy(temp("bias16.npy"));
  EXPECT_EQ(h.descr, "<f2");
  EXPECT_EQ(h.to_f32("bias"), from_half(to_half(want)));
}

TEST(Cli, BadInputGivesClearErrors) {
  { std::ofstream(temp("junk.npy")) << "junk"; }
  auto r = tool("run t5-bias --table " + temp("junk.npy") + " --queries 4 --keys 4 --max-distance 20 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("not a readable .npy"), std::string::npos) << r.output;
  r = tool("run t5-buckets --queries 4 --keys 4 --num-buckets 3 --max-distance 20 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("num_buckets"), std::string::npos) << r.output;
  r = tool("run t5-buckets --queries 4 --keys 4 --num-buckets 32 --max-distance 8 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("max_distance"), std::string::npos) << r.output;
  r = tool("run t5-buckets --queries 0 --keys 4 --num-buckets 32 --max-distance 20 --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  r = tool("run nonsense");
  EXPECT_NE(r.status, 0);
}

TEST(Cli, CheckPassesOnThisDevice) {
  auto r = tool("check --filter t5-buckets");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("PASS t5-buckets"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
}

TEST(Cli, BenchJsonHasTheDocumentedFields) {
  auto r = tool("bench --json --filter t5-bias --repeat 1 --short");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* field : {"\"op\"", "\"shape\"", "\"median_ms\"", "\"gbps\"", "\"ceiling_gbps\"", "\"cpu_ms\""})
    EXPECT_NE(r.output.find(field), std::string::npos) << field << " in " << r.output;
}

namespace {

void write_f32(const std::string& name, const std::vector<float>& x, std::vector<std::uint64_t> shape) {
  write_npy(temp(name), DType::F32, shape, x.data());
}

}  // namespace

TEST(Cli, AttentionWithT5BiasMasksAndLse) {
  AttentionParams p{.batch = 2, .heads = 4, .kv_heads = 2, .queries = 5, .keys = 9, .head_dim = 8, .scale = 1.0f, .query_offset = 2,
                    .causal = true, .memory_prefix = 2, .bias = AttentionBias::T5};
  p.t5.num_buckets = 6;
  p.t5.max_distance = 20;
  p.t5.bidirectional = false;
  std::vector<float> q(2 * 4 * 5 * 8), kv(2 * 2 * 9 * 8), table(6 * 4);
  for (std::size_t e = 0; e < q.size(); ++e) q[e] = std::sin(0.37f * e);
  for (std::size_t e = 0; e < kv.size(); ++e) kv[e] = std::cos(0.11f * e);
  for (std::size_t e = 0; e < table.size(); ++e) table[e] = 0.1f * e - 1.0f;
  write_f32("q.npy", q, {2, 4, 5, 8});
  write_f32("kv.npy", kv, {2, 2, 9, 8});
  write_f32("t5table.npy", table, {6, 4});
  const auto want = attention_reference(p, {q, kv, kv, table, {}, {}, {}});
  const std::string args = "run attention --q " + temp("q.npy") + " --k " + temp("kv.npy") + " --v " + temp("kv.npy") +
                           " --bias t5 --table " + temp("t5table.npy") +
                           " --max-distance 20 --causal-buckets --causal --query-offset 2 --memory-prefix 2 --scale 1 --out " +
                           temp("att.npy") + " --lse " + temp("lse.npy");
  for (const std::string extra : {"", " --reference"}) {
    auto r = tool(args + extra);
    ASSERT_EQ(r.status, 0) << r.output;
    auto out = read_npy(temp("att.npy")), lse = read_npy(temp("lse.npy"));
    EXPECT_EQ(out.shape, (std::vector<std::uint64_t>{2, 4, 5, 8}));
    EXPECT_EQ(lse.shape, (std::vector<std::uint64_t>{2, 4, 5}));
    EXPECT_LE(normalised_error(out.to_f32("out"), want.out), 1e-4) << extra;  // float32 accumulation
    EXPECT_LE(normalised_error(lse.to_f32("lse"), want.lse), 1e-4) << extra;
  }
  auto r = tool(args + " --dtype f16");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_npy(temp("att.npy")).descr, "<f2");
}

TEST(Cli, AttentionBadInputGivesClearErrors) {
  std::vector<float> q(1 * 3 * 2 * 8), kv(1 * 2 * 4 * 8);
  write_f32("q3.npy", q, {1, 3, 2, 8});
  write_f32("kv2.npy", kv, {1, 2, 4, 8});
  write_f32("kv3.npy", std::vector<float>(1 * 3 * 4 * 8), {1, 3, 4, 8});
  auto r = tool("run attention --q " + temp("q3.npy") + " --k " + temp("kv2.npy") + " --v " + temp("kv2.npy") + " --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("relpos: error: kv_heads"), std::string::npos) << r.output;
  r = tool("run attention --q " + temp("q3.npy") + " --k " + temp("kv3.npy") + " --v " + temp("kv3.npy") + " --bias shaw --out " +
           temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--rel-keys"), std::string::npos) << r.output;
  r = tool("run attention --q " + temp("q3.npy") + " --k " + temp("kv3.npy") + " --v " + temp("kv3.npy") + " --bias alibi --slopes " +
           temp("q3.npy") + " --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--slopes"), std::string::npos) << r.output;
}

TEST(Cli, AttentionMergeOfTwoBlocks) {
  // Two parts of one row with D = 4: lse log 1 and log 3 weigh them 1:3.
  write_f32("parts.npy", {4, 0, 0, 0, 8, 0, 0, 4}, {2, 1, 4});
  write_f32("parts_lse.npy", {0.0f, std::log(3.0f)}, {2, 1});
  auto r = tool("run attention-merge --parts " + temp("parts.npy") + " --parts-lse " + temp("parts_lse.npy") + " --out " +
                temp("merged.npy") + " --lse " + temp("merged_lse.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto out = read_npy(temp("merged.npy")).to_f32("out");
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NEAR(out[0], 7.0f, 1e-5);
  EXPECT_NEAR(out[3], 3.0f, 1e-5);
  EXPECT_NEAR(read_npy(temp("merged_lse.npy")).to_f32("lse")[0], std::log(4.0f), 1e-5);
}

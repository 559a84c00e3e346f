// The relpos tool as scripts use it: documented commands, .npy in and out, clear errors.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "support/run_tool.hpp"

using namespace relpos;
using relpos::test::tool;

namespace {

std::string temp(const std::string& name) { return (std::filesystem::temp_directory_path() / ("relpos_cli_" + name)).string(); }

// The records of `relpos bench --json ARGS` (none, with a failure, where it fails).
nlohmann::json bench_records(const std::string& args) {
  const auto r = tool("bench --json " + args);
  const auto list = r.output.find('[');
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(list, std::string::npos) << r.output;
  return r.status == 0 && list != std::string::npos ? nlohmann::json::parse(r.output.substr(list)) : nlohmann::json::array();
}

}  // namespace

TEST(Cli, DevicesMarksTheChosenOne) {
  auto r = tool("devices");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("* "), std::string::npos) << r.output;
}

TEST(Cli, VersionIsTheLibrarys) {
  auto r = tool("--version");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, std::string("relpos ") + RELPOS_VERSION_STRING + "\n");
}

// The tool keeps its pipeline cache in $XDG_CACHE_HOME/relpos (else ~/.cache/relpos), or where
// --pipeline-cache says; '' turns it off.
TEST(Cli, PipelineCacheGoesToTheXdgCacheDirectory) {
  const std::filesystem::path xdg = temp("xdg_cache"), chosen = temp("chosen_cache");
  std::filesystem::remove_all(xdg);
  std::filesystem::remove_all(chosen);
  auto r = relpos::test::tool_command("XDG_CACHE_HOME=" + xdg.string() + " " + RELPOS_TOOL + " run t5-buckets --queries 4 --keys 4 --num-buckets 4 --max-distance 8 --out " +
                                      temp("pc.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(std::filesystem::is_directory(xdg / "relpos")) << r.output;
  EXPECT_FALSE(std::filesystem::is_empty(xdg / "relpos"));
  r = relpos::test::tool_command("XDG_CACHE_HOME=" + xdg.string() + " " + RELPOS_TOOL + " --pipeline-cache " + chosen.string() +
                                 " run t5-buckets --queries 4 --keys 4 --num-buckets 4 --max-distance 8 --out " + temp("pc.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(std::filesystem::is_directory(chosen));
  std::filesystem::remove_all(xdg);
  r = relpos::test::tool_command("XDG_CACHE_HOME=" + xdg.string() + " " + RELPOS_TOOL + " --pipeline-cache '' run t5-buckets --queries 4 --keys 4 --num-buckets 4 --max-distance 8 --out " +
                                 temp("pc.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(xdg / "relpos"));  // (Mesa keeps its own shader cache there)
  std::filesystem::remove_all(xdg);
  std::filesystem::remove_all(chosen);
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
  for (const char* field : {"\"op\"", "\"shape\"", "\"median_ms\"", "\"gbps\"", "\"ceiling_gbps\"", "\"transfer_ceiling_gbps\"",
                            "\"transfer_ceiling_ratio\"", "\"cpu_ms\""})
    EXPECT_NE(r.output.find(field), std::string::npos) << field << " in " << r.output;
}

// --skip-cpu times no CPU reference: every record's cpu_ms is 0 (with --hold-ms, which runs each
// case before timing it, on any device).
TEST(Cli, BenchSkipsTheCpuReferenceWhenAsked) {
  const auto records = bench_records("--filter t5-bias --repeat 1 --short --skip-cpu --hold-ms 50");
  ASSERT_FALSE(records.empty());
  for (const auto& rec : records) {
    EXPECT_EQ(rec.at("cpu_ms").get<double>(), 0.0) << rec.dump();
    EXPECT_GT(rec.at("median_ms").get<double>(), 0.0) << rec.dump();
  }
}

// --dispatches: each record lists the shaders the op ran, each with its median time a run; a bench
// without it lists none.
TEST(Cli, BenchDispatchesListsEachShadersTime) {
  const auto records = bench_records("--filter attention --repeat 3 --short --skip-cpu --dispatches");
  ASSERT_FALSE(records.empty());
  std::set<std::string> shaders;
  for (const auto& rec : records) {
    const auto& list = rec.at("dispatch_ms");
    EXPECT_FALSE(list.empty()) << rec.dump();
    for (const auto& d : list) {
      shaders.insert(d.at("shader").get<std::string>());
      EXPECT_GT(d.at("median_ms").get<double>(), 0.0) << rec.dump();
    }
  }
  // The fused kernel (the CPU or the GPU class's) and, in the unfused baseline's own case, its products.
  EXPECT_TRUE(std::any_of(shaders.begin(), shaders.end(), [](const std::string& s) { return s.starts_with("attention_fused"); }));
  EXPECT_TRUE(shaders.count("masked_softmax"));
  for (const auto& rec : bench_records("--filter t5-bias --repeat 1 --short --skip-cpu")) EXPECT_FALSE(rec.contains("dispatch_ms"));
}

// Cases whose target is a ratio to another implementation time it in the same submission.
TEST(Cli, BenchJsonReportsTheSameSubmissionBaseline) {
  auto r = tool("bench --json --filter attention --repeat 1 --short");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* field : {"\"baseline\": \"unfused\"", "\"baseline_ms\"", "\"speedup_vs_baseline\""})
    EXPECT_NE(r.output.find(field), std::string::npos) << field << " in " << r.output;
  // The unfused pipeline's own line has no baseline.
  const auto unfused = r.output.find("\"op\": \"attention-unfused\"");
  ASSERT_NE(unfused, std::string::npos) << r.output;
  const auto record_end = r.output.find('}', unfused);
  const auto record_start = r.output.rfind('{', unfused);
  EXPECT_EQ(r.output.substr(record_start, record_end - record_start).find("baseline"), std::string::npos) << r.output;
}

// The decode loop through a plan: its record carries the loop's figures, and nothing is created
// after the first step.
TEST(Cli, BenchDecodeLoopCreatesNothingAfterItsFirstStep) {
  auto r = tool("bench --json --filter attention-decode-loop --repeat 1");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* field : {"\"op\": \"attention-decode-loop\"", "\"host_us_per_step\"", "\"allocations_after_first\": 0.0",
                            "\"pipelines_after_first\": 0.0"})
    EXPECT_NE(r.output.find(field), std::string::npos) << field << " in " << r.output;
}

TEST(Cli, AlibiSlopesAndBias) {
  auto r = tool("run alibi-slopes --heads 6 --out " + temp("slopes.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto a = read_npy(temp("slopes.npy"));
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.to_f32("slopes"), (std::vector<float>{0x1p-2f, 0x1p-4f, 0x1p-6f, 0x1p-8f, 0x1p-1f, 0x1p-3f}));
  r = tool("run alibi-slopes --heads 4 --max-bias 4 --no-interleave --out " + temp("slopes.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_npy(temp("slopes.npy")).to_f32("slopes"), (std::vector<float>{0x1p-1f, 0x1p-2f, 0x1p-3f, 0x1p-4f}));

  AlibiParams p;
  p.heads = 3;
  p.queries = 4;
  p.keys = 7;
  p.causal = true;
  p.query_offset = 3;
  r = tool("run alibi-bias --heads 3 --queries 4 --keys 7 --causal --query-offset 3 --out " + temp("alibi.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  a = read_npy(temp("alibi.npy"));
  EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{3, 4, 7}));
  const auto got = a.to_f32("alibi");
  EXPECT_EQ(got, alibi_bias_reference(p));
  EXPECT_EQ(got[4], -std::numeric_limits<float>::infinity());  // query 0 (position 3), key 4
  r = tool("run alibi-bias --heads 0 --queries 4 --keys 4 --out " + temp("alibi.npy"));
  EXPECT_NE(r.status, 0);
}

// --expansion forces the path of the per-distance biases; both write the reference's bits.
TEST(Cli, ExpansionOptionPicksEitherPath) {
  AlibiParams p;
  p.heads = 3;
  p.queries = 40;
  p.keys = 72;
  p.causal = true;
  for (const char* path : {"shader", "copies", "auto"}) {
    auto r = tool(std::string("--expansion ") + path + " run alibi-bias --heads 3 --queries 40 --keys 72 --causal --out " +
                  temp("alibi_e.npy"));
    ASSERT_EQ(r.status, 0) << path << ": " << r.output;
    EXPECT_EQ(read_npy(temp("alibi_e.npy")).to_f32("alibi"), alibi_bias_reference(p)) << path;
  }
  auto r = tool("--expansion memcpy devices");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--expansion"), std::string::npos) << r.output;
}

TEST(Cli, RopeRotatesNpyInItsDtype) {
  RopeParams p;
  p.batch = 2;
  p.seq = 5;
  p.heads = 3;
  p.head_dim = 8;
  p.rotary_dim = 4;
  p.style = RopeStyle::GptJ;
  p.layout = RopeLayout::BHSD;
  p.scaling.type = RopeScaling::Yarn;
  p.scaling.factor = 4.0;
  p.scaling.original_max_position = 2048;
  std::vector<float> x(p.elements());
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = 0.01f * static_cast<float>(k % 97) - 0.4f;
  const std::vector<std::uint64_t> shape = {2, 3, 5, 8};
  write_npy(temp("q.npy"), DType::F32, shape, x.data());
  const std::vector<std::int32_t> positions = {7, 8, 9, 10, 11, 0, 1, 2, 100, 200};
  const std::vector<std::uint64_t> pshape = {2, 5};
  write_npy(temp("pos.npy"), DType::I32, pshape, positions.data());
  auto want = x;
  rope_reference(p, want, positions);
  auto r = tool("run rope --x " + temp("q.npy") + " --layout bhsd --style gptj --rotary-dim 4 --positions " + temp("pos.npy") +
                " --scaling yarn --factor 4 --original-max-position 2048 --out " + temp("qr.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto a = read_npy(temp("qr.npy"));
  EXPECT_EQ(a.shape, shape);
  EXPECT_LE(normalised_error(a.to_f32("qr"), want), 1e-6);  // the shader's tolerance (docs/alibi_rope.md)

  auto h = to_half(x);
  write_npy(temp("q16.npy"), DType::F16, shape, h.data());
  r = tool("run rope --x " + temp("q16.npy") + " --layout bhsd --style gptj --rotary-dim 4 --positions " + temp("pos.npy") +
           " --scaling yarn --factor 4 --original-max-position 2048 --inverse --out " + temp("qr16.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_npy(temp("qr16.npy")).descr, "<f2");

  r = tool("run rope --x " + temp("q.npy") + " --layout bhsd --style gptj --rotary-dim 5 --out " + temp("qr.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("relpos: error: rotary_dim"), std::string::npos) << r.output;
  const std::vector<std::int32_t> three = {1, 2, 3};
  const std::vector<std::uint64_t> tshape = {3};
  write_npy(temp("pos3.npy"), DType::I32, tshape, three.data());
  r = tool("run rope --x " + temp("q.npy") + " --layout bhsd --style gptj --positions " + temp("pos3.npy") + " --out " + temp("qr.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--positions"), std::string::npos) << r.output;
  r = tool("run rope --x " + temp("q.npy") + " --layout bhsd --style gptj --scaling llama3 --factor 0.5 --out " + temp("qr.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("scaling.factor"), std::string::npos) << r.output;
}

// LongRoPE's factors come from float .npy files (float64 rounded to float32, as HuggingFace holds
// them); the long ones apply past --original-max-position.
TEST(Cli, RopeLongRopeReadsItsFactorsFromNpy) {
  RopeParams p;
  p.seq = 3;
  p.heads = 2;
  p.head_dim = 8;
  p.position_offset = 5000;
  RopeScalingParams& s = p.scaling;
  s.type = RopeScaling::LongRope;
  s.factor = 32.0;
  s.original_max_position = 4096;
  const std::vector<double> long_factor = {1.0, 3.1, 9.7, 27.3}, short_factor = {1.0, 1.01, 1.03, 1.07};
  for (double v : long_factor) s.long_factor.push_back(static_cast<float>(v));
  for (double v : short_factor) s.short_factor.push_back(static_cast<float>(v));
  std::vector<float> x(p.elements());
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = 0.03f * static_cast<float>(k % 13) - 0.2f;
  const std::vector<std::uint64_t> shape = {1, 3, 2, 8}, four = {4};
  write_npy(temp("lq.npy"), DType::F32, shape, x.data());
  write_npy(temp("long.npy"), "<f8", four, long_factor.data());
  write_npy(temp("short.npy"), "<f8", four, short_factor.data());
  const std::string flags = " --scaling longrope --factor 32 --original-max-position 4096 --long-factor " + temp("long.npy") +
                            " --short-factor " + temp("short.npy");
  for (const char* path : {"", " --reference"}) {
    auto want = x;
    rope_reference(p, want);
    auto r = tool("run rope --x " + temp("lq.npy") + " --position-offset 5000" + flags + path + " --out " + temp("lqr.npy"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_LE(normalised_error(read_npy(temp("lqr.npy")).to_f32("lqr"), want), 1e-6) << path;
  }
  // The short factors below the trained length: a different rotation.
  RopeParams near = p;
  near.position_offset = 10;
  auto want = x;
  rope_reference(near, want);
  auto r = tool("run rope --x " + temp("lq.npy") + " --position-offset 10" + flags + " --out " + temp("lqr.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<float> got = read_npy(temp("lqr.npy")).to_f32("lqr");
  EXPECT_LE(normalised_error(got, want), 1e-6);
  RopeParams plain = near;
  plain.scaling = {};
  auto unscaled = x;
  rope_reference(plain, unscaled);
  EXPECT_GT(normalised_error(got, unscaled), 1e-4);

  // From --positions, --seq-len defaults to the last position + 1 (HuggingFace's max(position_ids)
  // + 1): 4097 here, the long table; --seq-len 4096 gives the short one. An attention factor given
  // needs no --factor.
  const std::vector<std::int32_t> positions = {4000, 4096, 17};
  const std::vector<std::uint64_t> pshape = {3};
  write_npy(temp("lpos.npy"), DType::I32, pshape, positions.data());
  const std::string no_factor = " --scaling longrope --attention-factor 1.25 --original-max-position 4096 --long-factor " +
                                temp("long.npy") + " --short-factor " + temp("short.npy");
  for (const char* seq_len : {"", " --seq-len 4096"}) {
    RopeParams at = p;
    at.scaling.factor = 1.0;
    at.scaling.attention_factor = 1.25;
    at.scaling.seq_len = *seq_len ? 4096 : 4097;
    auto want_at = x;
    rope_reference(at, want_at, positions);
    r = tool("run rope --x " + temp("lq.npy") + " --positions " + temp("lpos.npy") + no_factor + seq_len + " --out " + temp("lqr.npy"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_LE(normalised_error(read_npy(temp("lqr.npy")).to_f32("lqr"), want_at), 1e-6) << seq_len;
  }
  RopeParams long_at = p, short_at = p;
  long_at.scaling.seq_len = 4097;
  short_at.scaling.seq_len = 4096;
  auto long_rotated = x, short_rotated = x;
  rope_reference(long_at, long_rotated, positions);
  rope_reference(short_at, short_rotated, positions);
  EXPECT_GT(normalised_error(long_rotated, short_rotated), 1e-3) << "the tables agree: the test cannot tell which was used";

  // A file of the wrong length or shape, a factor missing, and a factor file with another scaling.
  const std::vector<std::uint64_t> matrix = {2, 2};
  write_npy(temp("matrix.npy"), "<f8", matrix, long_factor.data());
  r = tool("run rope --x " + temp("lq.npy") + " --scaling longrope --factor 32 --original-max-position 4096 --long-factor " +
           temp("matrix.npy") + " --short-factor " + temp("short.npy") + " --out " + temp("lqr.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--long-factor " + temp("matrix.npy") + ": must be 1-D [rotary_dim / 2]"), std::string::npos) << r.output;
  const std::vector<double> three = {1.0, 2.0, 3.0};
  const std::vector<std::uint64_t> three_shape = {3};
  write_npy(temp("three.npy"), "<f8", three_shape, three.data());
  r = tool("run rope --x " + temp("lq.npy") + " --scaling longrope --factor 32 --original-max-position 4096 --long-factor " + temp("three.npy") +
           " --short-factor " + temp("short.npy") + " --out " + temp("lqr.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("relpos: error: scaling.long_factor = 3 values: must hold rotary_dim / 2 = 4"), std::string::npos) << r.output;
  r = tool("run rope --x " + temp("lq.npy") + " --scaling longrope --factor 32 --original-max-position 4096 --long-factor " + temp("long.npy") +
           " --out " + temp("lqr.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--scaling longrope: needs --long-factor, --short-factor and --original-max-position"), std::string::npos)
      << r.output;
  r = tool("run rope --x " + temp("lq.npy") + " --scaling yarn --factor 4 --original-max-position 4096 --long-factor " + temp("long.npy") +
           " --out " + temp("lqr.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--long-factor: not used by --scaling yarn (only by longrope)"), std::string::npos) << r.output;
}

// ---- Fourier family: `run sinusoidal`, `run fourier-bias` ----------------------------------

namespace {
std::string fourier_temp(const std::string& name) { return temp("fourier_" + std::to_string(getpid()) + "_" + name); }
}  // namespace

TEST(Cli, SinusoidalWritesF32NpyWithinTheBound) {
  const std::string out = fourier_temp("enc.npy");
  auto r = tool("run sinusoidal --positions 33 --dim 10 --offset -5 --max-wavelength 100 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  auto a = read_npy(out);
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{33, 10}));
  EXPECT_LE(normalised_error(a.to_f32("enc"), sinusoidal_reference({33, 10, -5, 100.0})), sinusoidal_error_bound());
  std::remove(out.c_str());
}

TEST(Cli, FourierBiasBothPathsRotationAndDefaults) {
  FourierParams p;
  p.heads = 2;
  p.queries = 5;
  p.keys = 7;
  p.vector_size = 8;
  p.max_keys = 16;
  std::vector<float> rot(16);
  for (std::size_t k = 0; k < rot.size(); ++k) rot[k] = 0.1f * static_cast<float>(k) - 0.7f;
  const std::string rot_path = fourier_temp("rot.npy"), out = fourier_temp("bias.npy");
  write_npy(rot_path, DType::F32, std::vector<std::uint64_t>{2, 8}, rot.data());
  const auto want = fourier_bias_reference(p, rot);
  for (const char* path : {"distance", "direct"}) {
    auto r = tool(std::string("run fourier-bias --heads 2 --queries 5 --keys 7 --vector-size 8 --max-keys 16 --rotation ") + rot_path +
                  " --path " + path + " --out " + out);
    ASSERT_EQ(r.status, 0) << r.output;
    auto a = read_npy(out);
    EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{2, 5, 7}));
    const FourierPath fp = std::string(path) == "direct" ? FourierPath::Direct : FourierPath::Distance;
    EXPECT_LE(normalised_error(a.to_f32("bias"), want), fourier_error_bound(p, rot, fp)) << path;
  }
  // No rotation: meliad's initialisation; no offset: K - Q; 1 on the diagonal rp = 0.
  auto r = tool("run fourier-bias --heads 1 --queries 4 --keys 4 --query-offset 0 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto init = read_npy(out).to_f32("bias");
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(init[i * 4 + i], 1.0f, 1e-5f);
  std::remove(rot_path.c_str());
  std::remove(out.c_str());
}

TEST(Cli, FourierBadInputGivesClearErrors) {
  const std::string out = fourier_temp("x.npy"), rot_path = fourier_temp("badrot.npy");
  std::vector<float> rot(2 * 6, 0.0f);
  write_npy(rot_path, DType::F32, std::vector<std::uint64_t>{2, 6}, rot.data());
  for (auto [args, word] : {std::pair{"run sinusoidal --positions 4 --dim 7", "vector_size"},
                            {"run sinusoidal --positions 4 --vector-size 7", "vector_size"},
                            {"run sinusoidal --positions 4 --dim 8 --max-wavelength 1", "max_wavelength"},
                            {"run fourier-bias --heads 2 --queries 4 --keys 4 --vector-size 9", "vector_size"},
                            {"run fourier-bias --heads 2 --queries 8 --keys 4", "query_offset"},
                            {"run fourier-bias --heads 2 --queries 4 --keys 4 --max-keys 0", "max_keys"},
                            {"run fourier-bias --heads 2 --queries 4 --keys 4 --path direct --dtype f16", "direct"}}) {
    auto r = tool(std::string(args) + " --out " + out);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.output.find("relpos: error:"), std::string::npos) << args << ": " << r.output;
    EXPECT_NE(r.output.find(word), std::string::npos) << args << ": " << r.output;
  }
  auto r = tool("run fourier-bias --heads 2 --queries 4 --keys 4 --vector-size 8 --rotation " + rot_path + " --out " + out);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("[heads, vector_size] = [2, 8]"), std::string::npos) << r.output;
  std::remove(rot_path.c_str());
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
  // bf16: the out's uint16 bit patterns, against the reference over the bf16-rounded inputs (8e-3:
  // 8 significant bits); they read back as an input.
  {
    AttentionParams pb = p;
    pb.dtype = DType::BF16;
    const auto want_bf16 = attention_reference(pb, {rounded_to_storage(q, DType::BF16), rounded_to_storage(kv, DType::BF16),
                                                    rounded_to_storage(kv, DType::BF16), table, {}, {}, {}});
    r = tool(args + " --dtype bf16");
    ASSERT_EQ(r.status, 0) << r.output;
    const NpyArray out = read_npy(temp("att.npy"));
    EXPECT_EQ(out.descr, "<u2");
    std::vector<float> got(out.bytes.size() / 2);
    for (std::size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(static_cast<std::uint16_t>(out.bytes[2 * i] | (out.bytes[2 * i + 1] << 8)));
    EXPECT_LE(normalised_error(got, want_bf16.out), 8e-3);
    std::filesystem::copy_file(temp("att.npy"), temp("att_bf16.npy"), std::filesystem::copy_options::overwrite_existing);
    r = tool("run attention --q " + temp("att_bf16.npy") + " --k " + temp("kv.npy") + " --v " + temp("kv.npy") + " --dtype bf16 --out " + temp("att2.npy"));
    EXPECT_EQ(r.status, 0) << r.output;
  }
  // Either kernel class on any device, with the same results within the same bound.
  for (const char* kernels : {"gpu", "cpu", "auto"}) {
    r = tool(std::string("--kernels ") + kernels + " " + args);
    ASSERT_EQ(r.status, 0) << kernels << ": " << r.output;
    EXPECT_LE(normalised_error(read_npy(temp("att.npy")).to_f32("out"), want.out), 1e-4) << kernels;
    EXPECT_LE(normalised_error(read_npy(temp("lse.npy")).to_f32("lse"), want.lse), 1e-4) << kernels;
  }
  r = tool("--kernels tiled devices");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--kernels"), std::string::npos) << r.output;
  r = relpos::test::tool_command("RELPOS_KERNELS=tiled " + std::string(RELPOS_TOOL) + " " + args);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("RELPOS_KERNELS = tiled"), std::string::npos) << r.output;
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
  // A bias file of the right count but transposed would put its values in the wrong places.
  write_f32("dense_kq.npy", std::vector<float>(3 * 4 * 2), {3, 4, 2});
  r = tool("run attention --q " + temp("q3.npy") + " --k " + temp("kv3.npy") + " --v " + temp("kv3.npy") + " --bias dense --bias-tensor " +
           temp("dense_kq.npy") + " --out " + temp("x.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--bias-tensor " + temp("dense_kq.npy") + ": shape [3, 4, 2] must be [3, 2, 4]"), std::string::npos) << r.output;
  write_f32("row_t.npy", std::vector<float>(5 * 3), {5, 3});
  r = tool("run attention --q " + temp("q3.npy") + " --k " + temp("kv3.npy") + " --v " + temp("kv3.npy") + " --bias distance --distance-row " +
           temp("row_t.npy") + " --out " + temp("x.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("shape [5, 3] must be [3, 5]"), std::string::npos) << r.output;
}

// The paged form: --k-cache, --v-cache, --block-table, --cache-lengths in place of --k and --v.
TEST(Cli, AttentionOverAPagedCache) {
  AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = 3, .keys = 32, .head_dim = 8, .causal = true, .bias = AttentionBias::Alibi};
  p.paged = {.block_size = 16, .num_blocks = 3, .max_blocks = 2};
  std::vector<float> q(2 * 2 * 3 * 8), cache(3 * 16 * 1 * 8), slopes = {0.5f, 0.25f};
  for (std::size_t e = 0; e < q.size(); ++e) q[e] = std::sin(0.37f * e);
  for (std::size_t e = 0; e < cache.size(); ++e) cache[e] = std::cos(0.11f * e);
  const std::vector<std::int32_t> table = {2, 0, 1, 77}, lengths = {20, 9};
  write_f32("pq.npy", q, {2, 2, 3, 8});
  write_f32("kcache.npy", cache, {3, 16, 1, 8});
  write_f32("pslopes.npy", slopes, {2});
  write_npy(temp("table.npy"), DType::I32, std::vector<std::uint64_t>{2, 2}, table.data());
  write_npy(temp("lengths.npy"), DType::I32, std::vector<std::uint64_t>{2}, lengths.data());
  const auto want = attention_reference(p, {q, cache, cache, slopes, {}, {}, {}, table, lengths});
  const std::string paged = " --k-cache " + temp("kcache.npy") + " --v-cache " + temp("kcache.npy") + " --block-table " + temp("table.npy");
  const std::string args = "run attention --q " + temp("pq.npy") + paged + " --cache-lengths " + temp("lengths.npy") +
                           " --bias alibi --slopes " + temp("pslopes.npy") + " --causal --out " + temp("patt.npy") + " --lse " + temp("plse.npy");
  for (const std::string extra : {"", " --reference", "--kernels cpu "}) {
    auto r = tool(extra.starts_with("--") ? extra + args : args + extra);
    ASSERT_EQ(r.status, 0) << r.output;
    auto out = read_npy(temp("patt.npy"));
    EXPECT_EQ(out.shape, (std::vector<std::uint64_t>{2, 2, 3, 8}));
    EXPECT_LE(normalised_error(out.to_f32("out"), want.out), 1e-4) << extra;
    EXPECT_LE(normalised_error(read_npy(temp("plse.npy")).to_f32("lse"), want.lse), 1e-4) << extra;
  }
  // A table entry past the cache, for a block sequence 1 reads: refused, naming it, before any dispatch.
  const std::vector<std::int32_t> bad = {2, 0, 3, 77};
  write_npy(temp("badtable.npy"), DType::I32, std::vector<std::uint64_t>{2, 2}, bad.data());
  auto r = tool("run attention --q " + temp("pq.npy") + " --k-cache " + temp("kcache.npy") + " --v-cache " + temp("kcache.npy") +
                " --block-table " + temp("badtable.npy") + " --cache-lengths " + temp("lengths.npy") + " --out " + temp("patt.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("block_table[1][0] = 3"), std::string::npos) << r.output;
  for (const std::string& no : std::vector<std::string>{" --query-offset 1", " --key-lengths " + temp("lengths.npy"), " --memory-prefix 1"}) {
    r = tool(args + no);
    EXPECT_EQ(r.status, 1) << no;
    EXPECT_NE(r.output.find("not allowed with a paged cache"), std::string::npos) << r.output;
  }
  r = tool("run attention --q " + temp("pq.npy") + paged + " --out " + temp("patt.npy"));  // no --cache-lengths
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--cache-lengths"), std::string::npos) << r.output;
  r = tool("run attention --q " + temp("pq.npy") + " --k " + temp("kcache.npy") + paged + " --cache-lengths " + temp("lengths.npy") +
           " --out " + temp("patt.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--k"), std::string::npos) << r.output;
}

// Packed queries over the paged cache: --query-lengths, q and out [total_q, H, D], lse [total_q, H];
// a sequence with no queries, and lengths refused on the host with the sequence named.
TEST(Cli, AttentionWithPackedQueries) {
  AttentionParams p{.batch = 3, .heads = 2, .kv_heads = 1, .queries = 4, .keys = 32, .head_dim = 8, .causal = true, .bias = AttentionBias::Alibi};
  p.paged = {.block_size = 16, .num_blocks = 3, .max_blocks = 2};
  p.total_queries = 5;
  std::vector<float> q(5 * 2 * 8), cache(3 * 16 * 1 * 8), slopes = {0.5f, 0.25f};
  for (std::size_t e = 0; e < q.size(); ++e) q[e] = std::sin(0.29f * e);
  for (std::size_t e = 0; e < cache.size(); ++e) cache[e] = std::cos(0.13f * e);
  const std::vector<std::int32_t> table = {2, 0, 1, 77, 2, 1}, lengths = {20, 9, 30}, query_lengths = {4, 0, 1};
  write_f32("qq.npy", q, {5, 2, 8});
  write_f32("qkcache.npy", cache, {3, 16, 1, 8});
  write_f32("qslopes.npy", slopes, {2});
  write_npy(temp("qtable.npy"), DType::I32, std::vector<std::uint64_t>{3, 2}, table.data());
  write_npy(temp("qlengths.npy"), DType::I32, std::vector<std::uint64_t>{3}, lengths.data());
  write_npy(temp("qqlengths.npy"), DType::I32, std::vector<std::uint64_t>{3}, query_lengths.data());
  const auto want = attention_reference(p, {q, cache, cache, slopes, {}, {}, {}, table, lengths, query_lengths});
  const std::string args = "run attention --q " + temp("qq.npy") + " --k-cache " + temp("qkcache.npy") + " --v-cache " + temp("qkcache.npy") +
                           " --block-table " + temp("qtable.npy") + " --cache-lengths " + temp("qlengths.npy") + " --bias alibi --slopes " +
                           temp("qslopes.npy") + " --causal --out " + temp("qatt.npy") + " --lse " + temp("qlse.npy");
  for (const std::string extra : {"", " --reference", "--kernels cpu "}) {
    auto r = tool((extra.starts_with("--") ? extra + args : args + extra) + " --query-lengths " + temp("qqlengths.npy"));
    ASSERT_EQ(r.status, 0) << r.output;
    auto out = read_npy(temp("qatt.npy"));
    EXPECT_EQ(out.shape, (std::vector<std::uint64_t>{5, 2, 8}));
    EXPECT_LE(normalised_error(out.to_f32("out"), want.out), 1e-4) << extra;
    auto lse = read_npy(temp("qlse.npy"));
    EXPECT_EQ(lse.shape, (std::vector<std::uint64_t>{5, 2}));
    EXPECT_LE(normalised_error(lse.to_f32("lse"), want.lse), 1e-4) << extra;
  }
  const std::vector<std::int32_t> too_long = {21, 0, 0};  // more queries than sequence 0's 20 keys
  write_npy(temp("qbad.npy"), DType::I32, std::vector<std::uint64_t>{3}, too_long.data());
  write_f32("qq21.npy", std::vector<float>(21 * 2 * 8), {21, 2, 8});
  auto r = tool("run attention --q " + temp("qq21.npy") + " --k-cache " + temp("qkcache.npy") + " --v-cache " + temp("qkcache.npy") +
                " --block-table " + temp("qtable.npy") + " --cache-lengths " + temp("qlengths.npy") + " --query-lengths " + temp("qbad.npy") +
                " --out " + temp("qatt.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("query_lengths[0] = 21"), std::string::npos) << r.output;
  r = tool(args + " --query-lengths " + temp("qlengths.npy"));  // sums to 59, q holds 5 tokens
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("query_lengths"), std::string::npos) << r.output;
  // Lengths that are not one per sequence, and packed queries of no tokens.
  write_npy(temp("q2d.npy"), DType::I32, std::vector<std::uint64_t>{3, 1}, query_lengths.data());
  r = tool(args + " --query-lengths " + temp("q2d.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--query-lengths " + temp("q2d.npy") + ": must be int32 [batch]"), std::string::npos) << r.output;
  const std::vector<std::int32_t> four = {1, 1, 1, 1};
  write_npy(temp("q4.npy"), DType::I32, std::vector<std::uint64_t>{4}, four.data());
  write_f32("qq4.npy", std::vector<float>(4 * 2 * 8), {4, 2, 8});
  r = tool("run attention --q " + temp("qq4.npy") + " --k-cache " + temp("qkcache.npy") + " --v-cache " + temp("qkcache.npy") +
           " --block-table " + temp("qtable.npy") + " --cache-lengths " + temp("qlengths.npy") + " --query-lengths " + temp("q4.npy") +
           " --out " + temp("qatt.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("B = 4 (--query-lengths' sequences)"), std::string::npos) << r.output;
  const std::vector<std::int32_t> none = {0, 0, 0};
  write_npy(temp("q0.npy"), DType::I32, std::vector<std::uint64_t>{3}, none.data());
  write_f32("qq0.npy", std::vector<float>{}, {0, 2, 8});
  r = tool("run attention --q " + temp("qq0.npy") + " --k-cache " + temp("qkcache.npy") + " --v-cache " + temp("qkcache.npy") +
           " --block-table " + temp("qtable.npy") + " --cache-lengths " + temp("qlengths.npy") + " --query-lengths " + temp("q0.npy") +
           " --out " + temp("qatt.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("holds 0 tokens"), std::string::npos) << r.output;
}

// Caches in a --kv-dtype: q8_0 as ggml's blocks (uint8 [num_blocks, block_size, Hkv, D/32*34]) and
// fp8_e4m3 bytes with --k-scale and --v-scale, against the reference over the same bytes.
TEST(Cli, AttentionOverQuantisedCaches) {
  for (CacheFormat f : {CacheFormat::Q8_0, CacheFormat::FP8_E4M3, CacheFormat::BF16}) {
    SCOPED_TRACE(std::string(cache_format_name(f)));
    AttentionParams p{.batch = 2, .heads = 2, .kv_heads = 1, .queries = 1, .keys = 32, .head_dim = 32, .causal = true};
    p.paged = {.block_size = 16, .num_blocks = 3, .max_blocks = 2};
    p.cache_format = f;
    if (cache_format_scaled(f)) p.k_scales = p.v_scales = {0.01f};
    std::vector<float> q(2 * 2 * 1 * 32), values(3 * 16 * 32);
    for (std::size_t e = 0; e < q.size(); ++e) q[e] = std::sin(0.37f * e);
    for (std::size_t e = 0; e < values.size(); ++e) values[e] = std::cos(0.11f * e);
    const std::size_t row = cache_row_bytes(f, 32);
    std::vector<std::uint8_t> cache(3 * 16 * row);
    for (std::size_t r = 0; r < 3 * 16; ++r)
      encode_cache_row(f, std::span<const float>(values).subspan(r * 32, 32), std::span<std::uint8_t>(cache).subspan(r * row, row),
                       cache_format_scaled(f) ? 0.01f : 1.0f);
    const std::vector<std::int32_t> table = {2, 0, 1, 77}, lengths = {20, 9};
    write_f32("fq.npy", q, {2, 2, 1, 32});
    const std::vector<std::uint64_t> shape = {3, 16, 1, f == CacheFormat::BF16 ? 32u : row};
    write_npy(temp("fcache.npy"), f == CacheFormat::BF16 ? "<u2" : "|u1", shape, cache.data());
    write_npy(temp("ftable.npy"), DType::I32, std::vector<std::uint64_t>{2, 2}, table.data());
    write_npy(temp("flengths.npy"), DType::I32, std::vector<std::uint64_t>{2}, lengths.data());
    const std::vector<float> scale = {0.01f};
    write_f32("fscale.npy", scale, {1});
    AttentionHostInputs host{q, {}, {}, {}, {}, {}, {}, table, lengths, {}, cache, cache};
    const auto want = attention_reference(p, host);
    const std::string scales = cache_format_scaled(f) ? " --k-scale " + temp("fscale.npy") + " --v-scale " + temp("fscale.npy") : "";
    const std::string args = "run attention --q " + temp("fq.npy") + " --k-cache " + temp("fcache.npy") + " --v-cache " + temp("fcache.npy") +
                             " --block-table " + temp("ftable.npy") + " --cache-lengths " + temp("flengths.npy") + " --causal --kv-dtype " +
                             std::string(cache_format_name(f)) + scales + " --out " + temp("fatt.npy");
    for (const std::string extra : {"", " --reference", "--kernels cpu "}) {
      auto r = tool(extra.starts_with("--") ? extra + args : args + extra);
      ASSERT_EQ(r.status, 0) << r.output;
      EXPECT_LE(normalised_error(read_npy(temp("fatt.npy")).to_f32("out"), want.out), 1e-4) << extra;
    }
    if (cache_format_scaled(f)) {  // no scales: refused, naming them
      auto r = tool("run attention --q " + temp("fq.npy") + " --k-cache " + temp("fcache.npy") + " --v-cache " + temp("fcache.npy") +
                    " --block-table " + temp("ftable.npy") + " --cache-lengths " + temp("flengths.npy") + " --kv-dtype fp8_e4m3 --out " +
                    temp("fatt.npy"));
      EXPECT_EQ(r.status, 1);
      EXPECT_NE(r.output.find("k_scales"), std::string::npos) << r.output;
    }
  }
  auto r = tool("run attention --q " + temp("fq.npy") + " --k-cache " + temp("fq.npy") + " --v-cache " + temp("fq.npy") + " --block-table " +
                temp("ftable.npy") + " --cache-lengths " + temp("flengths.npy") + " --kv-dtype q8_0 --out " + temp("fatt.npy"));
  EXPECT_EQ(r.status, 1);  // a float32 file is no q8_0 cache
  EXPECT_NE(r.output.find("a cache of format q8_0 is a .npy of uint8"), std::string::npos) << r.output;
  // A head size q8_0 cannot store: refused by the format's rule, not by the caches' row sizes.
  write_f32("fq40.npy", std::vector<float>(2 * 2 * 1 * 40, 0.5f), {2, 2, 1, 40});
  r = tool("run attention --q " + temp("fq40.npy") + " --k-cache " + temp("fcache.npy") + " --v-cache " + temp("fcache.npy") + " --block-table " +
           temp("ftable.npy") + " --cache-lengths " + temp("flengths.npy") + " --kv-dtype q8_0 --out " + temp("fatt.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--q head_dim = 40: must be a multiple of 32"), std::string::npos) << r.output;
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

// RADV's null hardware device (a driver without a GPU) reports no memory types: relpos lists it,
// and refuses it with an error naming the missing memory type, instead of crashing.
TEST(Cli, DeviceWithoutMemoryTypesIsAClearError) {
  const std::string icd = "/usr/share/vulkan/icd.d/radeon_icd.x86_64.json";
  if (!std::filesystem::exists(icd)) GTEST_SKIP() << icd << " is not installed";
  const std::string env = "RADV_FORCE_FAMILY=navi21 VK_ICD_FILENAMES=" + icd + " ";
  const std::string tool_path = RELPOS_TOOL;
  auto run_env = [&](const std::string& args) {
    return relpos::test::tool_command(env + tool_path + " " + args);
  };
  auto devices = run_env("devices");
  ASSERT_EQ(devices.status, 0) << devices.output;
  if (devices.output.find("Null hardware") == std::string::npos) GTEST_SKIP() << "no RADV null device here: " << devices.output;
  auto r = run_env("run t5-buckets --num-buckets 8 --queries 4 --keys 4 --max-distance 8 --out " + temp("null.npy"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no HOST_VISIBLE | HOST_COHERENT memory type"), std::string::npos) << r.output;
}

// ---- issue 12: no silent wrong answer, a clear error for every bad input ----------------------

// Hundreds of millions of buckets: a small window's buckets are |rp| (plus the upper half for
// rp > 0), answered at once; bucket counts beyond int32 are refused naming the limit.
TEST(Cli, T5BucketsWithHugeBucketCounts) {
  const auto start = std::chrono::steady_clock::now();
  auto r = tool("run t5-buckets --queries 3 --keys 5 --num-buckets 100000000 --max-distance 200000000 --out " + temp("huge_nb.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  T5Params p;
  p.num_buckets = 100'000'000;
  p.max_distance = 200'000'000;
  p.queries = 3;
  p.keys = 5;
  const auto got = read_npy(temp("huge_nb.npy")).to_i32("b");
  EXPECT_EQ(got, t5_buckets_reference(p));
  EXPECT_EQ(got[4], 50'000'004);  // query 0, key 4: rp = 4 in the upper half
  EXPECT_EQ(got[5], 1);           // query 1, key 0: rp = -1
  r = tool("run t5-buckets --queries 3 --keys 5 --num-buckets 2147483648 --max-distance 4000000001 --causal --out " + temp("huge_nb.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  r = tool("run t5-buckets --queries 3 --keys 5 --num-buckets 4000000000 --max-distance 4000000001 --out " + temp("huge_nb.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("relpos: error: num_buckets = 4000000000: must be <= 2^31"), std::string::npos) << r.output;
}

// Every numeric flag goes through one checked parser: the message names the flag, the value and
// the limit, whatever is wrong with the number.
TEST(Cli, NumbersNameTheFlagTheValueAndTheLimit) {
  const std::string t5 = "run t5-buckets --out " + temp("n.npy");
  const std::string counts = " --keys 4 --num-buckets 32 --max-distance 128";
  for (auto [args, message] : std::initializer_list<std::pair<std::string, std::string>>{
           {t5 + " --queries 12x" + counts, "--queries = 12x: must be a whole number in [1, 4294967295]"},
           {t5 + " --queries 99999999999999999999999" + counts, "--queries = 99999999999999999999999: must be a whole number in [1, 4294967295]"},
           {t5 + " --queries 4294967296" + counts, "--queries = 4294967296: must be a whole number in [1, 4294967295]"},
           {t5 + " --queries -4294967295" + counts, "--queries = -4294967295: must be a whole number in [1, 4294967295]"},
           {t5 + " --queries 0" + counts, "--queries = 0: must be a whole number in [1, 4294967295]"},
           {t5 + " --queries 4 --keys 4 --num-buckets 1e8 --max-distance 128", "--num-buckets = 1e8: must be a whole number in [0, 4294967295]"},
           {t5 + " --queries 4" + counts + " --query-offset 1.5", "--query-offset = 1.5: must be a whole number in [-9223372036854775808, 9223372036854775807]"},
           {"run alibi-slopes --heads 4 --max-bias inf --out " + temp("n.npy"), "--max-bias = inf: must be a finite number in"},
           {"run alibi-slopes --heads 4 --max-bias nan --out " + temp("n.npy"), "--max-bias = nan: must be a finite number in"},
           {"run alibi-slopes --heads 4 --max-bias 1e999 --out " + temp("n.npy"), "--max-bias = 1e999: must be a finite number in"},
           {"run sinusoidal --positions 4 --dim 8 --max-wavelength 0x10 --out " + temp("n.npy"), "--max-wavelength = 0x10: must be a finite number in"},
           {"bench --repeat 0", "--repeat = 0: must be a whole number in [1, 1000]"},
           {"bench --hold-ms -1", "--hold-ms = -1: must be a whole number in [0, 60000]"},
           {"--device 99999999999999999999999 devices", "device index 99999999999999999999999 is out of range"},
       }) {
    auto r = tool(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << ": " << r.output;
    EXPECT_EQ(r.output.find("stoul"), std::string::npos) << args << ": " << r.output;
  }
}

// A shape every check accepts can still be too large for the host's arrays: a clear error, not a
// library's exception text.
TEST(Cli, HostArraysTooLargeForTheMachineAreAClearError) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer's operator new reports and aborts where it would throw std::bad_alloc";
#endif
  auto r = tool("run t5-buckets --queries 1000000000 --keys 1000000000 --num-buckets 32 --max-distance 128 --reference --out " +
                temp("n.npy"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("relpos: error: out of host memory"), std::string::npos) << r.output;
}

// Every write is checked, its close included: a full disk is an error naming the file.
TEST(Cli, WriteFailuresExitNonZeroNamingThePath) {
  auto r = tool("run alibi-slopes --heads 4 --out /dev/full");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("relpos: error: /dev/full: write failed: No space left on device"), std::string::npos) << r.output;
  r = tool("run alibi-slopes --heads 4 --out " + temp("no_such_dir/slopes.npy"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("no_such_dir/slopes.npy: cannot open for writing"), std::string::npos) << r.output;
}

// Two outputs naming one file (the same path, the same path spelled differently, a link to it)
// are refused before anything is computed or written.
TEST(Cli, OutputsNamingOneFileAreRefused) {
  write_f32("same_parts.npy", {4, 0, 0, 0, 8, 0, 0, 4}, {2, 1, 4});
  write_f32("same_parts_lse.npy", {0.0f, 0.0f}, {2, 1});
  const std::string merge = "run attention-merge --parts " + temp("same_parts.npy") + " --parts-lse " + temp("same_parts_lse.npy");
  const std::string out = temp("same_out.npy"), link = temp("same_link.npy");
  const std::string dotted = std::filesystem::temp_directory_path().string() + "/./relpos_cli_same_out.npy";
  std::filesystem::remove(out);
  std::filesystem::remove(link);
  for (const std::string& lse : {out, dotted}) {
    auto r = tool(merge + " --out " + out + " --lse " + lse);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("relpos: error: --lse = " + lse + ": names the same file as --out = " + out), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out)) << "written before the check";
  }
  ASSERT_EQ(tool(merge + " --out " + out).status, 0);
  std::filesystem::create_symlink(out, link);
  auto r = tool(merge + " --out " + out + " --lse " + link);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("names the same file"), std::string::npos) << r.output;

  // The case: attention --out X --lse X.
  write_f32("same_q.npy", std::vector<float>(1 * 2 * 3 * 4, 0.5f), {1, 2, 3, 4});
  const std::string qkv = temp("same_q.npy");
  r = tool("run attention --q " + qkv + " --k " + qkv + " --v " + qkv + " --out " + temp("same_att.npy") + " --lse " + temp("same_att.npy"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--lse = " + temp("same_att.npy") + ": names the same file as --out"), std::string::npos) << r.output;
  // Different files, or an output that replaces an input (read whole before any write), are fine.
  r = tool("run attention --q " + qkv + " --k " + qkv + " --v " + qkv + " --out " + temp("same_att.npy") + " --lse " + temp("same_lse.npy"));
  EXPECT_EQ(r.status, 0) << r.output;
  std::filesystem::remove(link);
}

// A slope is a parameter, not activation data: a non-finite one is refused, naming it.
TEST(Cli, NonFiniteSlopesAreRefused) {
  write_f32("inf_slopes.npy", {0.5f, std::numeric_limits<float>::infinity()}, {2});
  write_f32("slopes_q.npy", std::vector<float>(1 * 2 * 3 * 4, 0.5f), {1, 2, 3, 4});
  const std::string qkv = temp("slopes_q.npy");
  for (const std::string extra : {"", " --reference"}) {
    auto r = tool("run attention --q " + qkv + " --k " + qkv + " --v " + qkv + " --bias alibi --slopes " + temp("inf_slopes.npy") +
                  " --out " + temp("x.npy") + extra);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("relpos: error: slopes[1] = inf: must be finite"), std::string::npos) << r.output;
  }
  auto r = tool("run alibi-bias --heads 2 --queries 3 --keys 3 --slopes " + temp("inf_slopes.npy") + " --out " + temp("x.npy"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("slopes[1] = inf: must be finite"), std::string::npos) << r.output;
}

// The contract: `run kerple-bias ... --variant log|power --r1 --r2 [--causal]
// [--query-offset] [--dtype] --out` ([H, Q, K], -inf masked) and `run attention --bias kerple`.
TEST(Cli, KerpleBiasAndKerpleAttention) {
  const std::vector<float> r1 = {0.5f, 2.0f, 0.125f}, r2 = {1.5f, 0.25f, 2.0f};
  write_f32("r1.npy", r1, {3});
  write_f32("r2.npy", r2, {3});
  for (const std::string variant : {"log", "power"}) {
    KerpleParams p;
    p.heads = 3;
    p.queries = 4;
    p.keys = 7;
    p.causal = true;
    p.query_offset = 3;
    p.r1 = r1;
    p.r2 = r2;
    p.variant = variant == "power" ? KerpleVariant::Power : KerpleVariant::Log;
    const std::vector<float> want = kerple_bias_reference(p);
    const std::string args = "run kerple-bias --heads 3 --queries 4 --keys 7 --causal --query-offset 3 --variant " + variant +
                             " --r1 " + temp("r1.npy") + " --r2 " + temp("r2.npy") + " --out " + temp("kerple.npy");
    auto r = tool(args + " --reference");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(read_npy(temp("kerple.npy")).to_f32("kerple"), want);
    r = tool(args);
    ASSERT_EQ(r.status, 0) << r.output;
    const NpyArray a = read_npy(temp("kerple.npy"));
    EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{3, 4, 7}));
    EXPECT_LE(normalised_error(a.to_f32("kerple"), want), 1e-5) << variant;  // float32 log and pow (docs/kerple.md)
    r = tool(args + " --dtype f16");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(read_npy(temp("kerple.npy")).descr, "<f2");

    // Fused: the same parameters as AttentionBias::Kerple.
    AttentionParams ap{.heads = 3, .kv_heads = 3, .queries = 4, .keys = 7, .head_dim = 8, .query_offset = 3, .causal = true,
                       .bias = AttentionBias::Kerple};
    ap.kerple_variant = p.variant;
    std::vector<float> q(3 * 4 * 8), kv(3 * 7 * 8), params = r1;
    params.insert(params.end(), r2.begin(), r2.end());
    for (std::size_t e = 0; e < q.size(); ++e) q[e] = std::sin(0.37f * e);
    for (std::size_t e = 0; e < kv.size(); ++e) kv[e] = std::cos(0.11f * e);
    write_f32("kq.npy", q, {1, 3, 4, 8});
    write_f32("kkv.npy", kv, {1, 3, 7, 8});
    const auto att = attention_reference(ap, {q, kv, kv, params, {}, {}, {}});
    r = tool("run attention --q " + temp("kq.npy") + " --k " + temp("kkv.npy") + " --v " + temp("kkv.npy") + " --bias kerple --variant " +
             variant + " --r1 " + temp("r1.npy") + " --r2 " + temp("r2.npy") + " --causal --query-offset 3 --out " + temp("katt.npy"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_LE(normalised_error(read_npy(temp("katt.npy")).to_f32("out"), att.out), 1e-4) << variant;
  }
  // Out of the power kernel's domain, a missing file, a count that is not the heads'.
  write_f32("r2big.npy", {0.5f, 2.5f, 1.0f}, {3});
  const std::string base = "run kerple-bias --heads 3 --queries 2 --keys 2 --r1 " + temp("r1.npy");
  for (auto [args, message] : {std::pair<std::string, std::string>{base + " --variant power --r2 " + temp("r2big.npy"), "r2"},
                               {base, "--r2 is required"},
                               {"run kerple-bias --heads 2 --queries 2 --keys 2 --r1 " + temp("r1.npy") + " --r2 " + temp("r2.npy"), "r1"},
                               {base + " --variant cubic --r2 " + temp("r2.npy"), "--variant"}}) {
    auto r = tool(args + " --out " + temp("x.npy"));
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("relpos: error: "), std::string::npos) << r.output;  // usage errors too
  }
}

// `relpos stats [--json] [--filter OP] [--head-dims ...]` on the RADV null device: one JSON line per
// executable with the fields, the statistics under the driver's names, numbers as numbers.
TEST(Cli, StatsOfEveryPipelineOnAGpuCompiler) {
  const std::string env = relpos::test::radv_null_env();
  if (env.empty()) GTEST_SKIP() << "no RADV null device here";
  const std::string tool_path = RELPOS_TOOL;
  auto r = relpos::test::tool_command(env + tool_path + " stats --json --filter attention --head-dims 64,128");
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  std::set<std::uint32_t> head_dims;
  std::size_t fused = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    for (const char* field : {"op", "pipeline", "variant", "workgroup", "executable", "stats"}) ASSERT_TRUE(j.contains(field)) << field << ": " << line;
    EXPECT_NE(j["op"].get<std::string>().find("attention"), std::string::npos) << line;  // --filter: ops whose name contains it
    ASSERT_EQ(j["workgroup"].size(), 3u);
    EXPECT_TRUE(j["stats"]["VGPRs"].is_number()) << line;
    // 64-bit statistics exactly: RADV's pipeline hash passes double's 53 bits.
    if (j["stats"].contains("Driver pipeline hash")) EXPECT_TRUE(j["stats"]["Driver pipeline hash"].is_number_integer()) << line;
    // The variant's keys are the names the shader's contract declares (upper case), nothing else.
    for (const auto& [key, value] : j["variant"].items())
      EXPECT_EQ(key.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"), std::string::npos) << key << ": " << line;
    if (j["pipeline"].get<std::string>().rfind("attention_tiled", 0) == 0) {  // a GPU: the GPU kernel class
      ++fused;
      EXPECT_TRUE(j["variant"].contains("BIAS_MODE")) << line;
      head_dims.insert(j["head_dim"].get<std::uint32_t>());
      EXPECT_EQ(j["head_dim"], 4 * j["variant"]["D4"].get<std::uint32_t>()) << line;
      if (j["head_dim"] == 64) EXPECT_EQ(j["stats"]["Spilled VGPRs"], 0) << line;
    }
  }
  EXPECT_GT(fused, 0u);
  EXPECT_EQ(head_dims, (std::set<std::uint32_t>{64, 128}));
  // Every other op's pipelines, under their own op names.
  r = relpos::test::tool_command(env + tool_path + " stats --filter kerple");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("kerple_distance_row"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("VGPRs="), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("e+"), std::string::npos) << "integers in full: " << r.output;
  r = relpos::test::tool_command(env + tool_path + " stats --head-dims 64,65");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--head-dims = 64,65"), std::string::npos) << r.output;
}

// lavapipe keeps no pipeline statistics: a clear message and a non-zero exit.
TEST(Cli, StatsOnADeviceWithoutStatisticsIsAClearError) {
  auto r = tool("stats --filter kerple");
  if (r.status == 0) GTEST_SKIP() << "this device reports pipeline statistics";
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("VK_KHR_pipeline_executable_properties"), std::string::npos) << r.output;
}

// ---- new-user trials: checks before any work, flags that would be silently ignored ---------------

namespace {

// A quarter of this machine's memory, the tool's limit on a run's host arrays.
std::uint64_t host_memory_limit() {
  return static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(sysconf(_SC_PAGE_SIZE)) / 4;
}

}  // namespace

// A run whose output (and the inputs it builds itself) would take more than a quarter of the
// machine's memory is refused at once, naming the sizes, the bytes and the limit, before anything
// is allocated: not grown until the kernel kills it, nor answered by a misleading device error.
// Each shape passes the library's own checks and needs over 2^40 bytes: refused on any machine.
TEST(Cli, RunsBeyondTheHostMemoryAreRefusedBeforeAnyWork) {
  write_f32("mem_table.npy", std::vector<float>(32 * 3), {32, 3});
  write_f32("mem_heads.npy", std::vector<float>(1000, 0.5f), {1000});
  write_f32("mem_q.npy", std::vector<float>(8 * 64 * 4), {1, 8, 64, 4});
  write_f32("mem_rk.npy", std::vector<float>(5 * 4), {5, 4});
  const std::string heads = temp("mem_heads.npy");
  const std::string hqk = "--heads = 1000, --queries = 2000000, --keys = 2000000";
  std::vector<std::pair<std::string, std::string>> cases = {
      {"run alibi-bias --heads 1000 --queries 2000000 --keys 2000000", hqk},
      {"run alibi-bias --heads 1000 --queries 2000000 --keys 2000000 --reference", hqk},
      {"run kerple-bias --heads 1000 --queries 2000000 --keys 2000000 --r1 " + heads + " --r2 " + heads + " --reference", hqk},
      {"run sandwich-bias --heads 1000 --queries 2000000 --keys 2000000 --sandwich-dim 8 --scale " + heads + " --dtype f16", hqk},
      {"run fourier-bias --heads 500 --queries 4000000 --keys 4000000 --reference", "--heads = 500, --queries = 4000000, --keys = 4000000"},
      // The default rotation [H, D] is what is too large here, not the output.
      {"run fourier-bias --heads 1000000000 --queries 1 --keys 1 --vector-size 2000", "--heads = 1000000000, --queries = 1, --keys = 1, --vector-size = 2000"},
      {"run t5-buckets --queries 1000000000 --keys 1000000000 --num-buckets 32 --max-distance 128 --reference", "--queries = 1000000000, --keys = 1000000000"},
      {"run t5-bias --table " + temp("mem_table.npy") + " --queries 1000000000 --keys 1000 --max-distance 128 --reference",
       "--table heads = 3, --queries = 1000000000, --keys = 1000"},
      // Sizes whose product passes 64 bits are named as such, not wrapped.
      {"run t5-buckets --queries 4000000000 --keys 4000000000 --num-buckets 32 --max-distance 128",
       "--queries = 4000000000, --keys = 4000000000: the run's host arrays take at least 2^64 bytes"},
  };
  // Outputs the library bounds below 2^40 bytes: refused where they pass this machine's limit.
  const std::uint64_t limit = host_memory_limit();
  if (4294967295ull * 40 > limit) cases.push_back({"run alibi-slopes --heads 4294967295", "--heads = 4294967295"});  // the rule in float64
  if (1000000000ull * 4 * 4 > limit)
    cases.push_back({"run sinusoidal --positions 1000000000 --vector-size 4 --reference", "--positions = 1000000000, --vector-size = 4"});
  if (512ull * 8000000 * 4 > limit)
    cases.push_back({"run shaw-logits --q " + temp("mem_q.npy") + " --rel-keys " + temp("mem_rk.npy") + " --max-relative-position 2 --keys 8000000",
                     "--q batch = 1, --q heads = 8, --q queries = 64, --keys = 8000000"});
  const std::string limit_text = "more than the limit of " + std::to_string(limit) + " bytes";
  for (const auto& [args, sizes] : cases) {
    const auto start = std::chrono::steady_clock::now();
    auto r = tool(args + " --out " + temp("mem.npy"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << args;
    EXPECT_EQ(r.status, 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find("relpos: error: out of host memory: " + sizes), std::string::npos) << args << ": " << r.output;
    EXPECT_NE(r.output.find(limit_text), std::string::npos) << args << ": " << r.output;
  }
}

// Given ALiBi slopes replace the slope rule: an empty file is refused (not read as "use the rule"),
// as is a file of any other count or rank, and the rule's flags beside them.
TEST(Cli, GivenAlibiSlopesHoldOnePerHeadAndReplaceTheRule) {
  write_f32("slopes_empty.npy", {}, {0});
  write_f32("slopes_3.npy", {0.5f, 0.25f, 0.125f}, {3});
  write_f32("slopes_3x1.npy", {0.5f, 0.25f, 0.125f}, {3, 1});
  write_f32("slopes_qkv.npy", std::vector<float>(1 * 3 * 2 * 4, 0.5f), {1, 3, 2, 4});
  const std::string qkv = temp("slopes_qkv.npy");
  const std::string bias = "run alibi-bias --heads 3 --queries 2 --keys 5 --out " + temp("x.npy");
  const std::string attention = "run attention --q " + qkv + " --k " + qkv + " --v " + qkv + " --bias alibi --out " + temp("x.npy");
  for (const std::string& run : {bias, attention}) {
    for (auto [args, message] : std::initializer_list<std::pair<std::string, std::string>>{
             {" --slopes " + temp("slopes_empty.npy"), "--slopes " + temp("slopes_empty.npy") + ": 0 values: must hold one per head (H = 3)"},
             {" --slopes " + temp("slopes_3x1.npy"), "--slopes " + temp("slopes_3x1.npy") + ": must be 1-D, got 2 dimension(s)"},
             {" --slopes " + temp("slopes_3.npy") + " --max-bias 4", "--max-bias: not allowed with --slopes " + temp("slopes_3.npy")},
             {" --slopes " + temp("slopes_3.npy") + " --no-interleave", "--no-interleave: not allowed with --slopes " + temp("slopes_3.npy")},
         }) {
      auto r = tool(run + args);
      EXPECT_EQ(r.status, 1) << run << args << ": " << r.output;
      EXPECT_NE(r.output.find("relpos: error: " + message), std::string::npos) << run << args << ": " << r.output;
    }
    auto r = tool(run + " --slopes " + temp("slopes_3.npy"));
    EXPECT_EQ(r.status, 0) << run << ": " << r.output;
  }
  // The rule's flags given at their defaults are still flags given beside the slopes.
  auto r = tool(bias + " --slopes " + temp("slopes_3.npy") + " --max-bias 8");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--max-bias: not allowed with --slopes"), std::string::npos) << r.output;
}

// RoPE's scaling flags: a parameter that the chosen --scaling does not read is refused, naming it
// and the scaling, and every scaling but none needs its --factor (as HuggingFace's rope_scaling).
TEST(Cli, RopeScalingFlagsMustBelongToTheScaling) {
  std::vector<float> x(1 * 4 * 2 * 8);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = 0.01f * static_cast<float>(k) - 0.3f;
  write_f32("scaling_x.npy", x, {1, 4, 2, 8});
  const std::string rope = "run rope --x " + temp("scaling_x.npy") + " --layout bshd --style neox --out " + temp("scaling_r.npy");
  for (auto [args, message] : std::initializer_list<std::pair<std::string, std::string>>{
           {" --factor 8", "--factor: not used by --scaling none"},
           {" --scaling none --factor 8 --beta-fast 3 --low-freq-factor 2",
            "--factor: not used by --scaling none (only by linear, llama3, longrope, ntk, yarn); --beta-fast: not used by --scaling none (only by yarn); "
            "--low-freq-factor: not used by --scaling none (only by llama3)"},
           {" --scaling llama3 --factor 8 --beta-fast 3", "--beta-fast: not used by --scaling llama3 (only by yarn)"},
           {" --scaling llama3 --factor 8 --seq-len 100", "--seq-len: not used by --scaling llama3 (only by longrope, ntk)"},
           {" --scaling yarn --factor 4 --original-max-position 64 --low-freq-factor 2", "--low-freq-factor: not used by --scaling yarn (only by llama3)"},
           {" --scaling yarn --factor 4 --original-max-position 64 --high-freq-factor 8", "--high-freq-factor: not used by --scaling yarn"},
           {" --scaling ntk --factor 2 --original-max-position 64 --no-truncate", "--no-truncate: not used by --scaling ntk (only by yarn)"},
           {" --scaling linear --factor 2 --original-max-position 64", "--original-max-position: not used by --scaling linear (only by llama3, longrope, ntk, yarn)"},
           {" --scaling linear --factor 2 --mscale 1 --mscale-all-dim 1", "--mscale: not used by --scaling linear (only by yarn); --mscale-all-dim: not used"},
           {" --scaling linear", "--scaling linear: needs --factor"},
           {" --scaling ntk --original-max-position 64", "--scaling ntk: needs --factor"},
           {" --scaling yarn --original-max-position 64", "--scaling yarn: needs --factor"},
           {" --scaling llama3", "--scaling llama3: needs --factor"},
           {" --scaling longrope --original-max-position 64", "--scaling longrope: needs --factor"},
           {" --scaling yarn --factor 4 --original-max-position 64 --short-factor f.npy", "--short-factor: not used by --scaling yarn (only by longrope)"},
           // A 0 given is refused, not replaced by llama3's default (which is for the flag left out).
           {" --scaling llama3 --factor 8 --original-max-position 0", "scaling.original_max_position = 0: must be >= 1"},
           {" --scaling yarn --factor 4 --original-max-position 64 --beta-fast 1 --beta-slow 32", "scaling.beta_fast = 1: must be >= beta_slow = 32"},
       }) {
    auto r = tool(rope + args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find("relpos: error: " + message), std::string::npos) << args << ": " << r.output;
  }
  for (const char* args : {" --scaling linear --factor 2", " --scaling ntk --factor 2 --original-max-position 64 --seq-len 100",
                           " --scaling yarn --factor 4 --original-max-position 64 --beta-fast 16 --no-truncate",
                           " --scaling llama3 --factor 8 --original-max-position 64 --low-freq-factor 1 --high-freq-factor 4"}) {
    auto r = tool(rope + args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.output;
  }
}

// `run rope` writes its result in --x's dtype: an input it cannot write back is refused, not
// silently written as float32.
TEST(Cli, RopeRefusesDtypesItCannotWriteBack) {
  const std::vector<double> x(1 * 2 * 2 * 4, 0.5);
  write_npy(temp("rope_f64.npy"), "<f8", std::vector<std::uint64_t>{1, 2, 2, 4}, x.data());
  auto r = tool("run rope --x " + temp("rope_f64.npy") + " --layout bshd --style neox --out " + temp("rope_f64_out.npy"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --x " + temp("rope_f64.npy") + ": dtype <f8 must be float32 or float16"), std::string::npos) << r.output;
}

// An f16 --x of an odd head_dim: the GPU op refuses it (a row owns whole 32-bit words), and
// --reference refuses it by the same check (RopeParams::validate(dtype)); it had written a result
// the GPU never gives.
TEST(Cli, RopeRefusesAnF16OddHeadDimWithOrWithoutReference) {
  const std::vector<std::uint16_t> x = to_half(std::vector<float>(1 * 2 * 2 * 5, 0.5f));
  write_npy(temp("rope_odd16.npy"), DType::F16, std::vector<std::uint64_t>{1, 2, 2, 5}, x.data());
  for (const std::string how : {"", " --reference"}) {
    auto r = tool("run rope --x " + temp("rope_odd16.npy") + " --layout bshd --style neox --rotary-dim 4 --out " + temp("rope_odd16_out.npy") + how);
    EXPECT_EQ(r.status, 1) << how << ": " << r.output;
    EXPECT_NE(r.output.find("relpos: error: head_dim = 5: must be even for f16 storage"), std::string::npos) << how << ": " << r.output;
  }
}

// Every output is checked before anything is computed or written: one in a missing directory, or
// a directory itself, stops the run with no other output written.
TEST(Cli, OutputsThatCannotBeCreatedAreRefusedBeforeAnyWrite) {
  write_f32("w_parts.npy", {4, 0, 0, 0, 8, 0, 0, 4}, {2, 1, 4});
  write_f32("w_parts_lse.npy", {0.0f, std::log(3.0f)}, {2, 1});
  const std::string out = temp("w_merged.npy"), missing = temp("no_such_dir_w/lse.npy");
  const std::string merge = "run attention-merge --parts " + temp("w_parts.npy") + " --parts-lse " + temp("w_parts_lse.npy") + " --out " + out;
  std::filesystem::remove(out);
  auto r = tool(merge + " --lse " + missing);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --lse = " + missing + ": cannot open for writing: its directory " + temp("no_such_dir_w") +
                          " does not exist"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(out)) << "--out written before the check of --lse";
  const std::string dir = std::filesystem::temp_directory_path().string();
  r = tool(merge + " --lse " + dir);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--lse = " + dir + ": cannot open for writing: it is a directory"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  write_f32("w_q.npy", std::vector<float>(1 * 2 * 3 * 4, 0.5f), {1, 2, 3, 4});
  const std::string qkv = temp("w_q.npy");
  r = tool("run attention --q " + qkv + " --k " + qkv + " --v " + qkv + " --out " + out + " --lse " + missing);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--lse = " + missing + ": cannot open for writing"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  ASSERT_EQ(tool(merge).status, 0);  // the same run with outputs it can write
}

// A part's log-sum-exp of NaN (a NaN among that part's inputs) or +inf makes its row NaN, as the
// merge defines (docs/fused_attention.md); -inf is a part with no visible key, which weighs nothing.
// The other rows are untouched. Both paths.
TEST(Cli, AttentionMergeOfNanOrInfiniteLseGivesNanRows) {
  write_f32("lse_parts.npy", std::vector<float>(2 * 2 * 4, 1.0f), {2, 2, 4});
  const float inf = std::numeric_limits<float>::infinity();
  write_f32("lse_inf.npy", {0.0f, 1.0f, inf, 0.5f}, {2, 2});
  write_f32("lse_nan.npy", {0.0f, std::nanf(""), 1.0f, 0.5f}, {2, 2});
  write_f32("lse_minf.npy", {0.0f, -inf, 1.0f, 0.5f}, {2, 2});
  const std::string merge = "run attention-merge --parts " + temp("lse_parts.npy") + " --out " + temp("lse_out.npy") + " --parts-lse ";
  for (const std::string extra : {"", " --reference"}) {
    for (const char* file : {"lse_inf.npy", "lse_nan.npy"}) {  // row 0 (inf in part 1), row 1 (NaN in part 0)
      const auto r = tool(merge + temp(file) + extra);
      ASSERT_EQ(r.status, 0) << r.output;
      const std::vector<float> got = read_npy(temp("lse_out.npy")).to_f32("out");
      const std::size_t nan_row = std::string(file) == "lse_inf.npy" ? 0 : 1;
      for (std::size_t e = 0; e < got.size(); ++e)
        if (e / 4 == nan_row) EXPECT_TRUE(std::isnan(got[e])) << file << extra << " [" << e << "]";
        else EXPECT_NEAR(got[e], 1.0f, 1e-6) << file << extra << " [" << e << "]";
    }
    const auto r = tool(merge + temp("lse_minf.npy") + extra);
    ASSERT_EQ(r.status, 0) << r.output;
    const std::vector<float> got = read_npy(temp("lse_out.npy")).to_f32("out");
    for (float v : got) EXPECT_NEAR(v, 1.0f, 1e-6) << extra;  // row 1: part 0 alone
  }
}

// T5 in fused attention takes num_buckets from the table's rows: a --num-buckets that differs is
// refused, and a table of another shape is named with the shape it must have.
TEST(Cli, AttentionT5TableAndNumBucketsMustAgree) {
  write_f32("t5n_q.npy", std::vector<float>(1 * 4 * 3 * 8, 0.25f), {1, 4, 3, 8});
  write_f32("t5n_table.npy", std::vector<float>(6 * 4, 0.5f), {6, 4});
  write_f32("t5n_table3.npy", std::vector<float>(8 * 3, 0.5f), {8, 3});
  const std::string q = temp("t5n_q.npy");
  const std::string run = "run attention --q " + q + " --k " + q + " --v " + q + " --bias t5 --max-distance 20 --out " + temp("x.npy") + " --table ";
  auto r = tool(run + temp("t5n_table.npy") + " --num-buckets 32");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --num-buckets = 32: must equal the rows of --table " + temp("t5n_table.npy") + " [6, 4]"), std::string::npos)
      << r.output;
  r = tool(run + temp("t5n_table3.npy"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --table " + temp("t5n_table3.npy") + ": shape [8, 3] must be [num_buckets, H] = [8, 4]"), std::string::npos)
      << r.output;
  EXPECT_EQ(tool(run + temp("t5n_table.npy") + " --num-buckets 6").status, 0);
  EXPECT_EQ(tool(run + temp("t5n_table.npy")).status, 0);
}

// A --filter that matches no case is an error naming it and the ops there are, in check, bench
// and stats alike (it was a run of nothing: rc 1 or 0, no message); RELPOS_VALIDATION takes 0 or 1
// only (any other word had turned validation on).
TEST(Cli, AFilterMatchingNothingAndABadValidationWordAreErrors) {
  for (const std::string command : {"check", "check --quick", "bench --repeat 1", "bench --short", "stats"}) {
    const auto r = tool(command + " --filter no-such-op");
    EXPECT_EQ(r.status, 1) << command << ": " << r.output;
    EXPECT_NE(r.output.find("relpos: error: --filter = no-such-op: matches no "), std::string::npos) << command << ": " << r.output;
    EXPECT_NE(r.output.find("t5-bias"), std::string::npos) << command << ": " << r.output;
  }
  setenv("RELPOS_VALIDATION", "false", 1);
  const auto r = tool("check --quick --filter t5-buckets");
  unsetenv("RELPOS_VALIDATION");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("RELPOS_VALIDATION = false: must be 0 or 1"), std::string::npos) << r.output;
}

// The layer enabled through the loader's environment as well as by --validation: the loader's
// notice of it is no validation message (the check failed, counting it outside the cases).
TEST(Cli, TheLoadersNoticeIsNoValidationMessage) {
  setenv("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation", 1);
  const auto layered = tool("--validation check --quick --filter t5-buckets");
  unsetenv("VK_INSTANCE_LAYERS");
  EXPECT_EQ(layered.status, 0) << layered.output;
}

// A flag of another bias family than --bias's would be ignored (a --max-bias with --bias t5 is most
// likely a --bias left out): refused, naming the family it belongs to.
TEST(Cli, AttentionFlagsOfAnotherBiasFamilyAreRefused) {
  write_f32("fam_q.npy", std::vector<float>(1 * 4 * 3 * 8, 0.25f), {1, 4, 3, 8});
  write_f32("fam_table.npy", std::vector<float>(6 * 4, 0.5f), {6, 4});
  const std::string q = temp("fam_q.npy");
  const std::string run = "run attention --q " + q + " --k " + q + " --v " + q + " --out " + temp("fam_out.npy");
  auto r = tool(run + " --bias t5 --table " + temp("fam_table.npy") + " --max-bias 4");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --max-bias: not read by --bias t5 (it is --bias alibi's)"), std::string::npos) << r.output;
  r = tool(run + " --max-distance 20");  // --bias none
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --max-distance: not read by --bias none (it is --bias t5's)"), std::string::npos) << r.output;
  EXPECT_EQ(tool(run + " --bias alibi --max-bias 4").status, 0);
}

// Shaw in fused attention: rel_keys and rel_values must be [2k + 1, D] exactly; a transposed
// table holds as many values and would give a wrong answer.
TEST(Cli, AttentionShawTablesMustHaveTheirShape) {
  write_f32("shaw_q.npy", std::vector<float>(1 * 2 * 3 * 8, 0.25f), {1, 2, 3, 8});
  write_f32("shaw_ok.npy", std::vector<float>(5 * 8, 0.5f), {5, 8});
  write_f32("shaw_t.npy", std::vector<float>(5 * 8, 0.5f), {8, 5});
  write_f32("shaw_10x4.npy", std::vector<float>(5 * 8, 0.5f), {10, 4});
  const std::string q = temp("shaw_q.npy");
  const std::string run = "run attention --q " + q + " --k " + q + " --v " + q + " --bias shaw --max-relative-position 2 --out " + temp("x.npy");
  for (auto [args, message] : std::initializer_list<std::pair<std::string, std::string>>{
           {" --rel-keys " + temp("shaw_t.npy") + " --rel-values " + temp("shaw_ok.npy"),
            "--rel-keys " + temp("shaw_t.npy") + ": shape [8, 5] must be [2k + 1, D] = [5, 8]"},
           {" --rel-keys " + temp("shaw_ok.npy") + " --rel-values " + temp("shaw_10x4.npy"),
            "--rel-values " + temp("shaw_10x4.npy") + ": shape [10, 4] must be [2k + 1, D] = [5, 8]"},
       }) {
    for (const std::string extra : {"", " --reference"}) {
      auto r = tool(run + args + extra);
      EXPECT_EQ(r.status, 1) << args << ": " << r.output;
      EXPECT_NE(r.output.find("relpos: error: " + message), std::string::npos) << args << ": " << r.output;
    }
  }
  EXPECT_EQ(tool(run + " --rel-keys " + temp("shaw_ok.npy") + " --rel-values " + temp("shaw_ok.npy")).status, 0);
}

// AMD's real compiler (RADV's ACO, null hardware: no GPU needed) on every pipeline relpos would use
// on a GPU, for the head sizes models use: no driver failure, no spilled register anywhere, and the
// GPU attention kernel within 128 VGPRs (4 waves per SIMD on RDNA) with its tiles in shared memory
// up to head_dim 128. Skipped, saying why, where the radeon ICD is missing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "support/run_tool.hpp"

namespace {

const std::set<std::uint32_t> kHeadDims{64, 80, 96, 128, 256};

// One JSON line per executable of `relpos stats`, parsed.
std::vector<nlohmann::json> stats(const std::string& env, const std::string& args) {
  const auto r = relpos::test::tool_command(env + std::string(RELPOS_TOOL) + " " + args);
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  return lines;
}

class GpuCompiler : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuCompiler, EveryPipelineWithoutSpillsAndAttentionInShapeForGpus) {
  const std::string env = relpos::test::radv_null_env(GetParam());
  if (env.empty()) GTEST_SKIP() << "no RADV null " << GetParam() << " here (needs Mesa's radeon ICD, mesa-vulkan-drivers)";
  const auto lines = stats(env, "stats --json --head-dims 64,80,96,128,256");
  std::set<std::string> ops;
  std::set<std::uint32_t> tiled_head_dims;
  std::size_t shuffled = 0, paged = 0;
  for (const auto& j : lines) {
    const std::string what = j["pipeline"].get<std::string>() + " " + j["variant"].dump();
    ops.insert(j["op"].get<std::string>());
    const auto& s = j["stats"];
    EXPECT_EQ(s["Spilled VGPRs"], 0) << what;
    EXPECT_EQ(s["Spilled SGPRs"], 0) << what;
    EXPECT_EQ(s["Scratch size"], 0) << what;
    EXPECT_NE(j["pipeline"], "attention_fused") << "a GPU gets the GPU kernel class: " << what;
    const std::string pipeline = j["pipeline"].get<std::string>();
    if (pipeline.starts_with("attention_tiled")) {  // contiguous and paged, shuffling or not
      shuffled += pipeline.starts_with("attention_tiled_shuffle");
      paged += pipeline.ends_with("_paged");
      const std::uint32_t d = j["head_dim"].get<std::uint32_t>();
      tiled_head_dims.insert(d);
      EXPECT_GT(s["LDS size"].get<double>(), 0) << what;
      if (d <= 128) EXPECT_LE(s["VGPRs"].get<double>(), 128) << what;
    }
  }
  EXPECT_EQ(tiled_head_dims, kHeadDims);
  EXPECT_GT(shuffled, 0u) << "RADV shuffles in compute shaders: the row maxima meet by shuffles";
  EXPECT_GT(paged, 0u) << "stats surveys attention over a paged cache";
  // Each op that owns a pipeline no op surveyed before it created (T5's row shader is t5-buckets'; the expansion ALiBi's).
  for (const char* op : {"attention", "unfused-attention", "shaw-attention", "t5-buckets", "alibi-bias", "kerple-bias", "sandwich-bias", "fourier-bias", "rope", "kv-append"})
    EXPECT_TRUE(ops.count(op)) << op;
}

// The CPU kernel class forced onto a GPU compiles too (no driver failure; the CPU class is not
// shaped for GPU registers, so spills are allowed there).
TEST(GpuCompilerCpuKernels, CompileWithoutDriverFailure) {
  const std::string env = relpos::test::radv_null_env("navi21");
  if (env.empty()) GTEST_SKIP() << "no RADV null navi21 here (needs Mesa's radeon ICD, mesa-vulkan-drivers)";
  const auto lines = stats(env, "--kernels cpu stats --json --filter attention --head-dims 64,128");
  std::size_t fused = 0;
  for (const auto& j : lines) fused += j["pipeline"] == "attention_fused" || j["pipeline"] == "attention_fused_shuffle";
  EXPECT_GT(fused, 0u);
}

// A GPU driver keeps what it compiled in the persistent pipeline cache: a second start reads it
// back (and gives the same statistics), with Mesa's own disk cache off so that only relpos's
// VkPipelineCache can carry anything across.
TEST(GpuCompilerPipelineCache, ASecondStartReadsTheDriversPipelines) {
  const std::string env = relpos::test::radv_null_env("navi21");
  if (env.empty()) GTEST_SKIP() << "no RADV null navi21 here (needs Mesa's radeon ICD, mesa-vulkan-drivers)";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "relpos_radv_pipeline_cache";
  std::filesystem::remove_all(dir);
  const std::string command = "MESA_SHADER_CACHE_DISABLE=true " + env + RELPOS_TOOL + " --pipeline-cache " + dir.string() +
                              " stats --json --filter kerple --head-dims 64";
  const auto first = relpos::test::tool_command(command);
  ASSERT_EQ(first.status, 0) << first.output;
  std::uintmax_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) bytes += e.file_size();
  EXPECT_GT(bytes, 1024u) << "RADV's pipelines, not only the cache header";
  const auto second = relpos::test::tool_command(command);
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_EQ(second.output.find("relpos warning"), std::string::npos) << second.output;
  EXPECT_EQ(first.output, second.output);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, GpuCompiler, ::testing::Values("navi10", "navi21", "vega10"));

}  // namespace

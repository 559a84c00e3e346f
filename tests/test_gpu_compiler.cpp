// AMD's real compiler (RADV's ACO, null hardware: no GPU needed) on every pipeline relpos would use
// on a GPU, for the head sizes models use: no driver failure, no spilled register anywhere, and the
// GPU attention kernel within 128 VGPRs (4 waves per SIMD on RDNA) with its tiles in shared memory
// up to head_dim 128. Skipped, saying why, where the radeon ICD is missing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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
  std::size_t shuffled = 0;
  for (const auto& j : lines) {
    const std::string what = j["pipeline"].get<std::string>() + " " + j["variant"].dump();
    ops.insert(j["op"].get<std::string>());
    const auto& s = j["stats"];
    EXPECT_EQ(s["Spilled VGPRs"], 0) << what;
    EXPECT_EQ(s["Spilled SGPRs"], 0) << what;
    EXPECT_EQ(s["Scratch size"], 0) << what;
    EXPECT_NE(j["pipeline"], "attention_fused") << "a GPU gets the GPU kernel class: " << what;
    if (j["pipeline"] == "attention_tiled" || j["pipeline"] == "attention_tiled_shuffle") {
      shuffled += j["pipeline"] == "attention_tiled_shuffle";
      const std::uint32_t d = j["variant"]["head_dim"].get<std::uint32_t>();
      tiled_head_dims.insert(d);
      EXPECT_GT(s["LDS size"].get<double>(), 0) << what;
      if (d <= 128) EXPECT_LE(s["VGPRs"].get<double>(), 128) << what;
    }
  }
  EXPECT_EQ(tiled_head_dims, kHeadDims);
  EXPECT_GT(shuffled, 0u) << "RADV shuffles in compute shaders: the row maxima meet by shuffles";
  for (const char* op : {"attention", "unfused-attention", "shaw-attention", "t5-bias", "alibi-bias", "kerple-bias", "fourier-bias", "rope"})
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

INSTANTIATE_TEST_SUITE_P(Families, GpuCompiler, ::testing::Values("navi10", "navi21", "vega10"));

}  // namespace

// `relpos fuzz` and `relpos check` as CI uses them: the fuzzer's output contract, reproduction of
// one case, and validation messages (GPU-assisted ones included) failing the case they came from.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "support/run_tool.hpp"

using relpos::test::tool;

namespace {

std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const auto nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

// Runs the tool with VK_LAYER_ENABLES set (validation features the layer adds to those relpos asks for).
relpos::test::ToolResult tool_with_layer_enables(const std::string& enables, const std::string& args) {
  setenv("VK_LAYER_ENABLES", enables.c_str(), 1);
  auto r = tool(args);
  unsetenv("VK_LAYER_ENABLES");
  return r;
}

}  // namespace

TEST(FuzzCli, EndsWithTheSummaryLine) {
  auto r = tool("fuzz --seconds 5 --seed 1");
  EXPECT_EQ(r.status, 0) << r.output;
  std::smatch m;
  const std::string last = last_line(r.output);
  ASSERT_TRUE(std::regex_match(last, m, std::regex("fuzz: ([0-9]+) cases, 0 failed"))) << r.output;
  EXPECT_GE(std::stoi(m[1]), 1) << r.output;
}

TEST(FuzzCli, CaseRunsOneReproducibleCase) {
  auto a = tool("fuzz --seed 7 --case 3 --verbose");
  auto b = tool("fuzz --seed 7 --case 3 --verbose");
  EXPECT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(last_line(a.output), "fuzz: 1 cases, 0 failed") << a.output;
  // The case line names the op, shape, context and result, its time, and ends with the command
  // that reproduces it.
  const std::regex line("PASS (.*) \\([0-9.]+ s\\): relpos.* --seed 7 --case 3\n");
  std::smatch m, n;
  ASSERT_TRUE(std::regex_search(a.output, m, line)) << a.output;
  ASSERT_TRUE(std::regex_search(b.output, n, line)) << b.output;
  EXPECT_EQ(m[1].str(), n[1].str()) << "case 3 drew differently";
}

TEST(FuzzCli, OpSelectsAFamilyAndUnknownOpsAreClearErrors) {
  auto r = tool("fuzz --seed 2 --case 0 --op alibi --verbose");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("PASS alibi-bias"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--op alibi --case 0"), std::string::npos) << r.output;
  r = tool("fuzz --op nonsense");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--op nonsense"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unfused-attention"), std::string::npos) << r.output;
}

// The reproduction carries the kernel class where one was chosen (--kernels or RELPOS_KERNELS): on
// lavapipe a line without it would run the other class. --expansion, which the fuzz contexts take
// in turn, is refused rather than ignored; --help lists every family --op takes.
TEST(FuzzCli, ReproductionCarriesTheKernelClassAndExpansionIsRefused) {
  auto r = tool("--kernels gpu fuzz --seed 2 --case 0 --op alibi --verbose");
  EXPECT_EQ(r.status, 0) << r.output;
  // (--validation follows where ctest's RELPOS_VALIDATION=1 turned it on)
  EXPECT_NE(r.output.find(": relpos --kernels gpu "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" fuzz --seed 2 --op alibi --case 0"), std::string::npos) << r.output;
  setenv("RELPOS_KERNELS", "cpu", 1);
  r = tool("fuzz --seed 2 --case 0 --op alibi --verbose");
  unsetenv("RELPOS_KERNELS");
  EXPECT_NE(r.output.find(": relpos --kernels cpu "), std::string::npos) << r.output;
  r = tool("fuzz --seed 2 --case 0 --op alibi --verbose");
  EXPECT_EQ(r.output.find("--kernels"), std::string::npos) << r.output;  // the default: no class named
  r = tool("--expansion shader fuzz --seconds 1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --expansion: not taken by fuzz"), std::string::npos) << r.output;
  r = tool("fuzz --help");
  for (const char* family : {"kerple", "sandwich", "kv-append", "attention"}) EXPECT_NE(r.output.find(family), std::string::npos) << r.output;
}

// The best-practices checks warn when the sinusoidal pipelines are created (their SPIR-V declares
// a WorkgroupSize): those cases, and the run, must fail.
TEST(FuzzCli, CheckFailsTheCaseThatDrewAValidationMessage) {
  auto r = tool_with_layer_enables("VK_VALIDATION_FEATURE_ENABLE_BEST_PRACTICES_EXT", "--validation check --filter sinusoidal");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("FAIL sinusoidal .* validation: [0-9]+ message\\(s\\)"))) << r.output;
}

// GPU-assisted validation reported a read past the positions buffer here (the last row of an
// invocation's block loaded the next batch's position).
TEST(FuzzCli, RopeReadsNothingPastItsBuffersUnderGpuAssistedValidation) {
  auto r = tool_with_layer_enables("VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT", "--validation check --filter rope-into");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("02706"), std::string::npos) << r.output;
}

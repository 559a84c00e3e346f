// The relpos tool as scripts use it: documented commands, .npy in and out, clear errors.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <unistd.h>

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
  for (auto [args, word] : {std::pair{"run sinusoidal --positions 4 --dim 7", "dim"},
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

// relpos run ring-attention: in-process ranks (--ranks) and MPI ranks (under mpirun, where it
// exists) against run attention on the same files, every layout and the sharded path (Q < K); bad
// input stops every rank with a clear message and a non-zero exit, never a hang; --timings.
#include <nlohmann/json.hpp>

#include <relpos/relpos.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/run_tool.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::tool;
using relpos::test::tool_command;

namespace {

std::string temp(const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("relpos_ring_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return (dir / name).string();
}

void write_f32(const std::string& name, const std::vector<float>& x, std::vector<std::uint64_t> shape) {
  write_npy(temp(name), DType::F32, shape, x.data());
}

// q [B, H, Q, D], k and v [B, Hkv, K, D], a T5 table, a distance row and a dense bias for them.
struct Files {
  std::uint32_t B, H, Hkv, Q, K, D;
  std::string args;  // --q --k --v
};

Files write_inputs(std::uint32_t B, std::uint32_t H, std::uint32_t Hkv, std::uint32_t Q, std::uint32_t K, std::uint32_t D, const std::string& tag) {
  std::mt19937 rng(Q * 131 + K);
  auto q = relpos::test::random_floats(rng, std::size_t{B} * H * Q * D), k = relpos::test::random_floats(rng, std::size_t{B} * Hkv * K * D),
       v = relpos::test::random_floats(rng, k.size());
  write_f32(tag + "q.npy", q, {B, H, Q, D});
  write_f32(tag + "k.npy", k, {B, Hkv, K, D});
  write_f32(tag + "v.npy", v, {B, Hkv, K, D});
  write_f32(tag + "table.npy", relpos::test::random_floats(rng, 12 * H), {12, H});
  write_f32(tag + "row.npy", relpos::test::random_floats(rng, std::size_t{H} * (Q + K - 1)), {H, Q + K - 1});
  write_f32(tag + "dense.npy", relpos::test::random_floats(rng, std::size_t{H} * Q * K), {H, Q, K});
  write_f32(tag + "scale.npy", relpos::test::random_floats(rng, H), {H});
  return {B, H, Hkv, Q, K, D, "--q " + temp(tag + "q.npy") + " --k " + temp(tag + "k.npy") + " --v " + temp(tag + "v.npy")};
}

std::string bias_args(const std::string& mode, const std::string& tag) {
  if (mode == "t5") return " --bias t5 --table " + temp(tag + "table.npy") + " --max-distance 30 --scale 1";
  if (mode == "distance") return " --bias distance --distance-row " + temp(tag + "row.npy");
  if (mode == "dense") return " --bias dense --bias-tensor " + temp(tag + "dense.npy");
  if (mode == "sandwich") return " --bias sandwich --sandwich-dim 32 --sandwich-scale " + temp(tag + "scale.npy");
  return " --bias " + mode;
}

// run ring-attention `ring` (its rank and layout flags) against run attention on the same inputs.
void expect_ring_equals_attention(const std::string& prefix, const Files& f, const std::string& flags, const std::string& ring_flags,
                                  const std::string& tag, double tol) {
  SCOPED_TRACE(flags + " " + ring_flags);
  const std::string common = f.args + flags;
  auto one = tool("run attention " + common + " --out " + temp(tag + "one.npy") + " --lse " + temp(tag + "one_lse.npy"));
  ASSERT_EQ(one.status, 0) << one.output;
  auto ring = tool_command(prefix + " run ring-attention " + common + " " + ring_flags + " --out " + temp(tag + "ring.npy") + " --lse " +
                           temp(tag + "ring_lse.npy"));
  ASSERT_EQ(ring.status, 0) << prefix << ": " << ring.output;
  EXPECT_EQ(ring.output.find("alidation"), std::string::npos) << ring.output;  // no validation message from any rank
  const NpyArray a = read_npy(temp(tag + "one.npy")), b = read_npy(temp(tag + "ring.npy"));
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.descr, b.descr);
  EXPECT_LE(normalised_error(b.to_f32("ring"), a.to_f32("one")), tol) << flags;
  EXPECT_LE(normalised_error(read_npy(temp(tag + "ring_lse.npy")).to_f32("lse"), read_npy(temp(tag + "one_lse.npy")).to_f32("lse")), 1e-4) << flags;
}

// mpirun with each rank on one lavapipe thread, loopback only, as root too; empty without mpirun.
std::string mpirun(std::uint32_t ranks) {
#ifdef RELPOS_MPIEXEC
  std::string command =  // appended: g++ 12 warns falsely of literal + string here (its bug 105329)
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,tcp "
      "OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo LP_NUM_THREADS=1 " RELPOS_MPIEXEC " -np ";
  command += std::to_string(ranks);
  command += ' ';
  return command;
#else
  (void)ranks;
  return "";
#endif
}

}  // namespace

TEST(RingCli, InProcessRanksEqualRunAttention) {
  const Files f = write_inputs(1, 4, 2, 23, 23, 8, "a_");
  expect_ring_equals_attention(RELPOS_TOOL, f, bias_args("t5", "a_") + " --causal --causal-buckets", "--ranks 3", "a_", 1e-4);
  expect_ring_equals_attention(RELPOS_TOOL, f, bias_args("distance", "a_") + " --dtype f16", "--ranks 2 --layout zigzag", "a_", 1e-3);
  expect_ring_equals_attention(RELPOS_TOOL, f, bias_args("dense", "a_") + " --query-offset -3 --causal", "--ranks 4 --layout zigzag", "a_", 1e-4);
  expect_ring_equals_attention(RELPOS_TOOL, f, bias_args("sandwich", "a_") + " --causal", "--ranks 3 --layout zigzag", "a_", 1e-4);
  // Fewer queries than keys: the keys split, the queries on every rank.
  const Files d = write_inputs(2, 2, 1, 2, 41, 8, "d_");
  expect_ring_equals_attention(RELPOS_TOOL, d, bias_args("alibi", "d_") + " --causal --query-offset 39", "--ranks 3", "d_", 1e-4);
  expect_ring_equals_attention(RELPOS_TOOL, d, bias_args("dense", "d_"), "--ranks 4", "d_", 1e-4);
}

// --reference computes the whole call's CPU reference in this process, as run attention --reference
// does (the tool refused it, although every run command takes it); with --ranks or without.
TEST(RingCli, ReferenceIsRunAttentionsReference) {
  const Files f = write_inputs(1, 4, 2, 23, 23, 8, "r_");
  const std::string common = f.args + bias_args("t5", "r_") + " --causal --causal-buckets --reference";
  auto one = tool("run attention " + common + " --out " + temp("r_one.npy") + " --lse " + temp("r_one_lse.npy"));
  ASSERT_EQ(one.status, 0) << one.output;
  for (const std::string ranks : {" --ranks 3", ""}) {
    SCOPED_TRACE(ranks);
    auto ring = tool("run ring-attention " + common + ranks + " --out " + temp("r_ring.npy") + " --lse " + temp("r_ring_lse.npy"));
    ASSERT_EQ(ring.status, 0) << ring.output;
    EXPECT_EQ(read_npy(temp("r_ring.npy")).to_f32("ring"), read_npy(temp("r_one.npy")).to_f32("one"));
    EXPECT_EQ(read_npy(temp("r_ring_lse.npy")).to_f32("ring lse"), read_npy(temp("r_one_lse.npy")).to_f32("one lse"));
  }
  for (const std::string flag : {"--timings " + temp("r_t.json"), std::string("--devices 0,0")}) {
    auto r = tool("run ring-attention " + common + " --ranks 2 " + flag + " --out " + temp("r_ring.npy"));
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find(flag.substr(0, flag.find(' ')) + ": not with --reference"), std::string::npos) << r.output;
  }
}

// Sharded attention over caches in the formats engines keep (--kv-dtype, as run attention reads
// them): bf16 bit patterns, ggml's q8_0 blocks, fp8 e4m3 with a scale per kv head; in process and
// under mpirun. Ring attention (Q = K) refuses a cache format, naming the flag.
TEST(RingCli, ShardedOverCacheFormatsEqualsRunAttention) {
  const std::uint32_t B = 2, H = 4, Hkv = 2, Q = 2, K = 45, D = 32;
  const Files f = write_inputs(B, H, Hkv, Q, K, D, "x_");
  const std::vector<float> k = read_npy(temp("x_k.npy")).to_f32("k"), v = read_npy(temp("x_v.npy")).to_f32("v");
  write_f32("x_scale.npy", {0.01f, 0.02f}, {Hkv});
  for (CacheFormat format : {CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3}) {
    const std::string name(cache_format_name(format));
    SCOPED_TRACE(name);
    const std::size_t row = cache_row_bytes(format, D), rows = std::size_t{B} * Hkv * K;
    for (const auto& [values, file] : {std::pair{&k, "x_kc.npy"}, std::pair{&v, "x_vc.npy"}}) {
      std::vector<std::uint8_t> bytes(rows * row);
      for (std::size_t r = 0; r < rows; ++r)
        encode_cache_row(format, std::span<const float>(*values).subspan(r * D, D), std::span<std::uint8_t>(bytes).subspan(r * row, row),
                         cache_format_scaled(format) ? (r / K % Hkv == 0 ? 0.01f : 0.02f) : 1.0f);
      const std::vector<std::uint64_t> shape = {B, Hkv, K, format == CacheFormat::BF16 ? D : row};
      write_npy(temp(file), format == CacheFormat::BF16 ? "<u2" : "|u1", shape, bytes.data());
    }
    const std::string scales = cache_format_scaled(format) ? " --k-scale " + temp("x_scale.npy") + " --v-scale " + temp("x_scale.npy") : "";
    const Files c{B, H, Hkv, Q, K, D, "--q " + temp("x_q.npy") + " --k " + temp("x_kc.npy") + " --v " + temp("x_vc.npy")};
    expect_ring_equals_attention(RELPOS_TOOL, c, " --bias alibi --causal --query-offset 43 --kv-dtype " + name + scales, "--ranks 3", "x_", 1e-4);
    if (!mpirun(2).empty())
      expect_ring_equals_attention(mpirun(2) + RELPOS_TOOL, c, " --bias t5 --table " + temp("x_table.npy") + " --max-distance 30 --scale 1 --kv-dtype " + name + scales,
                                   "", "x_", 1e-4);
  }
  const Files ring = write_inputs(1, 2, 2, 7, 7, 32, "y_");
  auto r = tool("run ring-attention " + ring.args + " --ranks 2 --kv-dtype f16 --out " + temp("y_out.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--kv-dtype f16: ring attention (as many queries as keys: 7)"), std::string::npos) << r.output;
}

TEST(RingCli, TimingsNameEveryRankAndStep) {
  const Files f = write_inputs(1, 2, 2, 16, 16, 8, "t_");
  auto r = tool("run ring-attention " + f.args + " --ranks 2 --layout zigzag --causal --out " + temp("t_out.npy") + " --timings " + temp("t.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(temp("t.json")));
  EXPECT_EQ(doc["mode"], "ring");
  EXPECT_EQ(doc["transport"], "in-process");
  ASSERT_EQ(doc["ranks"].size(), 2u);
  for (const auto& rank : doc["ranks"]) {
    EXPECT_EQ(rank["steps"].size(), 2u);
    EXPECT_EQ(rank["blocks_computed"], 5);  // 2R + 1 of the 4R pairs (zigzag, causal)
    EXPECT_GE(rank["hidden_fraction"].get<double>(), 0.0);
    EXPECT_LE(rank["hidden_fraction"].get<double>(), 1.0);
  }
}

// The sharded decoding benchmark reports its time per step, the host's share and the gather, and
// creates no buffer after its first step.
TEST(RingCli, ShardedDecodeBenchReportsItsSteps) {
  auto r = tool("bench --json --filter ring-sharded-decode --repeat 1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json records = nlohmann::json::parse(r.output.substr(r.output.find('[')));
  ASSERT_EQ(records.size(), 2u);
  for (const auto& rec : records) {
    for (const char* field : {"step_ms", "gpu_ms", "gather_ms", "agree_ms", "host_ms_per_step", "buffers_after_first"})
      EXPECT_TRUE(rec.contains(field)) << field << " in " << rec.dump();
    EXPECT_EQ(rec["buffers_after_first"], 0) << rec.dump();
    EXPECT_GT(rec["host_ms_per_step"].get<double>(), 0.0);
  }
}

TEST(RingCli, BadInputGivesClearErrors) {
  const Files f = write_inputs(1, 2, 2, 3, 5, 8, "b_");
  const std::string out = " --out " + temp("b_out.npy");
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {Case{"--ranks 0", "--ranks"}, Case{"--ranks 6", "keys = 5: must be >= ranks = 6"},
                        Case{"--ranks 2 --layout zigzag", "--layout zigzag: with fewer queries (3) than keys (5)"},
                        Case{"", "--ranks is required"},
                        Case{"--ranks 2 --devices 0,,1", "an empty selector"},
                        Case{"--ranks 2 --devices no-such-device", "rank 0: error: rank 0: no context on device 'no-such-device'"},
                        Case{"--ranks 2 --bias t5", "--table is required"}}) {
    auto r = tool("run ring-attention " + f.args + " " + c.args + out);
    EXPECT_EQ(r.status, 1) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
  const Files q = write_inputs(1, 2, 2, 7, 7, 8, "c_");
  auto r = tool("run ring-attention " + q.args + " --ranks 4 --layout zigzag" + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("queries = 7: must be >= 8 (ranks = 4, zigzag: 8 chunks"), std::string::npos) << r.output;
}

TEST(RingCli, MpiRanksEqualRunAttention) {
  if (mpirun(2).empty()) GTEST_SKIP() << "no mpirun";
  const Files f = write_inputs(2, 2, 1, 19, 19, 8, "m_");
  expect_ring_equals_attention(mpirun(3) + RELPOS_TOOL, f, bias_args("t5", "m_") + " --causal --causal-buckets", "--layout zigzag", "m_", 1e-4);
  expect_ring_equals_attention(mpirun(2) + RELPOS_TOOL, f, bias_args("dense", "m_"), "", "m_", 1e-4);
  expect_ring_equals_attention(mpirun(3) + RELPOS_TOOL, f, bias_args("sandwich", "m_"), "", "m_", 1e-4);
  const Files d = write_inputs(1, 2, 2, 1, 30, 8, "n_");
  expect_ring_equals_attention(mpirun(4) + RELPOS_TOOL, d, bias_args("distance", "n_") + " --causal --query-offset 29", "", "n_", 1e-4);
}

// Under mpirun: a bad input file on rank 0 and flags that differ between ranks stop every rank,
// each saying why, with a non-zero exit.
TEST(RingCli, MpiBadInputStopsEveryRank) {
  if (mpirun(2).empty()) GTEST_SKIP() << "no mpirun";
  const Files f = write_inputs(1, 2, 2, 12, 12, 8, "e_");
  const std::string out = " --out " + temp("e_out.npy");
  auto r = tool_command(mpirun(3) + RELPOS_TOOL + " run ring-attention --q " + temp("missing.npy") + " --k " + temp("e_k.npy") + " --v " +
                        temp("e_v.npy") + out);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("relpos: rank 0: error:"), std::string::npos) << r.output;
  for (const char* rank : {"relpos: rank 1: error:", "relpos: rank 2: error:"}) {
    const auto at = r.output.find(rank);
    ASSERT_NE(at, std::string::npos) << rank << ": " << r.output;
    EXPECT_NE(r.output.find("rank 0 failed", at), std::string::npos) << r.output;
  }
  // MPMD: rank 1 is run causal, rank 0 not.
  const std::string cmd = std::string(RELPOS_TOOL) + " run ring-attention " + f.args + out;
  r = tool_command(mpirun(1) + cmd + " : -np 1 " + cmd + " --causal");
  EXPECT_NE(r.status, 0) << r.output;
  for (const char* rank : {"relpos: rank 0: error:", "relpos: rank 1: error:"}) {
    const auto at = r.output.find(rank);
    ASSERT_NE(at, std::string::npos) << rank << ": " << r.output;
    EXPECT_NE(r.output.find("disagree", at), std::string::npos) << r.output;
  }
}

// --ranks runs the whole ring in one process: under mpirun -np N (N > 1) every process would run
// it and write the same --out. Refused naming both counts, nothing written; under -np 1 it runs.
TEST(RingCli, RanksUnderAnMpiLaunchOfSeveralProcessesAreRefused) {
  if (mpirun(2).empty()) GTEST_SKIP() << "no mpirun";
  const Files f = write_inputs(1, 2, 2, 6, 6, 8, "r_");
  std::filesystem::remove(temp("r_out.npy"));
  auto r = tool_command(mpirun(3) + RELPOS_TOOL + " run ring-attention " + f.args + " --ranks 2 --out " + temp("r_out.npy"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --ranks 2: not allowed under an MPI launch of 3 processes"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(temp("r_out.npy")));
  r = tool_command(mpirun(1) + RELPOS_TOOL + " run ring-attention " + f.args + " --ranks 2 --out " + temp("r_out.npy"));
  EXPECT_EQ(r.status, 0) << r.output;
}

// Fused attention's bias checks hold on the ring too: a --num-buckets that is not the table's rows,
// a table of another head count, and Shaw tables that are not [2k + 1, D] are refused, named.
TEST(RingCli, BiasFilesOfTheWrongShapeAreRefused) {
  const Files f = write_inputs(1, 2, 2, 5, 5, 8, "s_");  // its T5 table is [12, 2]
  write_f32("s_table3.npy", std::vector<float>(12 * 3, 0.5f), {12, 3});
  write_f32("s_rel.npy", std::vector<float>(5 * 8, 0.5f), {5, 8});
  write_f32("s_rel_t.npy", std::vector<float>(5 * 8, 0.5f), {8, 5});
  const std::string run = "run ring-attention " + f.args + " --ranks 2 --out " + temp("s_out.npy");
  for (auto [args, message] : std::initializer_list<std::pair<std::string, std::string>>{
           {bias_args("t5", "s_") + " --num-buckets 32", "--num-buckets = 32: must equal the rows of --table " + temp("s_table.npy") + " [12, 2]"},
           {" --bias t5 --max-distance 30 --table " + temp("s_table3.npy"),
            "--table " + temp("s_table3.npy") + ": shape [12, 3] must be [num_buckets, H] = [12, 2]"},
           {" --bias shaw --max-relative-position 2 --rel-keys " + temp("s_rel_t.npy") + " --rel-values " + temp("s_rel.npy"),
            "--rel-keys " + temp("s_rel_t.npy") + ": shape [8, 5] must be [2k + 1, D] = [5, 8]"},
       }) {
    auto r = tool(run + args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find("relpos: error: " + message), std::string::npos) << args << ": " << r.output;
  }
  EXPECT_EQ(tool(run + bias_args("t5", "s_") + " --num-buckets 12").status, 0);
}

// `relpos run kv-append`: every cache format through the tool (the GPU's caches byte for byte the
// in-process reference's without RoPE; with RoPE and a ragged batch, the decoded caches within a
// step of the format, the queries rotated and the lengths advanced), and bad input -- a q8_0 head_dim
// not a multiple of 32, scales of the wrong length or NaN, a cache file of the wrong dtype --
// refused with the parameter named, nothing written.
#include <relpos/relpos.hpp>

#include <filesystem>
#include <numeric>
#include <random>

#include "support/run_tool.hpp"
#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::random_floats;
using relpos::test::tool;

namespace {

std::string temp(const std::string& name) { return (std::filesystem::temp_directory_path() / ("relpos_kvcli_" + name)).string(); }

std::pair<std::string, std::uint32_t> file_type(CacheFormat f) {
  switch (f) {
    case CacheFormat::F32: return {"<f4", 4};
    case CacheFormat::F16: return {"<f2", 2};
    case CacheFormat::BF16: return {"<u2", 2};
    default: return {"|u1", 1};
  }
}

struct Files {
  KvAppendParams p;
  std::vector<std::uint8_t> kc, vc;
  std::vector<float> k, v, q;
  std::vector<std::int32_t> table, lengths, counts;
  std::string args;
};

// Writes a case's inputs and returns them (B = 3, Hkv = 2, H = 4, blocks of 16).
Files write_case(CacheFormat f, std::uint32_t D, bool ragged, bool rope, const std::string& tag) {
  std::mt19937 rng(static_cast<unsigned>(D) + static_cast<unsigned>(f) * 7 + (ragged ? 100 : 0));
  Files c;
  KvAppendParams& p = c.p;
  p.batch = 3, p.kv_heads = 2, p.heads = 4, p.head_dim = D, p.new_tokens = ragged ? 4 : 2;
  p.paged = {.block_size = 16, .num_blocks = 8, .max_blocks = 2};
  p.cache_format = f;
  p.ragged = ragged;
  p.apply_rope = rope;
  p.rope.base = 500000;  // the tool's --base below
  p.advance_lengths = ragged;
  if (f == CacheFormat::FP8_E4M3) p.k_scales = {0.01f, 0.02f}, p.v_scales = {0.015f, 0.03f};
  c.counts = ragged ? std::vector<std::int32_t>{4, 0, 1} : std::vector<std::int32_t>{};
  p.packed_tokens = ragged ? 5 : 0;
  c.lengths = {3, 20, 16};
  c.table = {0, 5, 2, 7, 4, 1};
  const std::uint64_t rb = cache_row_bytes(f, D), rows = std::uint64_t{p.paged.num_blocks} * 16 * p.kv_heads;
  c.kc.resize(rows * rb);
  c.vc.resize(rows * rb);
  for (std::uint64_t i = 0; i < rows; ++i) {
    encode_cache_row(f, random_floats(rng, D), std::span(c.kc).subspan(i * rb, rb), p.k_scales.empty() ? 1.0f : p.k_scales[i % 2]);
    encode_cache_row(f, random_floats(rng, D), std::span(c.vc).subspan(i * rb, rb), p.v_scales.empty() ? 1.0f : p.v_scales[i % 2]);
  }
  const std::uint64_t in_rows = p.input_rows();
  c.k = random_floats(rng, in_rows * p.kv_heads * D);
  c.v = random_floats(rng, c.k.size());
  c.q = random_floats(rng, in_rows * p.heads * D);
  const auto [descr, element] = file_type(f);
  const std::vector<std::uint64_t> cache_shape = {p.paged.num_blocks, 16, p.kv_heads, rb / element};
  write_npy(temp(tag + "kc.npy"), descr, cache_shape, c.kc.data());
  write_npy(temp(tag + "vc.npy"), descr, cache_shape, c.vc.data());
  const std::vector<std::uint64_t> kv_shape = ragged ? std::vector<std::uint64_t>{in_rows, p.kv_heads, D}
                                                     : std::vector<std::uint64_t>{p.batch, p.kv_heads, p.new_tokens, D};
  std::vector<std::uint64_t> q_shape = kv_shape;
  q_shape[1] = p.heads;
  write_npy(temp(tag + "k.npy"), DType::F32, kv_shape, c.k.data());
  write_npy(temp(tag + "v.npy"), DType::F32, kv_shape, c.v.data());
  write_npy(temp(tag + "q.npy"), DType::F32, q_shape, c.q.data());
  const std::vector<std::uint64_t> ts = {3, 2}, ls = {3};
  write_npy(temp(tag + "bt.npy"), DType::I32, ts, c.table.data());
  write_npy(temp(tag + "l.npy"), DType::I32, ls, c.lengths.data());
  c.args = "run kv-append --k-cache " + temp(tag + "kc.npy") + " --v-cache " + temp(tag + "vc.npy") + " --k " + temp(tag + "k.npy") +
           " --v " + temp(tag + "v.npy") + " --block-table " + temp(tag + "bt.npy") + " --cache-lengths " + temp(tag + "l.npy") +
           " --kv-dtype " + std::string(cache_format_name(f)) + " --out " + temp(tag + "ok.npy") + " --v-out " + temp(tag + "ov.npy") +
           " --lengths-out " + temp(tag + "ol.npy");
  if (ragged) {
    write_npy(temp(tag + "nt.npy"), DType::I32, ls, c.counts.data());
    c.args += " --new-tokens " + temp(tag + "nt.npy") + " --advance-lengths";
  }
  if (rope) c.args += " --rope neox --base 500000 --q " + temp(tag + "q.npy") + " --q-out " + temp(tag + "oq.npy");
  if (f == CacheFormat::FP8_E4M3) {
    const std::vector<std::uint64_t> s = {2};
    write_npy(temp(tag + "ks.npy"), DType::F32, s, p.k_scales.data());
    write_npy(temp(tag + "vs.npy"), DType::F32, s, p.v_scales.data());
    c.args += " --k-scale " + temp(tag + "ks.npy") + " --v-scale " + temp(tag + "vs.npy");
  }
  return c;
}

std::vector<float> decoded(const KvAppendParams& p, const std::vector<std::uint8_t>& bytes, const std::vector<float>& scales) {
  CacheDecodeParams d{.format = p.cache(), .rows = static_cast<std::uint32_t>(bytes.size() / cache_row_bytes(p.cache(), p.head_dim)),
                      .kv_heads = p.kv_heads, .head_dim = p.head_dim, .scales = scales};
  std::vector<float> out(std::size_t{d.rows} * p.head_dim);
  decode_cache_reference(d, bytes, out);
  return out;
}

TEST(KvAppendCli, EveryFormatMatchesTheReference) {
  for (CacheFormat f : {CacheFormat::F32, CacheFormat::F16, CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
    for (bool ragged : {false, true}) {
      const bool rope = ragged;
      const std::string tag = std::string(cache_format_name(f)) + (ragged ? "_r_" : "_u_");
      SCOPED_TRACE(tag);
      Files c = write_case(f, f == CacheFormat::Q8_0 ? 64 : 34, ragged, rope, tag);
      const auto r = tool(c.args);
      ASSERT_EQ(r.status, 0) << r.output;
      std::vector<float> q = c.q;
      std::vector<std::int32_t> after(c.p.advance_lengths ? 3 : 0);
      std::vector<float> none;
      KvAppendHostData d{none, none, c.k, c.v, c.table, c.lengths, rope ? std::span<float>(q) : std::span<float>()};
      d.k_cache_bytes = c.kc;
      d.v_cache_bytes = c.vc;
      d.new_tokens = c.counts;
      d.advanced_lengths = after;
      kv_append_reference(c.p, d);
      const NpyArray ok = read_npy(temp(tag + "ok.npy")), ov = read_npy(temp(tag + "ov.npy")), ol = read_npy(temp(tag + "ol.npy"));
      EXPECT_EQ(ok.descr, file_type(f).first == "|u1" ? "<u1" : file_type(f).first);
      EXPECT_EQ(std::vector<std::uint8_t>(ov.bytes.begin(), ov.bytes.end()), c.vc);
      if (!rope) {
        EXPECT_EQ(std::vector<std::uint8_t>(ok.bytes.begin(), ok.bytes.end()), c.kc);
      } else {
        const double tol = f == CacheFormat::Q8_0 ? 2.0 / 127 : f == CacheFormat::FP8_E4M3 ? 0.0625 : f == CacheFormat::F32 ? 1e-5 : 8e-3;
        EXPECT_LE(normalised_error(decoded(c.p, std::vector<std::uint8_t>(ok.bytes.begin(), ok.bytes.end()), c.p.k_scales),
                                   decoded(c.p, c.kc, c.p.k_scales)),
                  tol);
        EXPECT_LE(normalised_error(read_npy(temp(tag + "oq.npy")).to_f32("q"), q), 1e-5);
        EXPECT_EQ(ol.to_i32("lengths"), (std::vector<std::int32_t>{7, 20, 17}));
      }
      // The tool's own reference agrees.
      const auto rr = tool(c.args + " --reference");
      ASSERT_EQ(rr.status, 0) << rr.output;
      if (!rope) {
        const NpyArray again = read_npy(temp(tag + "ok.npy"));
        EXPECT_EQ(std::vector<std::uint8_t>(again.bytes.begin(), again.bytes.end()), c.kc);
      }
    }
}

// The K cache after the case's append with `scaling` (the reference); q rotated in place.
std::vector<float> scaled_reference(const Files& c, const RopeScalingParams& scaling, std::vector<float>& q) {
  KvAppendParams p = c.p;
  p.rope.scaling = scaling;
  std::vector<std::uint8_t> kc = c.kc, vc = c.vc;
  std::vector<std::int32_t> after(3);
  std::vector<float> none;
  KvAppendHostData d{none, none, c.k, c.v, c.table, c.lengths, std::span<float>(q)};
  d.k_cache_bytes = kc;
  d.v_cache_bytes = vc;
  d.new_tokens = c.counts;
  d.advanced_lengths = after;
  kv_append_reference(p, d);
  return decoded(p, kc, {});
}

// RoPE's scaling flags (run rope's) reach the keys and queries: Llama 3 scaling through the tool
// equals the reference with the same scaling, and differs from the unscaled rotation.
TEST(KvAppendCli, RopeScalingFlagsReachTheKeysAndQueries) {
  Files c = write_case(CacheFormat::F32, 34, true, true, "scaled_");
  const auto r = tool(c.args + " --scaling llama3 --factor 8 --original-max-position 16 --low-freq-factor 1 --high-freq-factor 4");
  ASSERT_EQ(r.status, 0) << r.output;
  auto reference = [&](const RopeScalingParams& scaling, std::vector<float>& q) { return scaled_reference(c, scaling, q); };
  std::vector<float> q_scaled = c.q, q_plain = c.q;
  const std::vector<float> scaled = reference({.type = RopeScaling::Llama3, .factor = 8, .original_max_position = 16}, q_scaled);
  const std::vector<float> plain = reference({}, q_plain);
  const NpyArray ok = read_npy(temp("scaled_ok.npy"));
  const std::vector<float> got = decoded(c.p, std::vector<std::uint8_t>(ok.bytes.begin(), ok.bytes.end()), {});
  EXPECT_LE(normalised_error(got, scaled), 1e-5);
  EXPECT_GT(normalised_error(got, plain), 1e-3) << "the scaling changed nothing: the test cannot tell whether it is applied";
  EXPECT_LE(normalised_error(read_npy(temp("scaled_oq.npy")).to_f32("q"), q_scaled), 1e-5);
}

// LongRoPE's --seq-len defaults to the last appended key's position + 1 (HuggingFace's
// max(position_ids) + 1): 17 here, sequence 0's keys at 3..6 and sequence 2's at 16 (sequence 1,
// of length 20, appends none). With original_max_position 17 that is the short table; 18 the long.
TEST(KvAppendCli, LongRopeSeqLenDefaultsToTheLastAppendedPosition) {
  Files c = write_case(CacheFormat::F32, 34, true, true, "longrope_");
  RopeScalingParams s{.type = RopeScaling::LongRope, .factor = 8, .original_max_position = 17};
  for (int k = 0; k < 17; ++k) {
    s.long_factor.push_back(1.0f + 0.5f * static_cast<float>(k));
    s.short_factor.push_back(1.0f + 0.01f * static_cast<float>(k));
  }
  const std::vector<std::uint64_t> shape = {17};
  write_npy(temp("longrope_lf.npy"), DType::F32, shape, s.long_factor.data());
  write_npy(temp("longrope_sf.npy"), DType::F32, shape, s.short_factor.data());
  const std::string flags = " --scaling longrope --factor 8 --original-max-position 17 --long-factor " + temp("longrope_lf.npy") +
                            " --short-factor " + temp("longrope_sf.npy");
  std::vector<std::vector<float>> got;
  for (const char* seq_len : {"", " --seq-len 17", " --seq-len 18"}) {
    const auto r = tool(c.args + flags + seq_len);
    ASSERT_EQ(r.status, 0) << seq_len << ": " << r.output;
    const NpyArray ok = read_npy(temp("longrope_ok.npy"));
    got.push_back(decoded(c.p, std::vector<std::uint8_t>(ok.bytes.begin(), ok.bytes.end()), {}));
  }
  std::vector<float> q_short = c.q, q_long = c.q;
  s.seq_len = 17;
  const std::vector<float> short_table = scaled_reference(c, s, q_short);
  s.seq_len = 18;
  const std::vector<float> long_table = scaled_reference(c, s, q_long);
  EXPECT_LE(normalised_error(got[0], short_table), 1e-5);
  EXPECT_LE(normalised_error(got[1], short_table), 1e-5);
  EXPECT_LE(normalised_error(got[2], long_table), 1e-5);
  EXPECT_GT(normalised_error(short_table, long_table), 1e-3) << "the tables agree: the test cannot tell which was used";
}

TEST(KvAppendCli, BadInputIsRefusedNamingTheParameter) {
  Files c = write_case(CacheFormat::FP8_E4M3, 34, false, false, "bad_");
  std::filesystem::remove(temp("bad_ok.npy"));
  const std::vector<std::uint64_t> three = {3}, two = {2};
  const std::vector<float> wrong = {1.0f, 1.0f, 1.0f}, nan = {1.0f, std::nanf("")};
  write_npy(temp("bad_ks3.npy"), DType::F32, three, wrong.data());
  write_npy(temp("bad_ksnan.npy"), DType::F32, two, nan.data());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string a = c.args;
    a.replace(a.find(from), from.size(), to);
    return a;
  };
  auto r = tool(with(temp("bad_ks.npy"), temp("bad_ks3.npy")));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("k_scales"), std::string::npos) << r.output;
  r = tool(with(temp("bad_ks.npy"), temp("bad_ksnan.npy")));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("k_scales[1]"), std::string::npos) << r.output;
  r = tool(with("--kv-dtype fp8_e4m3", "--kv-dtype f16"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--k-cache"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(temp("bad_ok.npy")));
  Files q8 = write_case(CacheFormat::Q8_0, 64, false, false, "bad8_");
  // head_dim 48 for a q8_0 cache: rows of 48 / 32 blocks do not exist.
  const std::vector<float> k48(3 * 2 * 2 * 48, 0.5f);
  const std::vector<std::uint64_t> s48 = {3, 2, 2, 48};
  write_npy(temp("bad8_k.npy"), DType::F32, s48, k48.data());
  write_npy(temp("bad8_v.npy"), DType::F32, s48, k48.data());
  r = tool(q8.args);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("multiple of 32"), std::string::npos) << r.output;
}

// RoPE's scaling flags apply only with --rope, and each only to the scalings that read it: given
// otherwise they would be silently ignored.
TEST(KvAppendCli, ScalingFlagsNeedRopeAndTheirScaling) {
  Files plain = write_case(CacheFormat::F32, 34, false, false, "sflags0_");
  std::filesystem::remove(temp("sflags0_ok.npy"));
  auto r = tool(plain.args + " --scaling llama3 --factor 8");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --scaling, --factor: RoPE's frequency scaling applies only with --rope neox|gptj"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(temp("sflags0_ok.npy")));
  for (const char* flag : {"--base 500000", "--rotary-dim 16"}) {  // RoPE's own flags, without --rope
    r = tool(plain.args + " " + flag);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("relpos: error: " + std::string(flag).substr(0, std::string(flag).find(' ')) + ": applies only with --rope neox|gptj"),
              std::string::npos)
        << r.output;
  }
  r = tool(plain.args + " --base abc");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--base"), std::string::npos) << r.output;
  Files rope = write_case(CacheFormat::F32, 34, false, true, "sflags_");
  r = tool(rope.args + " --scaling llama3 --factor 8 --beta-fast 3");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --beta-fast: not used by --scaling llama3 (only by yarn)"), std::string::npos) << r.output;
  r = tool(rope.args + " --scaling yarn --original-max-position 64");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("relpos: error: --scaling yarn: needs --factor"), std::string::npos) << r.output;
}

// Ragged appends: every row of --k must be a sequence's, and per-sequence counts are one per sequence.
TEST(KvAppendCli, RaggedCountsMustCoverTheRowsOneASequence) {
  Files c = write_case(CacheFormat::F16, 64, true, false, "rag_");  // counts {4, 0, 1}: 5 rows
  auto with = [&](const std::string& from, const std::string& to) {
    std::string a = c.args;
    a.replace(a.find(from), from.size(), to);
    return a;
  };
  const std::vector<std::int32_t> fewer = {3, 0, 1};
  write_npy(temp("rag_nt4.npy"), DType::I32, std::vector<std::uint64_t>{3}, fewer.data());
  auto r = tool(with(temp("rag_nt.npy"), temp("rag_nt4.npy")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("sum to 4, --k " + temp("rag_k.npy") + " holds 5 tokens"), std::string::npos) << r.output;
  write_npy(temp("rag_nt2d.npy"), DType::I32, std::vector<std::uint64_t>{3, 1}, c.counts.data());
  r = tool(with(temp("rag_nt.npy"), temp("rag_nt2d.npy")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--new-tokens " + temp("rag_nt2d.npy") + ": must be int32 [batch]"), std::string::npos) << r.output;
  write_npy(temp("rag_l2d.npy"), DType::I32, std::vector<std::uint64_t>{1, 3}, c.lengths.data());
  r = tool(with(temp("rag_l.npy"), temp("rag_l2d.npy")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--cache-lengths " + temp("rag_l2d.npy") + ": must be int32 [batch]"), std::string::npos) << r.output;
}

}  // namespace

// Fused attention in the tool: `run attention`, `run attention-merge`, their check cases and the
// benchmarks (GFLOP/s of every bias mode beside no bias).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>

#include <relpos/attention_plan.hpp>
#include <relpos/resource_counts.hpp>

#include "cache_npy.hpp"
#include "number_flags.hpp"
#include "fuzz.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

// Every input of one attention call, as host floats and (once uploaded) device buffers.
struct AttentionData {
  AttentionParams p;
  std::vector<float> q, k, v;
  BiasInputs in;
  std::vector<std::uint32_t> lengths;
  std::vector<std::int32_t> block_table, cache_lengths;  // a paged cache (p.paged)
  std::vector<std::int32_t> query_lengths;               // packed queries (p.total_queries)
  std::vector<std::uint8_t> k_bytes, v_bytes;            // caches of a cache_format, in place of k and v
  Buffer bq, bk, bv, bout, blse, bbias, brk, brv, blen, btable, bclen, bqlen;

  AttentionHostInputs host() const {
    return {q, k, v, in.bias, in.rel_keys, in.rel_values, lengths, block_table, cache_lengths, query_lengths, k_bytes, v_bytes};
  }
  void upload(Context& ctx) {
    auto up = [&](const std::vector<float>& x) { return make_float_buffer(ctx, x, p.dtype); };
    bq = up(q);
    if (p.cache_format) {
      bk = make_buffer(ctx, std::span<const std::uint8_t>(k_bytes));
      bv = make_buffer(ctx, std::span<const std::uint8_t>(v_bytes));
    } else {
      bk = up(k);
      bv = up(v);
    }
    bout = Buffer(ctx, p.rows() * p.head_dim * dtype_size(p.output_dtype()));
    blse = Buffer(ctx, p.rows() * 4);
    if (!in.bias.empty()) bbias = make_buffer(ctx, in.bias);
    if (!in.rel_keys.empty()) {
      brk = make_buffer(ctx, in.rel_keys);
      brv = make_buffer(ctx, in.rel_values);
    }
    if (!lengths.empty()) blen = make_buffer(ctx, lengths);
    if (p.paged.enabled()) {
      btable = make_buffer(ctx, block_table);
      bclen = make_buffer(ctx, cache_lengths);
    }
    if (p.packed()) bqlen = make_buffer(ctx, query_lengths);
  }
  AttentionBuffers buffers() const {
    AttentionBuffers b{&bq, &bk, &bv, &bout, &blse};
    if (bbias) b.bias = &bbias;
    if (brk) {
      b.rel_keys = &brk;
      b.rel_values = &brv;
    }
    if (blen) b.key_lengths = &blen;
    if (btable) {
      b.block_table = &btable;
      b.cache_lengths = &bclen;
    }
    if (bqlen) b.query_lengths = &bqlen;
    return b;
  }
  AttentionResult download() const {
    const std::size_t n = p.rows() * p.head_dim;
    return {download_floats(bout, n, p.output_dtype()),
            blse.download<float>(p.rows())};
  }
};

// ---- run attention --------------------------------------------------------------------------

struct RunArgs;
void read_paged_cache(const RunArgs& a, AttentionData& d, const std::vector<std::uint64_t>& qs);

struct RunArgs {
  std::string q, k, v, k_cache, v_cache, block_table, cache_lengths, query_lengths, key_lengths, lse, dtype = "f32", kv_dtype, k_scale, v_scale;
  std::optional<float> scale;
  bool causal = false;
  std::unique_ptr<AttentionBiasFlags> bias;
  AttentionParams p;
  RunOptions o;
};

// k and v (--k and --v, or --k-cache and --v-cache): float values, or with --kv-dtype the caches'
// bytes; `ks` gets their shape (head_dim last).
void read_caches(AttentionData& d, const std::string& k_flag, const std::string& k_path, const std::string& v_flag,
                 const std::string& v_path, std::vector<std::uint64_t>& ks) {
  std::vector<std::uint64_t> vs;
  if (d.p.cache_format) {
    d.k_bytes = read_cache_npy(k_flag, k_path, *d.p.cache_format, ks);
    d.v_bytes = read_cache_npy(v_flag, v_path, *d.p.cache_format, vs);
  } else {
    d.k = read_floats(k_flag, k_path, 4, ks);
    d.v = read_floats(v_flag, v_path, 4, vs);
  }
  if (ks.size() != 4) throw InvalidArgument(k_flag + " " + k_path + ": must be 4-D, got " + std::to_string(ks.size()) + " dimension(s)");
  if (ks != vs) throw InvalidArgument(v_flag + ": shape must equal " + k_flag + "'s");
}

// --k-cache, --v-cache, --block-table and --cache-lengths: the paged layout.
void read_paged_cache(const RunArgs& a, AttentionData& d, const std::vector<std::uint64_t>& qs) {
  AttentionParams& p = d.p;
  if (a.p.query_offset != 0) throw InvalidArgument("--query-offset: not allowed with a paged cache (--cache-lengths place the queries)");
  if (!a.key_lengths.empty()) throw InvalidArgument("--key-lengths: not allowed with a paged cache (--cache-lengths replace them)");
  if (a.p.memory_prefix != 0) throw InvalidArgument("--memory-prefix: not allowed with a paged cache");
  std::vector<std::uint64_t> ks;
  read_caches(d, "--k-cache", a.k_cache, "--v-cache", a.v_cache, ks);
  if (ks[3] != qs[3]) throw InvalidArgument("--k-cache: head_dim must equal --q's (" + std::to_string(qs[3]) + "), got " + std::to_string(ks[3]));
  const NpyArray table = read_npy(a.block_table);
  d.cache_lengths = read_sequence_counts("--cache-lengths", a.cache_lengths);
  // B: --q's batch, or with packed queries the sequences --query-lengths counts.
  const std::string batch = "B = " + std::to_string(qs[0]) + (a.query_lengths.empty() ? " (--q's batch)" : " (--query-lengths' sequences)");
  if (table.shape.size() != 2 || table.shape[0] != qs[0])
    throw InvalidArgument("--block-table " + a.block_table + ": must be [B, max_blocks] with " + batch + ", got " + shape_text(table.shape));
  if (d.cache_lengths.size() != qs[0])
    throw InvalidArgument("--cache-lengths " + a.cache_lengths + ": must be [B] with " + batch + ", got [" + std::to_string(d.cache_lengths.size()) + "]");
  p.paged.num_blocks = dimension32("--k-cache num_blocks", ks[0]);
  p.paged.block_size = dimension32("--k-cache block_size", ks[1]);
  p.paged.max_blocks = dimension32("--block-table max_blocks", table.shape[1]);
  p.kv_heads = dimension32("--k-cache heads", ks[2]);
  p.keys = dimension32("max_blocks * block_size", std::uint64_t{p.paged.max_blocks} * p.paged.block_size);
  d.block_table = table.to_i32("--block-table " + a.block_table);
}

void add_attention_run(CLI::App& run, Registry& reg) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = run.add_subcommand("attention", "fused attention with a relative position bias, out [B, H, Q, D]");
  cmd->add_option("--q", a->q, "queries [B, H, Q, D] .npy")->required();
  auto* k = cmd->add_option("--k", a->k, "keys [B, Hkv, K, D] .npy (H a multiple of Hkv)");
  auto* v = cmd->add_option("--v", a->v, "values [B, Hkv, K, D] .npy");
  auto* kc = cmd->add_option("--k-cache", a->k_cache, "paged keys [num_blocks, block_size, Hkv, D] .npy (instead of --k)");
  auto* vc = cmd->add_option("--v-cache", a->v_cache, "paged values [num_blocks, block_size, Hkv, D] .npy (instead of --v)");
  auto* bt = cmd->add_option("--block-table", a->block_table, "paged: int32 [B, max_blocks] .npy, the blocks of each sequence");
  auto* cl = cmd->add_option("--cache-lengths", a->cache_lengths, "paged: int32 [B] .npy, the keys each sequence holds; its queries end there");
  auto* ql = cmd->add_option("--query-lengths", a->query_lengths,
                             "paged, packed queries: int32 [B] .npy, the queries each sequence has (0 allowed; the last positions of "
                             "its cache); --q is then [total_q, H, D] and out [total_q, H, D]");
  ql->needs(kc);
  k->excludes(kc);
  for (auto* o : {kc, vc, bt, cl})
    for (auto* other : {kc, vc, bt, cl})
      if (other != o) o->needs(other);
  k->needs(v);
  v->needs(k);
  a->bias = std::make_unique<AttentionBiasFlags>(*cmd, reg);
  cmd->add_option("--key-lengths", a->key_lengths, "int [B] .npy: keys j >= length are padding");
  cmd->add_flag("--causal", a->causal, "mask keys after the query (memory keys stay visible)");
  add_number(*cmd, "--query-offset", a->p.query_offset, "absolute position of query 0 among the local keys");
  add_number(*cmd, "--memory-prefix", a->p.memory_prefix, "the first M keys are memories: no position bias, never masked causally");
  add_number(*cmd, "--scale", a->scale, "multiplies q.k (default 1/sqrt(D); T5 models pass 1)");
  add_number(*cmd, "--key-splits", a->p.key_splits, "split the keys of each row across workgroups (default: from the shape)");
  cmd->add_option("--dtype", a->dtype,
                  "storage of q and out (and of k and v without --kv-dtype); bf16's out is written as uint16 bit patterns, and any "
                  "float input may be given so")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--kv-dtype", a->kv_dtype,
                  "format of k and v: f32, f16 (float arrays), bf16 (uint16 bit patterns), q8_0 (uint8 [..., D/32*34], ggml's blocks) or "
                  "fp8_e4m3 (uint8 [..., D], with --k-scale and --v-scale)");
  cmd->add_option("--k-scale", a->k_scale, "fp8_e4m3: float32 [Hkv] .npy, the keys' scale per kv head");
  cmd->add_option("--v-scale", a->v_scale, "fp8_e4m3: float32 [Hkv] .npy, the values' scale per kv head");
  add_run_options(*cmd, a->o);
  add_output(*cmd, a->o, "--lse", a->lse, "also write the float32 log-sum-exp [B, H, Q] .npy");
  reg.runs.push_back({cmd, [a] {
                        AttentionData d;
                        AttentionParams& p = d.p = a->p;
                        p.causal = a->causal;
                        p.scale = a->scale;
                        p.dtype = a->dtype == "f16" ? DType::F16 : a->dtype == "bf16" ? DType::BF16 : DType::F32;
                        std::vector<std::uint64_t> qs, ks, vs;
                        if (!a->query_lengths.empty()) {  // packed [total_q, H, D]: B from the lengths, Q their most
                          d.query_lengths = read_sequence_counts("--query-lengths", a->query_lengths);
                          std::vector<std::uint64_t> tokens;
                          d.q = read_floats("--q", a->q, 3, tokens);
                          if (d.query_lengths.empty()) throw InvalidArgument("--query-lengths " + a->query_lengths + ": must hold one length per sequence, got none");
                          if (tokens[0] == 0)  // total_queries 0 would read as a call without packed queries
                            throw InvalidArgument("--q " + a->q + ": holds 0 tokens; packed queries (--query-lengths) take at least one");
                          const std::int32_t most = *std::max_element(d.query_lengths.begin(), d.query_lengths.end());
                          qs = {d.query_lengths.size(), tokens[1], static_cast<std::uint64_t>(std::max(most, 1)), tokens[2]};
                          p.total_queries = dimension32("--q tokens", tokens[0]);
                        } else {
                          d.q = read_floats("--q", a->q, 4, qs);
                        }
                        p.batch = dimension32("--q batch", qs[0]);
                        p.heads = dimension32("--q heads", qs[1]);
                        p.queries = dimension32("--q queries", qs[2]);
                        p.head_dim = dimension32("--q head_dim", qs[3]);
                        if (!a->kv_dtype.empty()) p.cache_format = cache_format_flag(a->kv_dtype);
                        if (a->k_cache.empty()) {
                          if (a->k.empty()) throw InvalidArgument("--k and --v (or --k-cache, --v-cache, --block-table and --cache-lengths) are required");
                          read_caches(d, "--k", a->k, "--v", a->v, ks);
                          if (qs[0] != ks[0] || qs[3] != ks[3])
                            throw InvalidArgument("--k: batch and head_dim must equal --q's (" + std::to_string(qs[0]) + ", " +
                                                  std::to_string(qs[3]) + ")");
                          p.kv_heads = dimension32("--k heads", ks[1]);
                          p.keys = dimension32("--k keys", ks[2]);
                        } else {
                          read_paged_cache(*a, d, qs);
                        }
                        if (!a->k_scale.empty()) p.k_scales = read_floats("--k-scale", a->k_scale, 1, vs);
                        if (!a->v_scale.empty()) p.v_scales = read_floats("--v-scale", a->v_scale, 1, vs);
                        d.in = a->bias->read(p);
                        if (!a->key_lengths.empty()) {
                          for (std::int32_t x : read_npy(a->key_lengths).to_i32("--key-lengths " + a->key_lengths)) {
                            if (x < 0) throw InvalidArgument("--key-lengths: lengths must be >= 0, got " + std::to_string(x));
                            d.lengths.push_back(static_cast<std::uint32_t>(x));
                          }
                        }
                        p.validate();
                        if (p.paged.enabled()) check_block_table(p, d.block_table, d.cache_lengths);
                        if (p.packed()) check_query_lengths(p, d.query_lengths, d.cache_lengths);
                        if (d.in.bias.size() != p.bias_elements())
                          throw InvalidArgument("bias input holds " + std::to_string(d.in.bias.size()) + " values: --bias " +
                                                std::string(attention_bias_info(p.bias).name) + " needs " + std::to_string(p.bias_elements()) +
                                                " for this shape");
                        for (auto* x : {&d.q, &d.k, &d.v}) *x = rounded_to_storage(*x, p.dtype);  // what the buffers hold
                        if (p.cache_format && p.kv_bytes() != d.k_bytes.size())
                          throw InvalidArgument("--kv-dtype " + a->kv_dtype + ": the caches hold " + std::to_string(d.k_bytes.size()) + " bytes, " +
                                                std::to_string(p.kv_bytes()) + " for this shape");
                        AttentionResult res;
                        if (a->o.reference) {
                          res = attention_reference(p, d.host());
                        } else {
                          Context& ctx = tool_context();
                          d.upload(ctx);
                          Recorder r(ctx);
                          attention(r, p, d.buffers());
                          r.submit_and_wait();
                          res = d.download();
                        }
                        if (p.packed()) {
                          write_floats(a->o.out, res.out, {p.total_queries, p.heads, p.head_dim}, p.dtype);
                          if (!a->lse.empty()) write_floats(a->lse, res.lse, {p.total_queries, p.heads}, DType::F32);
                        } else {
                          write_floats(a->o.out, res.out, {p.batch, p.heads, p.queries, p.head_dim}, p.dtype);
                          if (!a->lse.empty()) write_floats(a->lse, res.lse, {p.batch, p.heads, p.queries}, DType::F32);
                        }
                      }});
}

void add_merge_run(CLI::App& run, Registry& reg) {
  struct Args {
    std::string parts, parts_lse, lse, dtype = "f32";
    RunOptions o;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = run.add_subcommand("attention-merge", "merge attention over key blocks by log-sum-exp, out [..., D]");
  cmd->add_option("--parts", a->parts, "partial outputs [N, ..., D] .npy")->required();
  cmd->add_option("--parts-lse", a->parts_lse, "their float log-sum-exp [N, ...] .npy")->required();
  cmd->add_option("--dtype", a->dtype, "storage of the partial and merged outputs")->check(CLI::IsMember({"f32", "f16"}));
  add_run_options(*cmd, a->o);
  add_output(*cmd, a->o, "--lse", a->lse, "also write the merged log-sum-exp .npy");
  reg.runs.push_back({cmd, [a] {
                        std::vector<std::uint64_t> ps, ls;
                        std::vector<float> parts = read_floats("--parts", a->parts, 0, ps);
                        const std::vector<float> lse = read_floats("--parts-lse", a->parts_lse, 0, ls);
                        if (ps.size() < 2 || ls.size() != ps.size() - 1 || !std::equal(ls.begin(), ls.end(), ps.begin()))
                          throw InvalidArgument("--parts-lse: shape must be --parts' shape without its last dimension");
                        AttentionMergeParams mp;
                        mp.parts = dimension32("--parts count", ps[0]);
                        mp.head_dim = dimension32("--parts head_dim", ps.back());
                        mp.rows = mp.parts ? lse.size() / mp.parts : 0;
                        mp.dtype = a->dtype == "f16" ? DType::F16 : DType::F32;
                        mp.validate();
                        if (mp.dtype == DType::F16) parts = from_half(to_half(parts));
                        AttentionResult res;
                        if (a->o.reference) {
                          res = attention_merge_reference(mp, parts, lse);
                        } else {
                          Context& ctx = tool_context();
                          Buffer po = make_float_buffer(ctx, parts, mp.dtype);
                          Buffer pl = make_buffer(ctx, lse), out(ctx, mp.rows * mp.head_dim * dtype_size(mp.dtype)), ol(ctx, mp.rows * 4);
                          Recorder r(ctx);
                          attention_merge(r, mp, po, pl, out, &ol);
                          r.submit_and_wait();
                          const std::size_t n = mp.rows * mp.head_dim;
                          res = {download_floats(out, n, mp.dtype),
                                 ol.download<float>(mp.rows)};
                        }
                        std::vector<std::uint64_t> out_shape(ps.begin() + 1, ps.end()), lse_shape(ls.begin() + 1, ls.end());
                        write_floats(a->o.out, res.out, out_shape, mp.dtype);
                        if (!a->lse.empty()) write_floats(a->lse, res.lse, lse_shape, DType::F32);
                      }});
}

// ---- check and bench ------------------------------------------------------------------------

AttentionData random_data(const AttentionBiasTool& family, const AttentionParams& p, unsigned seed) {
  std::mt19937 rng(seed);
  auto fill = [&](std::size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> x(n);
    for (auto& e : x) e = u(rng);
    return rounded_to_storage(x, p.dtype);
  };
  AttentionData d;
  d.p = p;
  const std::size_t D = p.head_dim;
  d.q = fill(p.rows() * D, -2.0f, 2.0f);
  if (!p.paged.enabled()) {  // make_paged fills a paged cache
    d.k = fill(std::size_t{p.batch} * p.kv_heads * p.keys * D, -2.0f, 2.0f);
    d.v = fill(d.k.size(), -2.0f, 2.0f);
  }
  d.in = family.random_input(p, fill);
  return d;
}

// A paged cache for d: the blocks the lengths need and two spare ones, taken in a shuffled order;
// table entries past a sequence's length are -1 (never read). Fills d.k and d.v.
void make_paged(AttentionData& d, const std::vector<std::uint32_t>& lengths, unsigned seed) {
  AttentionParams& p = d.p;
  const std::uint32_t bs = p.paged.block_size;
  std::uint32_t used = 0;
  for (std::uint32_t L : lengths) used += (L + bs - 1) / bs;
  p.paged.num_blocks = used + 2;
  std::mt19937 rng(seed);
  std::vector<std::int32_t> order(p.paged.num_blocks);
  for (std::size_t n = 0; n < order.size(); ++n) order[n] = static_cast<std::int32_t>(n);
  std::shuffle(order.begin(), order.end(), rng);
  d.block_table.assign(std::size_t{p.batch} * p.paged.max_blocks, -1);
  std::size_t next = 0;
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    d.cache_lengths.push_back(static_cast<std::int32_t>(lengths[b]));
    for (std::uint32_t n = 0; n * bs < lengths[b]; ++n) d.block_table[std::size_t{b} * p.paged.max_blocks + n] = order[next++];
  }
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  d.k.resize(p.paged.cache_elements(p.kv_heads, p.head_dim));
  d.v.resize(d.k.size());
  for (auto* x : {&d.k, &d.v}) {
    for (float& e : *x) e = u(rng);
    *x = rounded_to_storage(*x, p.dtype);
  }
}

std::string shape_of(const Registry& reg, const AttentionParams& p) {
  return "B=" + std::to_string(p.batch) + ",H=" + std::to_string(p.heads) + (p.kv_heads != p.heads ? "/" + std::to_string(p.kv_heads) : "") +
         ",Q=" + std::to_string(p.queries) + ",K=" + std::to_string(p.keys) + ",D=" + std::to_string(p.head_dim) + "," + bias_text(reg, p) +
         (p.causal ? ",causal" : "") + (p.query_offset ? ",off=" + std::to_string(p.query_offset) : "") +
         (p.memory_prefix ? ",M=" + std::to_string(p.memory_prefix) : "") +
         (p.paged.enabled() ? ",paged=" + std::to_string(p.paged.block_size) + "x" + std::to_string(p.paged.max_blocks) : "") + " " +
         std::string(dtype_name(p.dtype));
}

// The distance farthest from any query: rp = j - M - (i + offset) over j in [M, K), i in [0, Q).
std::int64_t farthest(const AttentionParams& p) {
  return std::max(std::abs(static_cast<std::int64_t>(p.keys) - 1 - p.memory_prefix - p.query_offset),
                  std::abs(-(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset));
}

// The largest |logit| a case can produce: |s|·D·max|q|·max|k| plus the largest bias.
double max_logit(const AttentionBiasTool& family, const AttentionData& d, double max_k) {
  const AttentionParams& p = d.p;
  const double qk = std::abs(static_cast<double>(p.effective_scale())) * p.head_dim * max_abs(d.q);
  return qk * max_k + family.max_bias(p, d.in, qk, farthest(p));
}

// d's k and v values into the bytes of its cache_format, each row with its kv head's scale.
void encode_caches(AttentionData& d) {
  const AttentionParams& p = d.p;
  const CacheFormat f = p.cache();
  const std::size_t D = p.head_dim, row_bytes = cache_row_bytes(f, p.head_dim), rows = d.k.size() / D;
  d.k_bytes.resize(rows * row_bytes);
  d.v_bytes.resize(rows * row_bytes);
  for (std::size_t row = 0; row < rows; ++row) {
    const std::uint32_t hk = p.cache_row_kv_head(row);
    const bool scaled = cache_format_scaled(f);
    encode_cache_row(f, std::span<const float>(d.k).subspan(row * D, D), std::span<std::uint8_t>(d.k_bytes).subspan(row * row_bytes, row_bytes),
                     scaled ? p.k_scales[hk] : 1.0f);
    encode_cache_row(f, std::span<const float>(d.v).subspan(row * D, D), std::span<std::uint8_t>(d.v_bytes).subspan(row * row_bytes, row_bytes),
                     scaled ? p.v_scales[hk] : 1.0f);
  }
  d.k.clear();
  d.v.clear();
}

// lengths: the key lengths of each batch (empty: no padding); with a paged cache, its cache lengths.
// Packed queries (p.total_queries): query_lengths, summing to it.
CheckResult check_attention(Context& ctx, const AttentionBiasTool& family, const AttentionParams& p, const std::vector<std::uint32_t>& lengths,
                            unsigned seed = 5, const std::vector<std::int32_t>& query_lengths = {}) {
  AttentionData d = random_data(family, p, seed);
  if (p.paged.enabled()) make_paged(d, lengths, seed);
  else d.lengths = lengths;
  d.query_lengths = query_lengths;
  const double max_k = max_abs(d.k), max_v = max_abs(d.v);  // (before a cache format's encoding clears them)
  if (p.cache_format) encode_caches(d);
  const AttentionResult want = attention_reference(d.p, d.host());
  d.upload(ctx);
  Recorder r(ctx);
  attention(r, d.p, d.buffers());
  r.submit_and_wait();
  const AttentionResult got = d.download();
  // float32 accumulation: ~1e-5 relative; f16 storage rounds the output once (2^-11). Large logits
  // cost more: the GPU rounds each logit s·q·k + bias to float32 (the reference keeps it in
  // double), an error δ <= 2^-24·max|logit| that moves the softmax weights by Σ|δw| <= 2δ, so the
  // output by 2δ·max|v| and the log-sum-exp by δ (tests/support/tolerance.hpp's reasoning). A bias
  // the GPU computes with float32 transcendentals (KERPLE, Sandwich) adds its own error to δ.
  const double delta = 0x1p-24 * max_logit(family, d, max_k) + family.bias_error(p, d.in, farthest(p));
  const double max_value = max_v + max_abs(d.in.rel_values);
  // bf16 storage: 8 significant bits, 2^-9 relative once (the inputs were rounded before the reference).
  const double storage_tol = p.output_dtype() == DType::BF16 ? 8e-3 : p.output_dtype() == DType::F16 ? 1e-3 : 1e-4;
  const double tol_out = storage_tol + 2 * delta * max_value / std::max(1.0, max_abs(want.out));
  const double tol_lse = 1e-4 + 2 * delta / std::max(1.0, max_abs(want.lse));
  // Reported against the bound it is nearer to breaking.
  const double e_out = normalised_error(got.out, want.out), e_lse = normalised_error(got.lse, want.lse);
  if (e_lse / tol_lse > e_out / tol_out) return {e_lse, tol_lse, "max_err"};
  return {e_out, tol_out, "max_err"};
}

// The family of the f16 case that `check --quick` runs (one is enough: the storage is the same in
// every mode): the first that takes a bias input.
AttentionBias quick_f16_family() {
  for (const AttentionBiasInfo& info : attention_biases())
    if (!info.input.empty()) return info.bias;
  return AttentionBias::None;
}

void register_checks(Registry& reg) {
  struct Cfg { std::uint32_t b, h, hkv, q, k, d; bool causal; std::int64_t off; std::uint32_t m; bool padded; };
  const std::vector<Cfg> cfgs = {
      {1, 4, 4, 77, 77, 64, false, 0, 0, false},    // encoder, Q = K, not a multiple of any tile
      {2, 8, 2, 37, 101, 32, true, 64, 0, true},    // grouped-query, last-aligned causal, padding
      {1, 4, 1, 1, 1000, 64, true, 999, 0, false},  // decoding step: split keys, lse merge
      {1, 2, 2, 20, 52, 20, true, 0, 16, false},    // memory prefix of 16 retrieved keys, head_dim / 4 odd
      {2, 2, 1, 1, 300, 12, true, 299, 0, true},    // decoding at a small head_dim, padded
  };
  const AttentionBias f16_family = quick_f16_family();
  for (const auto& c : cfgs)
    for (const AttentionBiasInfo& info : attention_biases())
      for (DType dtype : {DType::F32, DType::F16}) {
        const AttentionBiasTool& family = bias_tool(reg, info.bias);
        AttentionParams p{.batch = c.b, .heads = c.h, .kv_heads = c.hkv, .queries = c.q, .keys = c.k, .head_dim = c.d, .dtype = dtype,
                          .query_offset = c.off, .causal = c.causal, .memory_prefix = c.m, .bias = info.bias};
        family.example(p, static_cast<std::size_t>(&c - cfgs.data()));
        std::vector<std::uint32_t> lengths;
        if (c.padded)
          for (std::uint32_t b = 0; b < p.batch; ++b) lengths.push_back(p.keys - (b * 7) % p.keys);
        // Quick: every bias mode in the kernels that share loads and in those whose lanes take key
        // splits (with the merge), and f16 storage once, at head_dims 20 and 12. Their head_dim / 4
        // is not a multiple of 4, so the kernels keep the bounds of their last, partial group of
        // four words (which 16, 32 and 64 compile away) and lanes own uneven shares of a row.
        // Under GPU-assisted validation lavapipe compiles a head_dim-64 kernel for up to a minute
        // (no bias) or over 5 minutes (Shaw).
        const bool quick = c.d < 32 && (dtype == DType::F32 || info.bias == f16_family);
        reg.checks.push_back({"attention", shape_of(reg, p),
                              [family, p, lengths](Context& ctx) { return check_attention(ctx, family, p, lengths); }, quick});
      }
  // A paged cache: sequences of different lengths (one in its first block), a few queries, and
  // decoding over split keys with 48-key blocks (divisions, not shifts).
  struct Paged { std::uint32_t b, h, hkv, q, block_size, max_blocks, d; std::vector<std::uint32_t> lengths; };
  const std::vector<Paged> paged = {{3, 4, 2, 5, 16, 4, 20, {64, 1, 37}}, {2, 2, 1, 1, 48, 27, 64, {1296, 700}}};
  for (const auto& c : paged)
    for (const AttentionBiasInfo& info : attention_biases())
      for (DType dtype : {DType::F32, DType::F16}) {
        const AttentionBiasTool& family = bias_tool(reg, info.bias);
        AttentionParams p{.batch = c.b, .heads = c.h, .kv_heads = c.hkv, .queries = c.q, .keys = c.block_size * c.max_blocks, .head_dim = c.d,
                          .dtype = dtype, .causal = true, .bias = info.bias};
        p.paged = {.block_size = c.block_size, .num_blocks = 0, .max_blocks = c.max_blocks};
        family.example(p, 0);
        // Quick: the paged addressing is the same in every bias mode (the modes' code is the
        // contiguous kernels', which the quick cases above cover): one f32 and one f16 case.
        const bool quick = c.d < 32 && ((dtype == DType::F32 && info.bias == AttentionBias::None) || (dtype == DType::F16 && info.bias == f16_family));
        std::string lengths;
        for (std::uint32_t L : c.lengths) lengths += (lengths.empty() ? ",lengths=" : ":") + std::to_string(L);
        reg.checks.push_back({"attention", shape_of(reg, p) + lengths,
                              [family, p, lengths = c.lengths](Context& ctx) { return check_attention(ctx, family, p, lengths); }, quick});
      }
  // Packed queries over a paged cache: a prefill chunk, a decoding sequence, an empty one and a
  // short chunk in one call (the envelope's 9 queries).
  const std::vector<std::uint32_t> cache = {40, 9, 1, 64};
  const std::vector<std::int32_t> queries = {9, 1, 0, 5};
  for (const AttentionBiasInfo& info : attention_biases())
    for (DType dtype : {DType::F32, DType::F16}) {
      const AttentionBiasTool& family = bias_tool(reg, info.bias);
      AttentionParams p{.batch = 4, .heads = 4, .kv_heads = 2, .queries = 9, .keys = 64, .head_dim = 20, .dtype = dtype, .causal = true,
                        .bias = info.bias};
      p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 4};
      p.total_queries = 15;
      family.example(p, 0);
      const bool quick = (dtype == DType::F32 && info.bias == AttentionBias::None) || (dtype == DType::F16 && info.bias == f16_family);
      reg.checks.push_back({"attention", shape_of(reg, p) + ",lengths=40:9:1:64,query_lengths=9:1:0:5",
                            [family, p, cache, queries](Context& ctx) { return check_attention(ctx, family, p, cache, 5, queries); }, quick});
    }
  // Caches in each format (q and out f32, f16 or, beside a bf16 cache, bf16): paged decoding over
  // split keys with grouped-query heads, and a contiguous prefill.
  for (CacheFormat f : {CacheFormat::F16, CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
    for (bool paged : {true, false}) {
      const AttentionBias bias = paged ? AttentionBias::T5 : AttentionBias::Alibi;
      const AttentionBiasTool& family = bias_tool(reg, bias);
      AttentionParams p{.batch = 2, .heads = 8, .kv_heads = 2, .queries = paged ? 1u : 33u, .keys = paged ? 1024u : 75u, .head_dim = 64,
                        .dtype = f == CacheFormat::F16 ? DType::F32 : f == CacheFormat::BF16 ? DType::BF16 : DType::F16, .causal = true,
                        .bias = bias};
      p.cache_format = f;
      if (cache_format_scaled(f)) {  // values up to 2 into e4m3's range (448)
        p.k_scales = {0.01f, 0.02f};
        p.v_scales = {0.005f, 0.01f};
      }
      if (paged) p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 64};
      family.example(p, 0);
      const std::vector<std::uint32_t> lengths = paged ? std::vector<std::uint32_t>{1000, 77} : std::vector<std::uint32_t>{};
      reg.checks.push_back({"attention", shape_of(reg, p) + ",kv=" + std::string(cache_format_name(f)) + (paged ? ",lengths=1000:77" : ""),
                            [family, p, lengths](Context& ctx) { return check_attention(ctx, family, p, lengths); }, f == CacheFormat::Q8_0});
    }
}

// One random fused attention: every bias mode, f32 or f16, any head_dim up to the maximum,
// grouped-query heads, long K, memory prefixes, causal masks with offsets near the limit, key
// padding down to empty rows, and key splits chosen or forced.
CheckCase draw_case(const Registry& reg, FuzzRng& g) {
  const auto families = attention_biases();
  AttentionParams p;
  p.bias = families[g.below(families.size())].bias;
  const AttentionBiasTool& family = bias_tool(reg, p.bias);
  p.dtype = g.float_dtype();
  p.head_dim = 4 * g.size(1, AttentionParams::kMaxHeadDim / 4);
  // Multiply-adds of one case (the reference's and the GPU's): rows * keys * head_dim.
  const std::uint64_t work = g.max_elements() * 16;
  p.keys = g.size(1, std::min<std::uint64_t>(kFuzzMaxKeys, work / p.head_dim));
  const std::uint64_t per_row = std::uint64_t{p.keys} * p.head_dim;
  p.kv_heads = g.size(1, std::min<std::uint64_t>(8, work / per_row));
  p.heads = p.kv_heads * g.size(1, std::min<std::uint64_t>(4, work / (per_row * p.kv_heads)));
  p.queries = g.size(1, std::min<std::uint64_t>(2048, work / (per_row * p.heads)));
  // Inputs that grow with the shape (distance rows, a dense bias) within the case's budget too.
  while (p.queries > 1 && p.bias_elements() > g.max_elements()) p.queries /= 2;
  p.batch = g.size(1, std::min<std::uint64_t>(4, work / (per_row * p.heads * p.queries)));
  p.causal = g.chance(0.5);
  if (g.chance(0.25)) {  // a paged cache: its capacity rounds the keys up to whole blocks
    p.paged.block_size = 16 * g.size(1, 16);
    p.paged.max_blocks = (p.keys + p.paged.block_size - 1) / p.paged.block_size;
    p.keys = p.paged.max_blocks * p.paged.block_size;
  } else {
    if (g.chance(0.3)) p.memory_prefix = g.size(1, p.keys);
    constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
    p.query_offset = g.offset(std::int64_t{p.keys} - kMax, kMax - p.queries);
  }
  if (g.chance(0.3)) p.scale = g.pick({1.0f, 0.01f});
  if (g.chance(0.3)) {  // forced splits, within what validate() allows: at most 8192 keys per split
    const std::uint32_t fewest = (p.keys + AttentionParams::kMaxKeysPerSplit - 1) / AttentionParams::kMaxKeysPerSplit;
    p.key_splits = g.size(fewest, std::min(p.keys, AttentionMergeParams::kMaxParts));
  }
  family.draw(p, g);
  std::vector<std::uint32_t> lengths;
  if (p.paged.enabled() || g.chance(0.3))
    for (std::uint32_t b = 0; b < p.batch; ++b) lengths.push_back(static_cast<std::uint32_t>(g.offset(0, p.keys)));
  // Packed queries over the paged cache: each sequence up to its cache length (0 allowed).
  std::vector<std::int32_t> query_lengths;
  if (p.paged.enabled() && g.chance(0.5)) {
    for (std::uint32_t b = 0; b < p.batch; ++b)
      query_lengths.push_back(static_cast<std::int32_t>(g.offset(0, std::min<std::int64_t>(p.queries, lengths[b]))));
    for (std::int32_t n : query_lengths) p.total_queries += static_cast<std::uint32_t>(n);
    if (p.total_queries == 0) {  // a token at least: the buffers hold one
      lengths[0] = std::max(lengths[0], 1u);
      query_lengths[0] = p.total_queries = 1;
    }
  }
  std::string shape = shape_of(reg, p) + (p.key_splits ? ",splits=" + std::to_string(p.key_splits) : "");
  if (!lengths.empty()) {
    shape += ",lengths=";
    for (std::size_t b = 0; b < lengths.size(); ++b) shape += (b ? ":" : "") + std::to_string(lengths[b]);
  }
  if (!query_lengths.empty()) {
    shape += ",query_lengths=";
    for (std::size_t b = 0; b < query_lengths.size(); ++b) shape += (b ? ":" : "") + std::to_string(query_lengths[b]);
  }
  const unsigned seed = g.data_seed();
  return {"attention", shape,
          [family, p, lengths, seed, query_lengths](Context& ctx) { return check_attention(ctx, family, p, lengths, seed, query_lengths); }};
}

// attention() over d, beside the same over c (the baseline, named `baseline`) in one submission.
BenchRun attention_beside(std::shared_ptr<AttentionData> d, std::shared_ptr<AttentionData> c, const char* baseline) {
  BenchRun run;
  run.record = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
  run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
  run.baseline = baseline;
  run.record_baseline = [c](Recorder& r) { attention(r, c->p, c->buffers()); };
  run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<AttentionData>>>(d, c);
  return run;
}

// Multiply-adds of q·kᵀ and p·v: 4·B·H·Q·K·D floating-point operations.
double gflop(const AttentionParams& p) { return 4.0 * p.rows() * p.keys * p.head_dim / 1e9; }

// The engine's batch in the paged benches: 8 sequences of 1k to 16k keys (53,248 in all).
const std::vector<std::uint32_t> kEngineLengths = {1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384};
// The bytes a step over that batch moves: k and v rows of row_bytes for each key of each kv head,
// and float16 q and out.
std::uint64_t engine_step_bytes(const AttentionParams& p, std::uint64_t row_bytes) {
  std::uint64_t keys = 0;
  for (std::uint32_t n : kEngineLengths) keys += n;
  return 2 * keys * p.kv_heads * row_bytes + 2 * p.rows() * p.head_dim * 2;
}
// That batch's step: head_dim 128, f16, `queries` a sequence, a paged cache of `block`-key blocks
// with room for 16,384 keys a sequence.
AttentionParams engine_params(std::uint32_t queries, std::uint32_t block = 16, std::uint32_t heads = 8, std::uint32_t kv_heads = 2) {
  AttentionParams p{.batch = 8, .heads = heads, .kv_heads = kv_heads, .queries = queries, .keys = 16384, .head_dim = 128, .dtype = DType::F16};
  p.paged = {.block_size = block, .num_blocks = 0, .max_blocks = 16384 / block};
  return p;
}

void register_benches(Registry& reg) {
  auto add = [&](AttentionParams p, bool in_short) {
    const AttentionBiasTool& family = bias_tool(reg, p.bias);
    const std::uint64_t es = dtype_size(p.dtype);
    const std::uint64_t bytes = 2 * p.rows() * p.head_dim * es + 2ull * p.batch * p.kv_heads * p.keys * p.head_dim * es +
                                p.bias_elements() * 4;
    char shape[160];
    std::snprintf(shape, sizeof shape, "[%u,%u,%u,%u,%u] %s %s %.2fGF", p.batch, p.heads, p.queries, p.keys, p.head_dim,
                  bias_text(reg, p).c_str(), std::string(dtype_name(p.dtype)).c_str(), gflop(p));
    reg.benches.push_back({"attention", shape, bytes, Ceiling::Copy, in_short, [family, p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             d->upload(ctx);
                             BenchRun run;
                             run.record = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
                             run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
                             run.keep = d;
                             if (attention_unfused_takes(d->p.bias)) {
                               // The ratio, measured in one submission: the unfused pipeline.
                               auto logits = std::make_shared<Buffer>(ctx, attention_unfused_logits_bytes(d->p));
                               run.baseline = "unfused";
                               run.record_baseline = [d, logits](Recorder& r) { attention_unfused(r, d->p, d->buffers(), *logits); };
                               run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<Buffer>>>(d, logits);
                             }
                             return run;
                           }});
  };
  for (const AttentionBiasInfo& info : attention_biases()) {
    AttentionParams p{.heads = 8, .kv_heads = 8, .queries = 1024, .keys = 1024, .head_dim = 64, .bias = info.bias};
    bias_tool(reg, info.bias).example(p, 0);
    add(p, false);
    if (attention_unfused_takes(info.bias)) {  // the short run: a quarter of the keys and queries
      p.queries = p.keys = 256;
      add(p, true);
    }
  }
  // Paged decoding: 8 sequences of 1k to 16k keys in a cache of 16- or 256-key blocks, beside the
  // same keys held contiguously ([8, Hkv, 16384, D] with key lengths) in the same submission; 8
  // query heads over 2 kv heads, and 28 over 4 (Qwen2.5-7B's: groups of 7, in slabs of 4 and 3).
  struct Paged {
    std::uint32_t block, heads, kv_heads;
  };
  for (const Paged c : {Paged{16, 8, 2}, Paged{256, 8, 2}, Paged{16, 28, 4}}) {
    const std::uint32_t block = c.block;
    const AttentionParams p = engine_params(1, block, c.heads, c.kv_heads);
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    char shape[160];
    std::snprintf(shape, sizeof shape, "[8,%u/%u,1,1k-16k,128] block %u f16", c.heads, c.kv_heads, block);
    reg.benches.push_back({"attention-paged", shape, bytes, Ceiling::Copy, false, [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->upload(ctx);
                             AttentionParams cp = p;  // the contiguous baseline: the same keys per sequence
                             cp.paged = {};
                             cp.query_offset = cp.keys - 1;
                             auto c = std::make_shared<AttentionData>(random_data(family, cp, 2));
                             c->lengths = kEngineLengths;
                             c->upload(ctx);
                             return attention_beside(d, c, "contiguous");
                           }});
  }
  // Paged decoding over caches of 8-bit formats (and bf16) beside the same step over an f16 cache,
  // in one submission: the bytes a step reads are the cache's (q8_0 34/64 of f16's, fp8 half), and
  // on a memory-bound device the step's time follows them.
  for (CacheFormat f : {CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3}) {
    const AttentionParams p = engine_params(1);
    const std::uint64_t bytes = engine_step_bytes(p, cache_row_bytes(f, p.head_dim));
    const std::string shape = "[8,8/2,1,1k-16k,128] block 16 " + std::string(cache_format_name(f)) + " cache, f16 q";
    reg.benches.push_back({"attention-paged", shape, bytes, Ceiling::Copy, false, [family = bias_tool(reg, p.bias), p, f](Context& ctx) {
                             auto c = std::make_shared<AttentionData>(random_data(family, p, 1));  // the f16 cache
                             make_paged(*c, kEngineLengths, 1);
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));  // the same values, encoded
                             make_paged(*d, kEngineLengths, 1);
                             d->p.cache_format = f;
                             if (cache_format_scaled(f)) d->p.k_scales = d->p.v_scales = std::vector<float>(p.kv_heads, 1.0f / 128);
                             encode_caches(*d);
                             c->upload(ctx);
                             d->upload(ctx);
                             return attention_beside(d, c, "f16 cache");
                           }});
  }
  // Chunked prefill beside decoding in one packed call (engines batch them): sequence 0 prefills 256
  // queries at the end of its 1k keys, sequences 1-7 decode one query each over 2k-16k keys; beside
  // the same work as two calls in one submission (the prefill alone, the 7 decodes alone).
  {
    AttentionParams p = engine_params(256);
    p.causal = true;
    p.total_queries = 256 + 7;
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    reg.benches.push_back({"attention-mixed", "[8,8/2,256+7x1,1k-16k,128] block 16 f16", bytes, Ceiling::Copy, false,
                           [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->query_lengths = {256, 1, 1, 1, 1, 1, 1, 1};
                             d->upload(ctx);
                             AttentionParams pp = p;  // the prefill alone
                             pp.batch = 1;
                             pp.total_queries = 0;
                             auto prefill = std::make_shared<AttentionData>(random_data(family, pp, 2));
                             make_paged(*prefill, {kEngineLengths[0]}, 2);
                             prefill->upload(ctx);
                             AttentionParams dp = p;  // the decodes alone
                             dp.batch = 7;
                             dp.queries = 1;
                             dp.total_queries = 0;
                             auto decode = std::make_shared<AttentionData>(random_data(family, dp, 3));
                             make_paged(*decode, std::vector<std::uint32_t>(kEngineLengths.begin() + 1, kEngineLengths.end()), 3);
                             decode->upload(ctx);
                             BenchRun run;
                             run.record = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
                             // The reference of the same work as two calls (of the packed call, it scores every
                             // sequence's rows of the chunk: 43 s).
                             run.cpu = [prefill, decode] {
                               (void)attention_reference(prefill->p, prefill->host());
                               (void)attention_reference(decode->p, decode->host());
                             };
                             run.baseline = "prefill and decodes apart";
                             run.record_baseline = [prefill, decode](Recorder& r) {
                               attention(r, prefill->p, prefill->buffers());
                               attention(r, decode->p, decode->buffers());
                             };
                             run.keep = std::make_shared<std::vector<std::shared_ptr<AttentionData>>>(
                                 std::vector<std::shared_ptr<AttentionData>>{d, prefill, decode});
                             return run;
                           }});
  }
  // Sequences of a few queries each (speculative decoding's drafts, a chunk's tail) in one packed
  // call, beside the decoding step of one query each over the same caches, in one submission (on a
  // CPU device, up to 16 queries a sequence decode; 32 take workgroups of query rows).
  for (const std::uint32_t n : {2u, 8u, 16u, 32u}) {
    AttentionParams p = engine_params(n);
    p.causal = true;
    p.total_queries = 8 * n;
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    const std::string shape = "[8,8/2,8x" + std::to_string(n) + ",1k-16k,128] block 16 f16";
    reg.benches.push_back({"attention-drafts", shape, bytes, Ceiling::Copy, false, [family = bias_tool(reg, p.bias), p, n](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->query_lengths.assign(8, static_cast<std::int32_t>(n));
                             d->upload(ctx);
                             AttentionParams dp = p;  // one query each
                             dp.queries = 1;
                             dp.total_queries = 0;
                             auto decode = std::make_shared<AttentionData>(random_data(family, dp, 1));
                             make_paged(*decode, kEngineLengths, 1);
                             decode->upload(ctx);
                             return attention_beside(d, decode, "one query each");
                           }});
  }
  // A paged decoding step through a plan beside attention() on the same inputs, in one submission:
  // both record through one path, so their GPU times should agree (T5 decoder bias, the engine's
  // shape: 8 sequences of 1k to 16k keys in 16-key blocks, 8 query and 2 kv heads, head_dim 128).
  {
    AttentionParams p = engine_params(1);
    p.causal = true;
    p.bias = AttentionBias::T5;
    p.t5.bidirectional = false;
    const std::uint64_t bytes = engine_step_bytes(p, p.head_dim * 2);
    reg.benches.push_back({"attention-plan", "[8,8/2,1,1k-16k,128] t5 block 16 f16", bytes, Ceiling::Copy, false,
                           [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             make_paged(*d, kEngineLengths, 1);
                             d->upload(ctx);
                             auto plan = std::make_shared<AttentionPlan>(ctx, d->p);
                             BenchRun run;
                             run.record = [d, plan](Recorder& r) { plan->record(r, {1, d->p.keys, 0}, d->buffers()); };
                             run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
                             run.baseline = "attention()";
                             run.record_baseline = [d](Recorder& r) { attention(r, d->p, d->buffers()); };
                             run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<AttentionPlan>>>(d, plan);
                             return run;
                           }});
  }
  // The unfused pipeline at the fused T5 case's shape (the 2x comparison): the same bytes
  // counted, so the two lines' ms compare directly; it also allocates the [B, H, Q, K] logits.
  for (std::uint32_t n : {1024u, 256u}) {
    AttentionParams p{.heads = 8, .kv_heads = 8, .queries = n, .keys = n, .head_dim = 64, .bias = AttentionBias::T5};
    const std::uint64_t bytes = 4 * p.rows() * p.head_dim * 4 + p.bias_elements() * 4;
    char shape[160];
    std::snprintf(shape, sizeof shape, "[1,8,%u,%u,64] t5 f32 %.2fGF +%lluMiB", n, n, gflop(p),
                  static_cast<unsigned long long>(attention_unfused_logits_bytes(p) >> 20));
    reg.benches.push_back({"attention-unfused", shape, bytes, Ceiling::Copy, n == 256, [family = bias_tool(reg, p.bias), p](Context& ctx) {
                             auto d = std::make_shared<AttentionData>(random_data(family, p, 1));
                             d->upload(ctx);
                             auto logits = std::make_shared<Buffer>(ctx, attention_unfused_logits_bytes(p));
                             BenchRun run;
                             run.record = [d, logits](Recorder& r) { attention_unfused(r, d->p, d->buffers(), *logits); };
                             run.cpu = [d] { (void)attention_reference(d->p, d->host()); };
                             run.keep = std::make_shared<std::pair<std::shared_ptr<AttentionData>, std::shared_ptr<Buffer>>>(d, logits);
                             return run;
                           }});
  }
  // One decoding step against a long cache.
  add({.heads = 8, .kv_heads = 8, .queries = 1, .keys = 16384, .head_dim = 64, .scale = 1.0f, .query_offset = 16383, .causal = true,
       .bias = AttentionBias::T5},
      false);
}

// A decode loop through a plan: 256 steps of one query with the T5 decoder bias, the keys growing
// from 32 to 8192 by 32 per step, one submission per step. Host time is recording only; the
// counts are of Vulkan objects created after the first step (relpos/resource_counts.hpp). The
// same loop through attention() is reported beside it (attention_*).
constexpr std::uint32_t kDecodeSteps = 256, kDecodeKeyStep = 32;

struct DecodeLoop {
  AttentionParams env;
  Buffer q, k, v, out, table;
  std::unique_ptr<AttentionPlan> plan;
  DecodeLoop(Context& ctx, const AttentionParams& e) : env(e) {
    std::mt19937 rng(1);
    auto floats = [&](std::size_t n) {
      std::vector<float> x(n);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (float& f : x) f = u(rng);
      return make_buffer(ctx, x);
    };
    const std::size_t cache = std::size_t{env.batch} * env.kv_heads * env.keys * env.head_dim;
    q = floats(env.rows() * env.head_dim);
    k = floats(cache);
    v = floats(cache);
    out = Buffer(ctx, env.rows() * env.head_dim * 4);
    table = floats(std::size_t{env.t5.num_buckets} * env.heads);
    plan = std::make_unique<AttentionPlan>(ctx, env);
  }
  AttentionBuffers buffers() const { return {&q, &k, &v, &out, nullptr, &table}; }
  static AttentionStep step(std::uint32_t n) {
    const std::uint32_t keys = kDecodeKeyStep * (n + 1);
    return {1, keys, std::int64_t{keys} - 1};
  }

  // Runs the loop; record(r, step) records one step. Returns {mean and median host µs per step
  // after the first, allocations after the first, pipelines after the first}.
  template <class F>
  std::array<double, 4> run(Context& ctx, F&& record) {
    Recorder r(ctx);
    ResourceCounts first{};
    std::vector<double> host_us;
    for (std::uint32_t n = 0; n < kDecodeSteps; ++n) {
      const auto t0 = std::chrono::steady_clock::now();
      record(r, step(n));
      const auto t1 = std::chrono::steady_clock::now();
      if (n > 0) host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      r.submit_and_wait();
      if (n == 0) first = resource_counts(ctx);
    }
    const ResourceCounts last = resource_counts(ctx);
    double sum = 0;
    for (double t : host_us) sum += t;
    std::sort(host_us.begin(), host_us.end());
    return {sum / host_us.size(), host_us[host_us.size() / 2], static_cast<double>(last.allocations() - first.allocations()),
            static_cast<double>(last.pipelines - first.pipelines)};
  }
};

void register_decode_loop(Registry& reg) {
  AttentionParams env{.heads = 8, .kv_heads = 8, .queries = 1, .keys = kDecodeSteps * kDecodeKeyStep, .head_dim = 64, .scale = 1.0f,
                      .causal = true, .bias = AttentionBias::T5};
  env.t5.bidirectional = false;
  const std::uint64_t bytes = 2 * env.rows() * env.head_dim * 4 + 2ull * env.kv_heads * env.keys * env.head_dim * 4;
  const std::string shape = "[1,8,1,32..8192,64] t5 f32 256 steps";
  reg.benches.push_back({"attention-decode-loop", shape, bytes, Ceiling::Copy, false, [env](Context& ctx) {
                           auto d = std::make_shared<DecodeLoop>(ctx, env);
                           BenchRun run;
                           // The GPU columns: the loop's last step (8192 keys) through the plan.
                           run.record = [d](Recorder& r) { d->plan->record(r, DecodeLoop::step(kDecodeSteps - 1), d->buffers()); };
                           run.loop = [d, &ctx] {
                             const auto planned = d->run(ctx, [&](Recorder& r, const AttentionStep& s) { d->plan->record(r, s, d->buffers()); });
                             // The same loop through attention(), which takes k and v of the step's
                             // size: views of the cache's beginning (Buffer::external allocates nothing).
                             const auto free_function = d->run(ctx, [&](Recorder& r, const AttentionStep& s) {
                               AttentionParams p = d->plan->step_params(s);
                               const std::uint64_t kv_bytes = std::uint64_t{p.kv_heads} * p.keys * p.head_dim * 4;
                               const Buffer k = Buffer::external(ctx, d->k.handle(), kv_bytes), v = Buffer::external(ctx, d->v.handle(), kv_bytes);
                               attention(r, p, {&d->q, &k, &v, &d->out, nullptr, &d->table});
                             });
                             std::vector<std::pair<std::string, double>> figures = {
                                 {"host_us_per_step", planned[0]},          {"host_us_per_step_median", planned[1]},
                                 {"allocations_after_first", planned[2]},   {"pipelines_after_first", planned[3]},
                                 {"attention_host_us_per_step", free_function[0]}, {"attention_host_us_per_step_median", free_function[1]},
                                 {"attention_allocations_after_first", free_function[2]},
                                 {"attention_pipelines_after_first", free_function[3]}};
                             return figures;
                           };
                           run.keep = d;
                           return run;
                         }});
}

}  // namespace

// A family whose input is the bias itself, read from one file of `dims` dimensions.
AttentionBiasTool file_bias(AttentionBias bias, const char* flag, const char* help, std::size_t dims) {
  AttentionBiasTool t = attention_bias_tool(bias);
  t.add_flags = [=](CLI::App& cmd) {
    auto path = std::make_shared<std::string>();
    cmd.add_option(flag, *path, help);
    return std::function<void(AttentionParams&, BiasInputs&)>([=](AttentionParams& p, BiasInputs& in) {
      std::vector<std::uint64_t> shape;
      in.bias = read_floats(flag, *path, dims, shape);
      // The shape, not only the count: a transposed file holds as many values, in the wrong places.
      const std::vector<std::uint64_t> want = p.bias_shape();
      if (shape != want)
        throw InvalidArgument(std::string(flag) + " " + *path + ": shape " + shape_text(shape) + " must be " + shape_text(want) + " (" + help + ")");
    });
  };
  return t;
}

// The families with no operation of their own: none, distance rows and a dense tensor.
void register_plain_biases(Registry& reg) {
  reg.attention_biases.push_back(attention_bias_tool(AttentionBias::None));
  reg.attention_biases.push_back(file_bias(AttentionBias::Distance, "--distance-row", "distance: float [H, Q + K - 1] .npy, index rp + query_offset + Q - 1", 2));
  reg.attention_biases.push_back(file_bias(AttentionBias::Dense, "--bias-tensor", "dense: float [H, Q, K] .npy", 3));
}

void register_attention(CLI::App& run, Registry& reg) {
  register_plain_biases(reg);
  for (const AttentionBiasInfo& info : attention_biases()) (void)bias_tool(reg, info.bias);  // every family has its description
  add_attention_run(run, reg);
  add_merge_run(run, reg);
  register_checks(reg);
  register_benches(reg);
  register_decode_loop(reg);
  reg.fuzz.push_back({"attention", [&reg](FuzzRng& g) { return draw_case(reg, g); }});
}

}  // namespace relpos::tool

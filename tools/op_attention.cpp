// Fused attention in the tool: `run attention` and `run attention-merge`, and the families with no
// operation of their own (none, distance rows, a dense bias). Its check, fuzz and bench cases are
// in tools/attention_cases.cpp and tools/attention_benches.cpp.
#include "attention_data.hpp"
#include "cache_npy.hpp"
#include "number_flags.hpp"

namespace relpos::tool {
namespace {

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
  KvFiles f = read_kv_npy(d.p.cache_format, k_flag, k_path, v_flag, v_path, ks);
  d.k = std::move(f.k);
  d.v = std::move(f.v);
  d.k_bytes = std::move(f.k_bytes);
  d.v_bytes = std::move(f.v_bytes);
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
                        // A head size the format cannot store, by its rule rather than by the caches' row sizes.
                        if (p.cache_format) check_cache_head_dim(*p.cache_format, p.head_dim, "--q head_dim");
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
  reg.attention_biases.push_back(file_bias(AttentionBias::Distance, "--distance-row", "distance: float [H, Q + K - 1] .npy, index rp + query_offset + Q - 1 (paged: rp + K - 1, K = max_blocks * block_size)", 2));
  reg.attention_biases.push_back(file_bias(AttentionBias::Dense, "--bias-tensor", "dense: float [H, Q, K] .npy", 3));
}

void register_attention(CLI::App& run, Registry& reg) {
  register_plain_biases(reg);
  for (const AttentionBiasInfo& info : attention_biases()) (void)bias_tool(reg, info.bias);  // every family has its description
  add_attention_run(run, reg);
  add_merge_run(run, reg);
  register_attention_checks(reg);
  register_attention_benches(reg);
}

}  // namespace relpos::tool

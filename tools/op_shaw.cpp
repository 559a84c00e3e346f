// Shaw relative keys and values in the tool: `run shaw-logits`, `run shaw-attention`, their
// check cases (cheap form, tensor2tensor's materialised form, values, the pipelines) and the
// benchmarks (the cheap relative-key term against tensor2tensor's materialised form).
#include <cmath>
#include <random>
#include <sstream>
#include <tuple>

#include "fuzz.hpp"
#include "number_flags.hpp"
#include "registry.hpp"
#include "shaw_cases.hpp"

namespace relpos::tool {
namespace {

// A float .npy of exactly `rank` dimensions.
struct Tensor {
  std::vector<std::uint64_t> shape;
  std::vector<float> values;
};

Tensor read_tensor(const std::string& flag, const std::string& path, std::size_t rank, const std::string& layout) {
  const NpyArray a = read_npy(path);
  if (a.shape.size() != rank)
    throw InvalidArgument(flag + " " + path + ": must be " + std::to_string(rank) + "-D " + layout + ", got " +
                          std::to_string(a.shape.size()) + " dimension(s)");
  for (std::uint64_t d : a.shape)
    if (d == 0 || d > 0xffffffffull) throw InvalidArgument(flag + " " + path + ": dimensions must be in [1, 2^32)");
  return {a.shape, a.to_f32(flag + " " + path)};
}

std::string dims(const std::vector<std::uint64_t>& s) {
  std::string out = "[";
  for (std::size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

void require_dim(const std::string& what, std::uint64_t got, std::uint64_t want, const std::string& why) {
  if (got != want)
    throw InvalidArgument(what + " = " + std::to_string(got) + ": must equal " + std::to_string(want) + " (" + why + ")");
}

// q [B, H, Q, d] and the table [2K+1, d] give the parameters; k and v [B, H, keys, d] must agree.
ShawParams params_from(const Tensor& q, const Tensor& table, std::uint32_t max_rel) {
  ShawParams p;
  p.max_relative_position = max_rel;
  p.batch = static_cast<std::uint32_t>(q.shape[0]);
  p.heads = static_cast<std::uint32_t>(q.shape[1]);
  p.queries = static_cast<std::uint32_t>(q.shape[2]);
  p.head_dim = static_cast<std::uint32_t>(q.shape[3]);
  if (max_rel < 1) throw InvalidArgument("--max-relative-position = " + std::to_string(max_rel) + ": must be >= 1");
  require_dim("rel table rows", table.shape[0], 2ull * max_rel + 1, "2 * max_relative_position + 1");
  require_dim("rel table head_dim", table.shape[1], p.head_dim, "the head_dim of q");
  return p;
}

void check_like_q(const std::string& flag, const Tensor& t, const ShawParams& p) {
  require_dim(flag + " batch", t.shape[0], p.batch, "the batch of q");
  require_dim(flag + " heads", t.shape[1], p.heads, "the heads of q");
  require_dim(flag + " head_dim", t.shape[3], p.head_dim, "the head_dim of q");
}

// Runs f on a fresh output buffer and downloads it.
std::vector<float> run_gpu(Context& ctx, std::size_t out_elems, DType out_dtype, const std::function<void(Recorder&, Buffer&)>& f) {
  Buffer out(ctx, out_elems * dtype_size(out_dtype));
  Recorder r(ctx);
  f(r, out);
  r.submit_and_wait();
  return download_floats(out, out_elems, out_dtype);
}



void register_runs(CLI::App& run, Registry& reg) {
  {
    struct Opt {
      std::string q, rel_keys, k;
      std::uint32_t max_rel = 0, keys = 0;
      std::int64_t offset = 0;
      bool align_last = false;
      float scale = 1.0f;
      RunOptions o;
    };
    auto o = std::make_shared<Opt>();
    auto* cmd = run.add_subcommand("shaw-logits", "Shaw relative-key logits [B, H, Q, keys]: q·rel_keys[idx]ᵀ (+ q·kᵀ with --k), times --scale");
    cmd->add_option("--q", o->q, "float32 q [B, H, Q, d] .npy")->required();
    cmd->add_option("--rel-keys", o->rel_keys, "float32 relative keys [2K+1, d] .npy")->required();
    add_number(*cmd, "--max-relative-position", o->max_rel, "K: relative positions are clipped to [-K, K]")->required();
    cmd->add_option("--k", o->k, "float32 keys [B, H, keys, d] .npy: adds the content term q·kᵀ");
    add_number(*cmd, "--keys", o->keys, "number of keys without --k", 1u);
    add_number(*cmd, "--query-offset", o->offset, "absolute position of query 0 (rp = j - i - offset; default 0)");
    cmd->add_flag("--align-last", o->align_last, "tensor2tensor's alignment: query offset = keys - Q (overrides --query-offset)");
    add_number(*cmd, "--scale", o->scale, "multiplies the logits (default 1: q already scaled)");
    add_run_options(*cmd, o->o);
    reg.runs.push_back({cmd, [o] {
                          const Tensor q = read_tensor("--q", o->q, 4, "[B, H, Q, d]");
                          const Tensor e = read_tensor("--rel-keys", o->rel_keys, 2, "[2K+1, d]");
                          ShawParams p = params_from(q, e, o->max_rel);
                          Tensor k;
                          if (!o->k.empty()) {
                            k = read_tensor("--k", o->k, 4, "[B, H, keys, d]");
                            check_like_q("--k", k, p);
                            if (o->keys) require_dim("--keys", o->keys, k.shape[2], "the keys of --k");
                            p.keys = static_cast<std::uint32_t>(k.shape[2]);
                          } else {
                            if (!o->keys) throw InvalidArgument("--keys is required without --k (the number of keys)");
                            p.keys = o->keys;
                          }
                          // The logits, and with --k the reference's content term beside them.
                          check_host_memory({{{{"--q batch", p.batch}, {"--q heads", p.heads}, {"--q queries", p.queries}, {o->k.empty() ? "--keys" : "--k keys", p.keys}},
                                              o->o.reference && !o->k.empty() ? 8u : 4u}});
                          p.query_offset = o->align_last ? t2t_query_offset(p.queries, p.keys) : o->offset;
                          p.scale = o->scale;
                          p.validate();
                          UnfusedAttentionParams a;
                          a.batch = p.batch;
                          a.heads = p.heads;
                          a.queries = p.queries;
                          a.keys = p.keys;
                          a.head_dim = p.head_dim;
                          a.scale = p.scale;
                          const std::size_t n = std::size_t{p.batch} * p.heads * p.queries * p.keys;
                          std::vector<float> out;
                          if (o->o.reference) {
                            out = shaw_logits_direct_reference(p, q.values, e.values);
                            if (!o->k.empty()) {
                              const auto content = unfused_logits_reference(a, q.values, k.values);
                              for (std::size_t x = 0; x < n; ++x) out[x] += content[x];
                            }
                          } else {
                            Context& ctx = tool_context();
                            Buffer bq = make_buffer(ctx, q.values), be = make_buffer(ctx, e.values);
                            Buffer bk = o->k.empty() ? Buffer() : make_buffer(ctx, k.values);
                            out = run_gpu(ctx, n, DType::F32, [&](Recorder& r, Buffer& logits) {
                              if (o->k.empty()) {
                                shaw_logits(r, p, bq, be, logits);
                              } else {
                                unfused_logits(r, a, bq, bk, logits);
                                shaw_logits_add(r, p, bq, be, logits);
                              }
                            });
                          }
                          write_floats(o->o.out, out, {p.batch, p.heads, p.queries, p.keys}, DType::F32);
                        }});
  }
  {
    struct Opt {
      std::string q, k, v, rel_keys, rel_values, dtype = "f32", lengths;
      std::uint32_t max_rel = 0;
      std::int64_t offset = 0;
      bool causal = false, align_last = false;
      float scale = NAN;
      RunOptions o;
    };
    auto o = std::make_shared<Opt>();
    auto* cmd = run.add_subcommand("shaw-attention", "attention with Shaw relative keys and values, out [B, H, Q, d]");
    cmd->add_option("--q", o->q, "q [B, H, Q, d] .npy")->required();
    cmd->add_option("--k", o->k, "k [B, H, keys, d] .npy")->required();
    cmd->add_option("--v", o->v, "v [B, H, keys, d] .npy")->required();
    cmd->add_option("--rel-keys", o->rel_keys, "relative keys [2K+1, d] .npy")->required();
    cmd->add_option("--rel-values", o->rel_values, "relative values [2K+1, d] .npy")->required();
    add_number(*cmd, "--max-relative-position", o->max_rel, "K: relative positions are clipped to [-K, K]")->required();
    cmd->add_flag("--causal", o->causal, "mask key j for query i when j > i + query offset");
    add_number(*cmd, "--query-offset", o->offset, "absolute position of query 0 (default 0)");
    cmd->add_flag("--align-last", o->align_last, "tensor2tensor's alignment: query offset = keys - Q (overrides --query-offset)");
    add_number(*cmd, "--scale", o->scale, "multiplies both logit terms (default 1/sqrt(d))");
    cmd->add_option("--key-lengths", o->lengths, "key padding: comma-separated valid key count per batch");
    cmd->add_option("--dtype", o->dtype, "storage of q, k, v and out (f32 accumulation either way)")->check(CLI::IsMember({"f32", "f16"}));
    add_run_options(*cmd, o->o);
    reg.runs.push_back({cmd, [o] {
                          const Tensor q = read_tensor("--q", o->q, 4, "[B, H, Q, d]");
                          const Tensor k = read_tensor("--k", o->k, 4, "[B, H, keys, d]");
                          const Tensor v = read_tensor("--v", o->v, 4, "[B, H, keys, d]");
                          const Tensor ek = read_tensor("--rel-keys", o->rel_keys, 2, "[2K+1, d]");
                          const Tensor ev = read_tensor("--rel-values", o->rel_values, 2, "[2K+1, d]");
                          const ShawParams s = params_from(q, ek, o->max_rel);
                          (void)params_from(q, ev, o->max_rel);
                          check_like_q("--k", k, s);
                          check_like_q("--v", v, s);
                          if (v.shape != k.shape) throw InvalidArgument("--v " + dims(v.shape) + ": must have the shape of --k " + dims(k.shape));
                          ShawAttentionParams p;
                          p.max_relative_position = o->max_rel;
                          UnfusedAttentionParams& a = p.attention;
                          a.batch = s.batch;
                          a.heads = s.heads;
                          a.queries = s.queries;
                          a.keys = static_cast<std::uint32_t>(k.shape[2]);
                          a.head_dim = s.head_dim;
                          a.causal = o->causal;
                          a.query_offset = o->align_last ? t2t_query_offset(a.queries, a.keys) : o->offset;
                          a.scale = std::isnan(o->scale) ? 1.0f / std::sqrt(static_cast<float>(a.head_dim)) : o->scale;
                          a.dtype = o->dtype == "f16" ? DType::F16 : DType::F32;
                          if (!o->lengths.empty()) {
                            std::stringstream in(o->lengths);
                            for (std::string item; std::getline(in, item, ',');) {
                              a.key_lengths.push_back(parse_number<std::uint32_t>("--key-lengths", item, 0, a.keys));
                            }
                          }
                          p.validate();
                          std::vector<float> out;
                          const std::size_t n = std::size_t{a.batch} * a.heads * a.queries * a.head_dim;
                          if (o->o.reference) {
                            out = shaw_attention_reference(p, rounded_to_storage(q.values, a.dtype), rounded_to_storage(k.values, a.dtype),
                                                           rounded_to_storage(v.values, a.dtype), ek.values, ev.values);
                          } else {
                            Context& ctx = tool_context();
                            Buffer bq = make_float_buffer(ctx, q.values, a.dtype), bk = make_float_buffer(ctx, k.values, a.dtype), bv = make_float_buffer(ctx, v.values, a.dtype);
                            Buffer bek = make_buffer(ctx, ek.values), bev = make_buffer(ctx, ev.values);
                            out = run_gpu(ctx, n, a.dtype, [&](Recorder& r, Buffer& b) { shaw_attention(r, p, bq, bk, bv, bek, bev, b); });
                          }
                          write_floats(o->o.out, out, {a.batch, a.heads, a.queries, a.head_dim}, a.dtype);
                        }});
  }
}

// Shaw in fused attention: `--bias shaw` with --rel-keys, --rel-values and --max-relative-position.
AttentionBiasTool attention_shaw() {
  AttentionBiasTool t = attention_bias_tool(AttentionBias::Shaw);
  t.add_flags = [](CLI::App& cmd) {
    struct Flags {
      std::string rel_keys, rel_values;
      std::uint32_t k = 0;
    };
    auto f = std::make_shared<Flags>();
    cmd.add_option("--rel-keys", f->rel_keys, "shaw: float [2k + 1, D] .npy");
    cmd.add_option("--rel-values", f->rel_values, "shaw: float [2k + 1, D] .npy");
    auto* k = add_number(cmd, "--max-relative-position", f->k, "shaw: k");
    return std::function<void(AttentionParams&, BiasInputs&)>([f, k](AttentionParams& p, BiasInputs& in) {
      std::vector<std::uint64_t> key_shape, value_shape;
      in.rel_keys = read_floats("--rel-keys", f->rel_keys, 2, key_shape);
      in.rel_values = read_floats("--rel-values", f->rel_values, 2, value_shape);
      // k sizes the tables' shape: without it that shape would be [1, D].
      if (!k->count()) throw InvalidArgument("--max-relative-position is required for --bias shaw (k: the tables are [2k + 1, D])");
      p.max_relative_position = f->k;
      // The shape, not only the count: a transposed [D, 2k + 1] table holds as many values, in the wrong places.
      const std::vector<std::uint64_t> want = {2ull * f->k + 1, p.head_dim};
      for (auto [flag, path, shape] : {std::tuple{"--rel-keys", &f->rel_keys, &key_shape}, {"--rel-values", &f->rel_values, &value_shape}})
        if (*shape != want)
          throw InvalidArgument(std::string(flag) + " " + *path + ": shape " + shape_text(*shape) + " must be [2k + 1, D] = " + shape_text(want) +
                                " (k = --max-relative-position " + std::to_string(f->k) + ", D = --q's head_dim)");
    });
  };
  t.example = [](AttentionParams& p, std::size_t) { p.max_relative_position = 16; };
  t.draw = [](AttentionParams& p, FuzzRng& g) { p.max_relative_position = g.size(1, 2000); };
  t.random_input = [](const AttentionParams& p, const Fill& fill) {
    BiasInputs in;
    in.rel_keys = fill((2 * p.max_relative_position + 1) * p.head_dim, -1.0f, 1.0f);
    in.rel_values = fill(in.rel_keys.size(), -1.0f, 1.0f);
    return in;
  };
  t.describe = [](const AttentionParams& p) { return ",k=" + std::to_string(p.max_relative_position); };
  // q·rel_keys joins q·k in each score.
  t.max_bias = [](const AttentionParams&, const BiasInputs& in, double qk, const Distances&) { return qk * max_abs(in.rel_keys); };
  return t;
}

}  // namespace

RELPOS_TOOL_FAMILY(shaw) {
  reg.attention_biases.push_back(attention_shaw());
  register_runs(run, reg);
  register_shaw_checks(reg);
  register_shaw_benches(reg);
  register_shaw_fuzz(reg);
}

}  // namespace relpos::tool

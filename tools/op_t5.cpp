// T5 in the tool: `run t5-buckets`, `run t5-bias`, their check cases and benchmarks.
#include <limits>
#include <random>

#include "number_flags.hpp"
#include "fuzz.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

void add_bucket_options(CLI::App& cmd, T5Params& p, bool& causal, bool& flax) {
  add_number(cmd, "--queries", p.queries, "number of queries Q", 1u)->required();
  add_number(cmd, "--keys", p.keys, "number of keys K", 1u)->required();
  add_number(cmd, "--max-distance", p.max_distance, "distance from which all keys share the last bucket")->required();
  cmd.add_flag("--causal", causal, "decoder buckets (keys in the future share bucket 0); default bidirectional");
  add_number(cmd, "--query-offset", p.query_offset, "absolute position of query 0 (rp = j - i - offset)");
  cmd.add_flag("--flax-eps", flax, "flaxformer/t5x convention: log(n / max_exact + 2^-23)");
}

void finish_params(T5Params& p, bool causal, bool flax) {
  p.bidirectional = !causal;
  p.log = flax ? T5Log::FlaxEps : T5Log::HuggingFace;
}

std::string shape_of(const T5Params& p) {
  return "H=" + std::to_string(p.heads) + ",Q=" + std::to_string(p.queries) + ",K=" + std::to_string(p.keys) +
         ",nb=" + std::to_string(p.num_buckets) + ",md=" + std::to_string(p.max_distance) + (p.bidirectional ? ",bi" : ",causal") +
         (p.query_offset ? ",off=" + std::to_string(p.query_offset) : "") + (p.log == T5Log::FlaxEps ? ",flax" : "");
}

std::vector<float> random_table(const T5Params& p, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> t(std::size_t{p.num_buckets} * p.heads);
  for (auto& x : t) x = d(rng);
  return t;
}

// GPU buckets against the reference: mismatches must be zero.
CheckResult check_buckets(Context& ctx, const T5Params& p) {
  Buffer out(ctx, std::uint64_t{p.queries} * p.keys * 4);
  Recorder r(ctx);
  t5_buckets(r, p, out);
  r.submit_and_wait();
  const auto got = out.download<std::int32_t>(std::size_t{p.queries} * p.keys);
  return {static_cast<double>(count_mismatches(got, t5_buckets_reference(p))), 0.0, "mismatches"};
}

// GPU bias (f32: exact; f16: half rounding) or in-place add against the reference.
CheckResult check_bias(Context& ctx, const T5Params& p, DType dtype, bool add) {
  const auto table = random_table(p, 17);
  const std::size_t n = std::size_t{add ? p.batch : 1} * p.heads * p.queries * p.keys;
  std::vector<float> logits(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (auto& x : logits) x = add ? u(rng) : 0.0f;
  if (dtype == DType::F16) logits = from_half(to_half(logits));  // what the f16 buffer holds
  std::vector<float> want = logits;
  if (add) t5_bias_add_reference(p, table, want);
  else want = t5_bias_reference(p, table);

  Buffer t = make_buffer(ctx, table);
  Buffer out(ctx, n * dtype_size(dtype));
  if (add) {
    if (dtype == DType::F16) out.upload(std::span<const std::uint16_t>(to_half(logits)));
    else out.upload(std::span<const float>(logits));
  }
  Recorder r(ctx);
  if (add) t5_bias_add(r, p, t, out, dtype);
  else t5_bias(r, p, t, out, dtype);
  r.submit_and_wait();
  const std::vector<float> got = download_floats(out, n, dtype);
  // f32 is a gather and one multiply (or add): exact. f16 adds one rounding to half: 2^-10 relative.
  return {normalised_error(got, want), dtype == DType::F16 ? 1.0 / 1024 : 0.0, "max_err"};
}

void register_checks(Registry& reg) {
  struct Cfg { std::uint32_t nb, md; bool bi; T5Log log; std::uint32_t q, k, h, b; std::int64_t off; };
  const std::vector<Cfg> cfgs = {
      {32, 128, true, T5Log::HuggingFace, 128, 128, 8, 1, 0},          // default encoder
      {32, 128, false, T5Log::HuggingFace, 200, 200, 8, 1, 0},         // default decoder
      {32, 128, false, T5Log::HuggingFace, 1, 4096, 8, 1, 4095},       // one decoding step, long cache
      {32, 128, true, T5Log::FlaxEps, 37, 301, 3, 2, 264},             // last-aligned, Q != K
      {6, 20, false, T5Log::HuggingFace, 14, 14, 4, 1, 0},             // tests/data/t5_seed_tables.txt's 6 / 20
      {48, 81, false, T5Log::HuggingFace, 100, 100, 2, 1, 0},          // NumPy-flips knife edge
      {64, 50, false, T5Log::HuggingFace, 97, 103, 3, 1, -5},          // CPU/CUDA disagreement
      {33, 1000, true, T5Log::HuggingFace, 61, 59, 5, 3, 2'000'000},   // odd buckets, far offset
  };
  for (std::size_t n = 0; n < cfgs.size(); ++n) {
    const Cfg& c = cfgs[n];
    const bool quick = n == 0 || n == 2 || n == 3 || n == 4;  // between them, every pipeline variant
    T5Params p;
    p.num_buckets = c.nb;
    p.max_distance = c.md;
    p.bidirectional = c.bi;
    p.log = c.log;
    p.queries = c.q;
    p.keys = c.k;
    p.heads = c.h;
    p.batch = c.b;
    p.query_offset = c.off;
    reg.checks.push_back({"t5-buckets", shape_of(p), [p](Context& ctx) { return check_buckets(ctx, p); }, quick});
    reg.checks.push_back({"t5-bias", shape_of(p) + " f32", [p](Context& ctx) { return check_bias(ctx, p, DType::F32, false); }, quick});
    reg.checks.push_back({"t5-bias", shape_of(p) + " f16", [p](Context& ctx) { return check_bias(ctx, p, DType::F16, false); }, quick});
    reg.checks.push_back({"t5-bias-add", shape_of(p) + ",B=" + std::to_string(c.b) + " f32",
                          [p](Context& ctx) { return check_bias(ctx, p, DType::F32, true); }, quick});
    reg.checks.push_back({"t5-bias-add", shape_of(p) + ",B=" + std::to_string(c.b) + " f16",
                          [p](Context& ctx) { return check_bias(ctx, p, DType::F16, true); }, quick});
  }
}

// One random case of buckets, bias or add: any bucket count, distances, shapes up to long K and
// offsets up to the edge of the 32-bit relative positions.
CheckCase draw_case(FuzzRng& g) {
  T5Params p;
  p.bidirectional = g.chance(0.5);
  p.log = g.chance(0.7) ? T5Log::HuggingFace : T5Log::FlaxEps;
  p.num_buckets = g.size(p.bidirectional ? 4 : 2, 320);
  p.max_distance = g.size(p.max_exact() + 1, 200000);
  const std::uint64_t budget = g.max_elements();
  p.keys = g.size(1, std::min<std::uint64_t>(kFuzzMaxKeys, budget));
  p.queries = g.size(1, std::min<std::uint64_t>(4096, budget / p.keys));
  p.heads = g.size(1, std::min<std::uint64_t>(64, budget / (std::uint64_t{p.queries} * p.keys)));
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  p.query_offset = g.offset(std::int64_t{p.keys} - kMax, kMax - p.queries);
  p.scale = g.pick({1.0f, 0.125f, -3.0f});
  const std::uint64_t kind = g.below(5);
  const DType dtype = kind % 2 ? DType::F32 : DType::F16;
  const bool add = kind >= 3;
  if (add) p.batch = g.size(1, std::min<std::uint64_t>(4, budget / (std::uint64_t{p.heads} * p.queries * p.keys)));
  if (kind == 0) return {"t5-buckets", shape_of(p), [p](Context& ctx) { return check_buckets(ctx, p); }};
  return {add ? "t5-bias-add" : "t5-bias", shape_of(p) + (add ? ",B=" + std::to_string(p.batch) : "") + " " + std::string(dtype_name(dtype)),
          [p, dtype, add](Context& ctx) { return check_bias(ctx, p, dtype, add); }};
}

void register_benches(Registry& reg) {
  for (auto [h, q, k, dtype, in_short] : {std::tuple{16u, 2048u, 2048u, DType::F32, true}, {16u, 2048u, 2048u, DType::F16, false},
                                          {8u, 512u, 512u, DType::F32, true}, {16u, 4096u, 4096u, DType::F32, false},
                                          {8u, 2048u, 2048u, DType::F32, false}}) {  // the Fourier bias's comparison shape
    T5Params p;
    p.heads = h;
    p.queries = q;
    p.keys = k;
    const std::uint64_t bytes = std::uint64_t{h} * q * k * dtype_size(dtype);
    reg.benches.push_back({"t5-bias", "[" + std::to_string(h) + "," + std::to_string(q) + "," + std::to_string(k) + "] " +
                                          std::string(dtype_name(dtype)),
                           bytes, Ceiling::Write, in_short, [p, bytes, dtype](Context& ctx) {
                             struct State { std::vector<float> table; Buffer t, out; };
                             auto s = std::make_shared<State>();
                             s->table = random_table(p, 1);
                             s->t = make_buffer(ctx, s->table);
                             s->out = Buffer(ctx, bytes);
                             BenchRun run;
                             run.record = [p, s, dtype](Recorder& r) { t5_bias(r, p, s->t, s->out, dtype); };
                             run.cpu = [p, s] { (void)t5_bias_reference(p, s->table); };
                             run.keep = s;
                             return run;
                           }});
  }
  T5Params p;
  p.heads = 8;
  p.batch = 2;
  p.queries = p.keys = 1024;
  const std::uint64_t bytes = 2ull * 8 * 1024 * 1024 * 4 * 2;  // read and write the logits
  reg.benches.push_back({"t5-bias-add", "[2,8,1024,1024] f32", bytes, Ceiling::Copy, false, [p](Context& ctx) {
                           struct State { std::vector<float> table, logits; Buffer t, l; };
                           auto s = std::make_shared<State>();
                           s->table = random_table(p, 1);
                           s->logits.assign(std::size_t{p.batch} * p.heads * p.queries * p.keys, 0.5f);
                           s->t = make_buffer(ctx, s->table);
                           s->l = make_buffer(ctx, s->logits);
                           BenchRun run;
                           run.record = [p, s](Recorder& r) { t5_bias_add(r, p, s->t, s->l); };
                           run.cpu = [p, s] { t5_bias_add_reference(p, s->table, s->logits); };
                           run.keep = s;
                           return run;
                         }});
}

// T5 in fused attention: `--bias t5` with its table and bucket flags; T5 models pass scale 1.
AttentionBiasTool attention_t5() {
  AttentionBiasTool t = attention_bias_tool(AttentionBias::T5);
  t.add_flags = [](CLI::App& cmd) {
    struct Flags {
      std::string table;
      T5Params t5;
      bool causal_buckets = false, flax = false;
    };
    auto f = std::make_shared<Flags>();
    cmd.add_option("--table", f->table, "t5: float [num_buckets, H] .npy");
    add_number(cmd, "--max-distance", f->t5.max_distance, "t5: distance from which all keys share the last bucket");
    auto* num_buckets = add_number(cmd, "--num-buckets", f->t5.num_buckets, "t5: number of buckets (default: rows of the table, which it must equal)");
    cmd.add_flag("--causal-buckets", f->causal_buckets, "t5: decoder buckets (default bidirectional)");
    cmd.add_flag("--flax-eps", f->flax, "t5: flaxformer/t5x log convention");
    add_number(cmd, "--bias-scale", f->t5.scale, "t5: multiplies the table values (default 1)");
    return std::function<void(AttentionParams&, BiasInputs&)>([f, num_buckets](AttentionParams& p, BiasInputs& in) {
      std::vector<std::uint64_t> shape;
      in.bias = read_floats("--table", f->table, 2, shape);
      p.t5 = f->t5;
      // The table's rows are the buckets: a --num-buckets that differs would be silently ignored.
      p.t5.num_buckets = dimension32("--table rows", shape[0]);
      if (num_buckets->count() && f->t5.num_buckets != shape[0])
        throw InvalidArgument("--num-buckets = " + std::to_string(f->t5.num_buckets) + ": must equal the rows of --table " + f->table + " " +
                              shape_text(shape) + " ([num_buckets, H])");
      p.t5.bidirectional = !f->causal_buckets;
      p.t5.log = f->flax ? T5Log::FlaxEps : T5Log::HuggingFace;
      // A table of another head count: named with the shape it must have, not by its count of values.
      if (const std::vector<std::uint64_t> want = p.bias_shape(); shape != want)
        throw InvalidArgument("--table " + f->table + ": shape " + shape_text(shape) + " must be [num_buckets, H] = " + shape_text(want));
    });
  };
  t.example = [](AttentionParams& p, std::size_t) { p.scale = 1.0f; };
  t.draw = [](AttentionParams& p, FuzzRng& g) {
    p.t5.bidirectional = g.chance(0.5);
    p.t5.num_buckets = g.size(p.t5.bidirectional ? 4 : 2, 128);
    p.t5.max_distance = g.size(p.t5.max_exact() + 1, 100000);
    p.t5.log = g.chance(0.5) ? T5Log::HuggingFace : T5Log::FlaxEps;
  };
  t.describe = [](const AttentionParams& p) {
    return ",nb=" + std::to_string(p.t5.num_buckets) + ",md=" + std::to_string(p.t5.max_distance) + (p.t5.bidirectional ? ",bi" : "") +
           (p.t5.log == T5Log::FlaxEps ? ",flax" : "");
  };
  t.max_bias = [](const AttentionParams& p, const BiasInputs& in, double, const Distances&) { return max_abs(in.bias) * std::abs(p.t5.scale); };
  return t;
}

}  // namespace

RELPOS_TOOL_FAMILY(t5) {
  reg.attention_biases.push_back(attention_t5());
  {
    auto p = std::make_shared<T5Params>();
    auto causal = std::make_shared<bool>(false), flax = std::make_shared<bool>(false);
    auto o = std::make_shared<RunOptions>();
    auto* cmd = run.add_subcommand("t5-buckets", "T5 buckets, int32 [Q, K]");
    add_bucket_options(*cmd, *p, *causal, *flax);
    add_number(*cmd, "--num-buckets", p->num_buckets, "number of buckets")->required();
    add_run_options(*cmd, *o);
    reg.runs.push_back({cmd, [=] {
                          check_host_memory({{{{"--queries", p->queries}, {"--keys", p->keys}}, 4}});
                          finish_params(*p, *causal, *flax);
                          std::vector<std::int32_t> out;
                          if (o->reference) {
                            out = t5_buckets_reference(*p);
                          } else {
                            Context& ctx = tool_context();
                            p->validate();
                            Buffer b(ctx, std::uint64_t{p->queries} * p->keys * 4);
                            Recorder r(ctx);
                            t5_buckets(r, *p, b);
                            r.submit_and_wait();
                            out = b.download<std::int32_t>(std::size_t{p->queries} * p->keys);
                          }
                          const std::vector<std::uint64_t> shape = {p->queries, p->keys};
                          write_npy(o->out, DType::I32, shape, out.data());
                        }});
  }
  {
    auto p = std::make_shared<T5Params>();
    auto causal = std::make_shared<bool>(false), flax = std::make_shared<bool>(false);
    auto o = std::make_shared<RunOptions>();
    auto table_path = std::make_shared<std::string>();
    auto dtype = std::make_shared<std::string>("f32");
    auto* cmd = run.add_subcommand("t5-bias", "T5 bias [heads, Q, K] from a float32 [num_buckets, heads] table");
    cmd->add_option("--table", *table_path, "float [num_buckets, heads] .npy")->required();
    add_bucket_options(*cmd, *p, *causal, *flax);
    add_number(*cmd, "--scale", p->scale, "multiplies the bias (default 1)");
    cmd->add_option("--dtype", *dtype, "output dtype")->check(CLI::IsMember({"f32", "f16"}));
    add_run_options(*cmd, *o);
    reg.runs.push_back({cmd, [=] {
                          finish_params(*p, *causal, *flax);
                          const NpyArray t = read_npy(*table_path);
                          if (t.shape.size() != 2)
                            throw InvalidArgument("--table " + *table_path + ": must be 2-D [num_buckets, heads], got " +
                                                  std::to_string(t.shape.size()) + " dimension(s)");
                          p->num_buckets = dimension32("--table rows", t.shape[0]);
                          p->heads = dimension32("--table heads", t.shape[1]);
                          const DType out_dtype = *dtype == "f16" ? DType::F16 : DType::F32;
                          // The float32 values, and the f16 copy write_floats makes of them.
                          check_host_memory({{{{"--table heads", p->heads}, {"--queries", p->queries}, {"--keys", p->keys}},
                                              4 + (out_dtype == DType::F16 ? 2u : 0u)}});
                          const std::vector<float> table = t.to_f32("--table " + *table_path);
                          const std::size_t n = std::size_t{p->heads} * p->queries * p->keys;
                          std::vector<float> out;
                          if (o->reference) {
                            out = t5_bias_reference(*p, table);
                          } else {
                            Context& ctx = tool_context();
                            p->validate();
                            Buffer tb = make_buffer(ctx, table);
                            Buffer b(ctx, n * dtype_size(out_dtype));
                            Recorder r(ctx);
                            t5_bias(r, *p, tb, b, out_dtype);
                            r.submit_and_wait();
                            out = download_floats(b, n, out_dtype);
                          }
                          write_floats(o->out, out, {p->heads, p->queries, p->keys}, out_dtype);
                        }});
  }
  register_checks(reg);
  register_benches(reg);
  reg.fuzz.push_back({"t5", draw_case});
}

}  // namespace relpos::tool

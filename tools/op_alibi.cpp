// ALiBi in the tool: `run alibi-slopes`, `run alibi-bias`, their check cases and benchmarks.
#include <limits>
#include <random>

#include "fuzz.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

std::string shape_of(const AlibiParams& p) {
  return "H=" + std::to_string(p.heads) + ",Q=" + std::to_string(p.queries) + ",K=" + std::to_string(p.keys) +
         (p.causal ? ",causal" : ",sym") + (p.query_offset ? ",off=" + std::to_string(p.query_offset) : "") +
         (p.rule == AlibiSlopeRule::Geometric ? ",geometric" : "") + (p.max_bias != 8.0 ? ",mb=" + std::to_string(static_cast<int>(p.max_bias)) : "");
}

// GPU bias or in-place add against the reference. f32 is one multiply (and one add): exact;
// f16 against the reference rounded to half (far biases overflow to -inf in both), give or take
// one half ulp: 2^-10 relative to the largest value.
CheckResult check_bias(Context& ctx, const AlibiParams& p, DType dtype, bool add) {
  const std::size_t n = std::size_t{add ? p.batch : 1} * p.heads * p.queries * p.keys;
  std::vector<float> logits(n, 0.0f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  if (add)
    for (auto& x : logits) x = u(rng);
  if (dtype == DType::F16) logits = from_half(to_half(logits));  // what the f16 buffer holds
  std::vector<float> want = logits;
  if (add) alibi_bias_add_reference(p, want);
  else want = alibi_bias_reference(p);
  if (dtype == DType::F16) want = from_half(to_half(want));
  Buffer out = make_float_buffer(ctx, logits, dtype);
  Recorder r(ctx);
  if (add) alibi_bias_add(r, p, out, dtype);
  else alibi_bias(r, p, out, dtype);
  r.submit_and_wait();
  return {normalised_error(download_floats(out, n, dtype), want), dtype == DType::F16 ? 1.0 / 1024 : 0.0, "max_err"};
}

void register_checks(Registry& reg) {
  struct Cfg { std::uint32_t h, q, k, b; bool causal; std::int64_t off; AlibiSlopeRule rule; double max_bias; };
  const std::vector<Cfg> cfgs = {
      {8, 128, 128, 1, true, 0, AlibiSlopeRule::Interleaved, 8.0},      // decoder, power-of-two heads
      {12, 100, 100, 2, true, 0, AlibiSlopeRule::Interleaved, 8.0},     // interleaved slopes
      {6, 61, 59, 1, false, 0, AlibiSlopeRule::Geometric, 8.0},         // meliad, encoder
      {16, 1, 4096, 1, true, 4095, AlibiSlopeRule::Interleaved, 8.0},   // one decoding step, long cache
      {5, 37, 301, 2, true, 264, AlibiSlopeRule::Interleaved, 16.0},    // last-aligned, max_bias 16
      {3, 33, 35, 3, false, -2'000'000, AlibiSlopeRule::Geometric, 4.0}, // far offset
  };
  for (const auto& c : cfgs) {
    AlibiParams p;
    p.heads = c.h;
    p.queries = c.q;
    p.keys = c.k;
    p.batch = c.b;
    p.causal = c.causal;
    p.query_offset = c.off;
    p.rule = c.rule;
    p.max_bias = c.max_bias;
    for (DType dtype : {DType::F32, DType::F16}) {
      const std::string suffix = " " + std::string(dtype_name(dtype));
      const bool quick = &c == &cfgs.front();  // the alibi row; the expansions are T5's
      reg.checks.push_back({"alibi-bias", shape_of(p) + suffix, [p, dtype](Context& ctx) { return check_bias(ctx, p, dtype, false); }, quick});
      reg.checks.push_back({"alibi-bias-add", shape_of(p) + ",B=" + std::to_string(c.b) + suffix,
                            [p, dtype](Context& ctx) { return check_bias(ctx, p, dtype, true); }, quick});
    }
  }
}

// One random bias or add: any head count and slope rule, shapes up to long K, offsets up to the
// edge of the 32-bit relative positions (where far f16 biases overflow to -inf).
CheckCase draw_case(FuzzRng& g) {
  AlibiParams p;
  p.heads = g.size(1, 64);
  p.max_bias = g.pick({8.0, 16.0, 4.0, 0.5});
  p.rule = g.chance(0.5) ? AlibiSlopeRule::Interleaved : AlibiSlopeRule::Geometric;
  p.causal = g.chance(0.5);
  const std::uint64_t budget = g.max_elements();
  p.keys = g.size(1, std::min<std::uint64_t>(kFuzzMaxKeys, budget));
  p.queries = g.size(1, std::min<std::uint64_t>(4096, budget / p.keys));
  p.heads = std::min<std::uint32_t>(p.heads, static_cast<std::uint32_t>(std::max<std::uint64_t>(1, budget / (std::uint64_t{p.queries} * p.keys))));
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  p.query_offset = g.offset(std::int64_t{p.keys} - kMax, kMax - p.queries);
  const bool add = g.chance(0.5);
  const DType dtype = g.float_dtype();
  if (add) p.batch = g.size(1, std::min<std::uint64_t>(4, budget / (std::uint64_t{p.heads} * p.queries * p.keys)));
  return {add ? "alibi-bias-add" : "alibi-bias", shape_of(p) + (add ? ",B=" + std::to_string(p.batch) : "") + " " + std::string(dtype_name(dtype)),
          [p, dtype, add](Context& ctx) { return check_bias(ctx, p, dtype, add); }};
}

void register_benches(Registry& reg) {
  for (auto [h, q, k, dtype, in_short] : {std::tuple{16u, 2048u, 2048u, DType::F32, true}, {16u, 2048u, 2048u, DType::F16, false},
                                          {8u, 512u, 512u, DType::F32, false}}) {
    AlibiParams p;
    p.heads = h;
    p.queries = q;
    p.keys = k;
    const std::uint64_t bytes = std::uint64_t{h} * q * k * dtype_size(dtype);
    reg.benches.push_back({"alibi-bias", "[" + std::to_string(h) + "," + std::to_string(q) + "," + std::to_string(k) + "] " +
                                             std::string(dtype_name(dtype)),
                           bytes, Ceiling::Write, in_short, [p, bytes, dtype](Context& ctx) {
                             auto out = std::make_shared<Buffer>(ctx, bytes);
                             BenchRun run;
                             run.record = [p, out, dtype](Recorder& r) { alibi_bias(r, p, *out, dtype); };
                             run.cpu = [p] { (void)alibi_bias_reference(p); };
                             run.keep = out;
                             return run;
                           }});
  }
  AlibiParams p;
  p.heads = 8;
  p.batch = 2;
  p.queries = p.keys = 1024;
  const std::uint64_t n = 2ull * 8 * 1024 * 1024;
  reg.benches.push_back({"alibi-bias-add", "[2,8,1024,1024] f32", n * 4 * 2, Ceiling::Copy, false, [p, n](Context& ctx) {
                           struct State { std::vector<float> logits; Buffer l; };
                           auto s = std::make_shared<State>();
                           s->logits.assign(n, 0.5f);
                           s->l = make_buffer(ctx, s->logits);
                           BenchRun run;
                           run.record = [p, s](Recorder& r) { alibi_bias_add(r, p, s->l); };
                           run.cpu = [p, s] { alibi_bias_add_reference(p, s->logits); };
                           run.keep = s;
                           return run;
                         }});
}

void add_slope_options(CLI::App& cmd, AlibiParams& p, bool& no_interleave) {
  add_number(cmd, "--heads", p.heads, "number of heads H", 1u)->required();
  add_number(cmd, "--max-bias", p.max_bias, "slopes 2^(-max_bias * h / H) (default 8)");
  cmd.add_flag("--no-interleave", no_interleave, "meliad's rule for non-power-of-two H: 2^(-max_bias * h / H), no interleaving");
}

}  // namespace

void register_alibi(CLI::App& run, Registry& reg) {
  {
    auto p = std::make_shared<AlibiParams>();
    auto no_interleave = std::make_shared<bool>(false);
    auto o = std::make_shared<RunOptions>();
    auto* cmd = run.add_subcommand("alibi-slopes", "ALiBi slopes, float32 [H]");
    add_slope_options(*cmd, *p, *no_interleave);
    add_run_options(*cmd, *o);
    reg.runs.push_back({cmd, [=] {
                          p->rule = *no_interleave ? AlibiSlopeRule::Geometric : AlibiSlopeRule::Interleaved;
                          const std::vector<float> slopes = alibi_slopes(*p);  // host-side on every path
                          write_floats(o->out, slopes, {p->heads}, DType::F32);
                        }});
  }
  {
    auto p = std::make_shared<AlibiParams>();
    auto no_interleave = std::make_shared<bool>(false);
    auto o = std::make_shared<RunOptions>();
    auto slopes_path = std::make_shared<std::string>();
    auto dtype = std::make_shared<std::string>("f32");
    p->causal = false;
    auto* cmd = run.add_subcommand("alibi-bias", "ALiBi bias [H, Q, K]; masked entries -inf");
    add_slope_options(*cmd, *p, *no_interleave);
    add_number(*cmd, "--queries", p->queries, "number of queries Q", 1u)->required();
    add_number(*cmd, "--keys", p->keys, "number of keys K", 1u)->required();
    cmd->add_flag("--causal", p->causal, "decoder bias -m * (i_abs - j), -inf above the diagonal; default symmetric -m * |rp|");
    add_number(*cmd, "--query-offset", p->query_offset, "absolute position of query 0 (rp = j - i - offset)");
    cmd->add_option("--slopes", *slopes_path, "float [H] .npy of given slopes instead of the rule");
    cmd->add_option("--dtype", *dtype, "output dtype")->check(CLI::IsMember({"f32", "f16"}));
    add_run_options(*cmd, *o);
    reg.runs.push_back({cmd, [=] {
                          p->rule = *no_interleave ? AlibiSlopeRule::Geometric : AlibiSlopeRule::Interleaved;
                          if (!slopes_path->empty()) p->slopes = read_npy(*slopes_path).to_f32("--slopes " + *slopes_path);
                          const DType out_dtype = *dtype == "f16" ? DType::F16 : DType::F32;
                          const std::size_t n = std::size_t{p->heads} * p->queries * p->keys;
                          std::vector<float> out;
                          if (o->reference) {
                            out = alibi_bias_reference(*p);
                          } else {
                            Context& ctx = tool_context();
                            p->validate();
                            Buffer b(ctx, n * dtype_size(out_dtype));
                            Recorder r(ctx);
                            alibi_bias(r, *p, b, out_dtype);
                            r.submit_and_wait();
                            out = download_floats(b, n, out_dtype);
                          }
                          write_floats(o->out, out, {p->heads, p->queries, p->keys}, out_dtype);
                        }});
  }
  register_checks(reg);
  register_benches(reg);
  reg.fuzz.push_back({"alibi", draw_case});
}

}  // namespace relpos::tool

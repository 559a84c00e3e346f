// ALiBi in the tool: `run alibi-slopes`, and on the per-distance bias kit `run alibi-bias`, its check
// cases, fuzz draws and benchmarks.
#include <tuple>

#include "number_flags.hpp"
#include "distance_bias.hpp"

namespace relpos::tool {
namespace {

// The slope rule and max_bias of check case `index` (the kit's shapes).
void example_params(AlibiParams& p, std::size_t index) {
  static const std::pair<AlibiSlopeRule, double> rules[] = {
      {AlibiSlopeRule::Interleaved, 8.0},  // decoder, power-of-two heads
      {AlibiSlopeRule::Interleaved, 8.0},  // interleaved slopes (12 heads)
      {AlibiSlopeRule::Geometric, 8.0},    // meliad, encoder
      {AlibiSlopeRule::Interleaved, 8.0},  // one decoding step, long cache
      {AlibiSlopeRule::Interleaved, 16.0}, // last-aligned, max_bias 16
      {AlibiSlopeRule::Geometric, 4.0},    // far offset
  };
  std::tie(p.rule, p.max_bias) = rules[index % std::size(rules)];
}

void draw_params(AlibiParams& p, FuzzRng& g) {
  p.max_bias = g.pick({8.0, 16.0, 4.0, 0.5});
  p.rule = g.chance(0.5) ? AlibiSlopeRule::Interleaved : AlibiSlopeRule::Geometric;
}

std::string describe(const AlibiParams& p) {
  std::string s = p.rule == AlibiSlopeRule::Geometric ? "geometric" : "";
  if (p.max_bias != 8.0) s += std::string(s.empty() ? "" : ",") + "mb=" + std::to_string(static_cast<int>(p.max_bias));
  return s;
}

// Host bytes a head of the slope rule takes: alibi_slopes writes its float32 slopes in place.
constexpr std::uint64_t kSlopeRuleBytes = 4;

// Given slopes (--slopes): a float [H] file, one per head. An empty file is no request for the
// slope rule: it is refused like any other count.
std::vector<float> read_slopes(const std::string& path, std::uint32_t heads) {
  std::vector<std::uint64_t> shape;
  std::vector<float> slopes = read_floats("--slopes", path, 1, shape);
  if (shape[0] != heads)
    throw InvalidArgument("--slopes " + path + ": " + std::to_string(shape[0]) + " values: must hold one per head (H = " + std::to_string(heads) + ")");
  return slopes;
}

// Given slopes replace the rule: a rule flag beside them would be silently ignored.
void refuse_rule_flags(const std::string& path, const CLI::Option* max_bias, const CLI::Option* no_interleave) {
  for (const CLI::Option* o : {max_bias, no_interleave})
    if (o->count()) throw InvalidArgument(o->get_name() + ": not allowed with --slopes " + path + " (given slopes replace the slope rule)");
}

void add_slope_options(CLI::App& cmd, AlibiParams& p, bool& no_interleave) {
  add_number(cmd, "--heads", p.heads, "number of heads H", 1u)->required();
  add_number(cmd, "--max-bias", p.max_bias, "slopes 2^(-max_bias * h / H) (default 8)");
  cmd.add_flag("--no-interleave", no_interleave, "meliad's rule for non-power-of-two H: 2^(-max_bias * h / H), no interleaving");
}

// ALiBi in fused attention: `--bias alibi` with given slopes or those of `run alibi-slopes`.
AttentionBiasTool attention_alibi() {
  AttentionBiasTool t = attention_bias_tool(AttentionBias::Alibi);
  t.add_flags = [](CLI::App& cmd) {
    struct Flags {
      std::string slopes;
      double max_bias = 8.0;
      bool no_interleave = false;
    };
    auto f = std::make_shared<Flags>();
    cmd.add_option("--slopes", f->slopes, "alibi: float [H] .npy; bias -slope * |rp| (default: alibi_slopes of H)");
    auto* max_bias = add_number(cmd, "--max-bias", f->max_bias, "alibi without --slopes: slopes 2^(-max_bias * h / H) (default 8)");
    auto* no_interleave = cmd.add_flag("--no-interleave", f->no_interleave, "alibi without --slopes: meliad's rule for H not a power of two");
    return std::function<void(AttentionParams&, BiasInputs&)>([f, max_bias, no_interleave](AttentionParams& p, BiasInputs& in) {
      AlibiParams ap;
      ap.heads = p.heads;
      if (!f->slopes.empty()) {
        refuse_rule_flags(f->slopes, max_bias, no_interleave);
        ap.slopes = read_slopes(f->slopes, p.heads);
        ap.validate_slopes();  // the checks every given slope gets (finite)
      } else {  // the same slopes `relpos run alibi-slopes` writes
        ap.max_bias = f->max_bias;
        ap.rule = f->no_interleave ? AlibiSlopeRule::Geometric : AlibiSlopeRule::Interleaved;
      }
      in.bias = alibi_slopes(ap);
    });
  };
  // Slopes in [0, 0.5).
  t.random_input = [](const AttentionParams& p, const Fill& fill) { return BiasInputs{fill(p.bias_elements(), 0.0f, 0.5f), {}, {}}; };
  // The kernels score a row's keys relative to the bias of its nearest (the difference of two
  // float32 biases is exact, attention_bindings.glsl's alibi_near_bias; 0 beside memory keys) and
  // keep a split row's lse relative to it: a logit is rounded at the bias's span over the row.
  t.max_bias = [](const AttentionParams& p, const BiasInputs& in, double, const Distances& rp) {
    return max_abs(in.bias) * static_cast<double>(rp.far - (p.memory_prefix ? 0 : rp.near));
  };
  return t;
}

}  // namespace

RELPOS_TOOL_FAMILY(alibi) {
  reg.attention_biases.push_back(attention_alibi());
  {
    auto p = std::make_shared<AlibiParams>();
    auto no_interleave = std::make_shared<bool>(false);
    auto o = std::make_shared<RunOptions>();
    auto* cmd = run.add_subcommand("alibi-slopes", "ALiBi slopes, float32 [H]");
    add_slope_options(*cmd, *p, *no_interleave);
    add_run_options(*cmd, *o);
    reg.runs.push_back({cmd, [=] {
                          check_host_memory({{{{"--heads", p->heads}}, kSlopeRuleBytes}});
                          p->rule = *no_interleave ? AlibiSlopeRule::Geometric : AlibiSlopeRule::Interleaved;
                          const std::vector<float> slopes = alibi_slopes(*p);  // host-side on every path
                          write_floats(o->out, slopes, {p->heads}, DType::F32);
                        }});
  }
  DistanceBiasFamily<AlibiParams> f;
  f.name = "alibi";
  f.summary = "ALiBi bias [H, Q, K]: -m_h * |rp| (causal: -m_h * (i_abs - j)); masked entries -inf";
  f.add_flags = [](CLI::App& cmd) {
    struct Flags { double max_bias = 8.0; bool no_interleave = false; std::string slopes; };
    auto flags = std::make_shared<Flags>();
    auto* max_bias = add_number(cmd, "--max-bias", flags->max_bias, "slopes 2^(-max_bias * h / H) (default 8)");
    auto* no_interleave =
        cmd.add_flag("--no-interleave", flags->no_interleave, "meliad's rule for non-power-of-two H: 2^(-max_bias * h / H), no interleaving");
    cmd.add_option("--slopes", flags->slopes, "float [H] .npy of given slopes instead of the rule");
    return std::function<void(AlibiParams&)>([flags, max_bias, no_interleave](AlibiParams& p) {
      p.max_bias = flags->max_bias;
      p.rule = flags->no_interleave ? AlibiSlopeRule::Geometric : AlibiSlopeRule::Interleaved;
      if (!flags->slopes.empty()) {
        refuse_rule_flags(flags->slopes, max_bias, no_interleave);
        p.slopes = read_slopes(flags->slopes, p.heads);
      }
    });
  };
  f.host_bytes_per_head = kSlopeRuleBytes;  // the rule's slopes, made on the host on every path
  f.example = example_params;
  f.draw = draw_params;
  f.describe = describe;
  f.reference = [](const AlibiParams& p) { return alibi_bias_reference(p); };
  f.reference_add = [](const AlibiParams& p, std::span<float> logits) { alibi_bias_add_reference(p, logits); };
  f.bias = [](Recorder& r, const AlibiParams& p, const Buffer& out, DType dtype) { alibi_bias(r, p, out, dtype); };
  f.bias_add = [](Recorder& r, const AlibiParams& p, const Buffer& logits, DType dtype) { alibi_bias_add(r, p, logits, dtype); };
  f.f32_tolerance = [](const AlibiParams&) { return 0.0; };  // one float32 multiply (and add): exact
  f.bench_in_short = true;
  register_distance_bias(std::move(f), run, reg);
}

}  // namespace relpos::tool

// Sandwich in the tool, on the per-distance bias kit: `run sandwich-bias`, its check cases, fuzz
// draws and benchmarks; and `run attention --bias sandwich` with its cases.
#include <CLI/CLI.hpp>
#include <cmath>

#include "distance_bias.hpp"
#include "number_flags.hpp"

namespace relpos::tool {
namespace {

// d' of check case `index`: the smallest, odd quarter-counts, a model's head_dim, a long one.
std::uint32_t example_dim(std::size_t index) {
  static constexpr std::uint32_t dims[] = {64, 128, 2, 1024, 6, 256};
  return dims[index % std::size(dims)];
}

// The largest |bias| of a window is at least the largest |scale|·|S(rp)| of one rp in it: the one
// nearest 0, where S = Σ cos is largest (S(0) = d'/2).
double bias_floor(const SandwichParams& p) {
  const std::int64_t first = -(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset;
  const std::int64_t last = static_cast<std::int64_t>(p.keys) - 1 - p.query_offset;
  const std::int64_t nearest = std::clamp<std::int64_t>(0, first, p.causal ? std::min<std::int64_t>(last, 0) : last);
  double scale = 0.0;
  for (float s : p.scale) scale = std::max(scale, std::fabs(static_cast<double>(s)));
  return scale * std::fabs(sandwich_sum(p.dim, nearest, p.first_frequency));
}

// Normalised tolerance of a float32 result: the error bound of the largest scale, relative to the
// normaliser (at least that floor).
double f32_tolerance(const SandwichParams& p) {
  double bound = 0.0;
  for (float s : p.scale) bound = std::max(bound, sandwich_error_bound(s, p.dim));
  return bound / std::max(1.0, bias_floor(p));
}

void example_params(SandwichParams& p, std::size_t index) {
  p.dim = example_dim(index);
  p.first_frequency = index / 2 % 2;
  p.scale.resize(p.heads);
  for (std::uint32_t h = 0; h < p.heads; ++h) p.scale[h] = (h % 2 ? -1.0f : 1.0f) * 0.5f / static_cast<float>(h + 1);
}

void draw_params(SandwichParams& p, FuzzRng& g) {
  p.dim = 2 * g.size(1, 2048);
  p.first_frequency = g.chance(0.5) ? 1 : 0;
  p.scale.resize(p.heads);
  for (float& s : p.scale) s = static_cast<float>(g.real(-2.0, 2.0));
}

// --sandwich-dim (d'), --sandwich-first-frequency and the scales file.
struct SandwichFlags {
  std::uint32_t dim = 0, first_frequency = 0;
  std::string scale;
};

void add_first_frequency(CLI::App& cmd, std::uint32_t& to) {
  add_number(cmd, "--sandwich-first-frequency", to,
             "sandwich: 0 (default) sums the frequencies 10000^(-2k/d') of k = 0 .. d'/2-1, the sinusoidal embedding's; 1 those of "
             "k = 1 .. d'/2, the paper's sum and NeMo's");
}

std::vector<float> read_scale(const std::string& flag, const std::string& path, std::uint32_t heads) {
  std::vector<std::uint64_t> shape;
  std::vector<float> scale = read_floats(flag, path, 1, shape);
  if (shape[0] != heads) throw InvalidArgument(flag + " " + path + ": must hold one scale per head (" + std::to_string(heads) + "), got " + shape_text(shape));
  return scale;
}

AttentionBiasTool attention_sandwich() {
  AttentionBiasTool t = attention_bias_tool(AttentionBias::Sandwich);
  t.add_flags = [](CLI::App& cmd) {
    auto f = std::make_shared<SandwichFlags>();
    add_number(cmd, "--sandwich-dim", f->dim, "sandwich: d', the even dimension of the sinusoids");
    add_first_frequency(cmd, f->first_frequency);
    cmd.add_option("--sandwich-scale", f->scale, "sandwich: float [H] .npy, the scale of each head");
    return std::function<void(AttentionParams&, BiasInputs&)>([f](AttentionParams& p, BiasInputs& in) {
      p.sandwich_dim = f->dim;
      p.sandwich_first_frequency = f->first_frequency;
      in.bias = read_scale("--sandwich-scale", f->scale, p.heads);
    });
  };
  t.example = [](AttentionParams& p, std::size_t index) {
    p.sandwich_dim = example_dim(index);
    p.sandwich_first_frequency = index / 2 % 2;
  };
  t.draw = [](AttentionParams& p, FuzzRng& g) {
    p.sandwich_dim = 2 * g.size(1, 2048);
    p.sandwich_first_frequency = g.chance(0.5) ? 1 : 0;
  };
  t.random_input = [](const AttentionParams& p, const Fill& fill) { return BiasInputs{fill(p.heads, -0.5f, 0.5f), {}, {}}; };
  t.describe = [](const AttentionParams& p) { return ",d=" + std::to_string(p.sandwich_dim) + (p.sandwich_first_frequency ? ",k from 1" : ""); };
  t.max_bias = [](const AttentionParams& p, const BiasInputs& in, double, const Distances&) { return max_abs(in.bias) * (p.sandwich_dim / 2); };
  t.bias_error = [](const AttentionParams& p, const BiasInputs& in, const Distances&) {
    double e = 0.0;
    for (float s : in.bias) e = std::max(e, sandwich_error_bound(s, p.sandwich_dim));
    return e;
  };
  return t;
}

}  // namespace

RELPOS_TOOL_FAMILY(sandwich) {
  reg.attention_biases.push_back(attention_sandwich());
  DistanceBiasFamily<SandwichParams> f;
  f.name = "sandwich";
  f.summary = "Sandwich bias [H, Q, K]: scale[h] * sum_k cos(rp * 10000^(-2k/d')), k = f .. f + d'/2 - 1; masked entries -inf";
  f.add_flags = [](CLI::App& cmd) {
    auto flags = std::make_shared<SandwichFlags>();
    add_number(cmd, "--sandwich-dim", flags->dim, "d', the even dimension of the sinusoids")->required();
    add_first_frequency(cmd, flags->first_frequency);
    cmd.add_option("--scale", flags->scale, "float [H] .npy, the scale of each head")->required();
    return std::function<void(SandwichParams&)>([flags](SandwichParams& p) {
      p.dim = flags->dim;
      p.first_frequency = flags->first_frequency;
      p.scale = read_scale("--scale", flags->scale, p.heads);
    });
  };
  f.example = example_params;
  f.draw = draw_params;
  f.describe = [](const SandwichParams& p) { return "d=" + std::to_string(p.dim) + (p.first_frequency ? ",k from 1" : ""); };
  f.reference = [](const SandwichParams& p) { return sandwich_bias_reference(p); };
  f.reference_add = [](const SandwichParams& p, std::span<float> logits) { sandwich_bias_add_reference(p, logits); };
  f.bias = [](Recorder& r, const SandwichParams& p, const Buffer& out, DType dtype) { sandwich_bias(r, p, out, dtype); };
  f.bias_add = [](Recorder& r, const SandwichParams& p, const Buffer& logits, DType dtype) { sandwich_bias_add(r, p, logits, dtype); };
  f.f32_tolerance = f32_tolerance;
  register_distance_bias(std::move(f), run, reg);
}

}  // namespace relpos::tool

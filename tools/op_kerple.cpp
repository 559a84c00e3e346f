// KERPLE in the tool, on the per-distance bias kit: `run kerple-bias`, its check cases, fuzz draws
// and benchmarks; tools/kerple_flags.hpp reads --variant, --r1 and --r2 for `run attention` too.
#include <CLI/CLI.hpp>
#include "distance_bias.hpp"
#include "kerple_flags.hpp"

namespace relpos::tool {
namespace {

// Normalised tolerance of a float32 result: the error bound at the window's farthest distance
// (it grows with the distance), relative to the bias there, which is the largest.
double f32_tolerance(const KerpleParams& p) {
  const std::int64_t far = std::max(std::abs(-(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset),
                                    std::abs(static_cast<std::int64_t>(p.keys) - 1 - p.query_offset));
  double tol = 0.0;
  for (std::uint32_t h = 0; h < p.heads; ++h) {
    const double scale = std::max(1.0, std::fabs(static_cast<double>(kerple_bias_value(p.r1[h], p.r2[h], p.variant, far))));
    tol = std::max(tol, kerple_error_bound(p.r1[h], p.r2[h], p.variant, far) / scale);
  }
  return tol;
}

// Learned values span a few orders of magnitude (the paper's initialisation and trained models).
void draw_params(KerpleParams& p, FuzzRng& g) {
  p.variant = g.chance(0.5) ? KerpleVariant::Log : KerpleVariant::Power;
  p.r1.resize(p.heads);
  p.r2.resize(p.heads);
  for (std::uint32_t h = 0; h < p.heads; ++h) {
    p.r1[h] = static_cast<float>(std::exp2(g.real(-6.0, 4.0)));
    p.r2[h] = p.variant == KerpleVariant::Power ? static_cast<float>(g.real(0.0, 2.0)) : static_cast<float>(std::exp2(g.real(-10.0, 3.0)));
    if (p.r2[h] <= 0.0f) p.r2[h] = 2.0f;  // (0, 2]: the end the draw cannot reach
  }
}

void example_params(KerpleParams& p, std::size_t index) {
  p.variant = index % 2 ? KerpleVariant::Power : KerpleVariant::Log;
  p.r1.resize(p.heads);
  p.r2.resize(p.heads);
  for (std::uint32_t h = 0; h < p.heads; ++h) {
    p.r1[h] = 0.25f + 0.5f * static_cast<float>(h);
    p.r2[h] = p.variant == KerpleVariant::Power ? 2.0f * static_cast<float>(h + 1) / static_cast<float>(p.heads)
                                                : 0.01f * static_cast<float>(1u << (h % 12));
  }
}

// KERPLE in fused attention: `--bias kerple` with --variant, --r1 and --r2; the input is [r1; r2].
AttentionBiasTool attention_kerple() {
  AttentionBiasTool t = attention_bias_tool(AttentionBias::Kerple);
  t.add_flags = [](CLI::App& cmd) {
    auto flags = std::make_shared<KerpleFlags>();
    add_kerple_flags(cmd, *flags, "kerple: ");
    return std::function<void(AttentionParams&, BiasInputs&)>([flags](AttentionParams& p, BiasInputs& in) {
      KerpleParams kp;
      kp.heads = p.heads;
      apply_kerple_flags(*flags, kp);
      p.kerple_variant = kp.variant;
      in.bias = kp.r1;
      in.bias.insert(in.bias.end(), kp.r2.begin(), kp.r2.end());
    });
  };
  t.example = [](AttentionParams& p, std::size_t index) { p.kerple_variant = index % 2 ? KerpleVariant::Power : KerpleVariant::Log; };
  t.draw = [](AttentionParams& p, FuzzRng& g) { p.kerple_variant = g.chance(0.5) ? KerpleVariant::Log : KerpleVariant::Power; };
  // r1 and r2 in [0.01, 0.5) (both variants).
  t.random_input = [](const AttentionParams& p, const Fill& fill) { return BiasInputs{fill(p.bias_elements(), 0.01f, 0.5f), {}, {}}; };
  t.describe = [](const AttentionParams& p) { return std::string(p.kerple_variant == KerpleVariant::Power ? "-power" : "-log"); };
  // The bias is largest, and the GPU's float32 log or pow least accurate, at the farthest distance.
  t.max_bias = [](const AttentionParams& p, const BiasInputs& in, double, const Distances& rp) {
    double m = 0.0;
    for (std::uint32_t h = 0; h < p.heads; ++h)
      m = std::max(m, std::fabs(static_cast<double>(kerple_bias_value(in.bias[h], in.bias[p.heads + h], p.kerple_variant, rp.far))));
    return m;
  };
  t.bias_error = [](const AttentionParams& p, const BiasInputs& in, const Distances& rp) {
    double e = 0.0;
    for (std::uint32_t h = 0; h < p.heads; ++h) e = std::max(e, kerple_error_bound(in.bias[h], in.bias[p.heads + h], p.kerple_variant, rp.far));
    return e;
  };
  return t;
}

}  // namespace

RELPOS_TOOL_FAMILY(kerple) {
  reg.attention_biases.push_back(attention_kerple());
  DistanceBiasFamily<KerpleParams> f;
  f.name = "kerple";
  f.summary = "KERPLE bias [H, Q, K]: -r1 * log(1 + r2 * |rp|) or -r1 * |rp|^r2 per head; masked entries -inf";
  f.add_flags = [](CLI::App& cmd) {
    auto flags = std::make_shared<KerpleFlags>();
    add_kerple_flags(cmd, *flags, "");
    return std::function<void(KerpleParams&)>([flags](KerpleParams& p) { apply_kerple_flags(*flags, p); });
  };
  f.example = example_params;
  f.draw = draw_params;
  f.describe = [](const KerpleParams& p) { return std::string(p.variant == KerpleVariant::Power ? "power" : "log"); };
  f.reference = [](const KerpleParams& p) { return kerple_bias_reference(p); };
  f.reference_add = [](const KerpleParams& p, std::span<float> logits) { kerple_bias_add_reference(p, logits); };
  f.bias = [](Recorder& r, const KerpleParams& p, const Buffer& out, DType dtype) { kerple_bias(r, p, out, dtype); };
  f.bias_add = [](Recorder& r, const KerpleParams& p, const Buffer& logits, DType dtype) { kerple_bias_add(r, p, logits, dtype); };
  f.f32_tolerance = f32_tolerance;
  register_distance_bias(std::move(f), run, reg);
}

}  // namespace relpos::tool

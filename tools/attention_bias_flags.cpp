// The bias flags of fused attention (attention_bias_flags.hpp).
#include "attention_bias_flags.hpp"

#include <CLI/CLI.hpp>

#include "number_flags.hpp"
#include "registry.hpp"

namespace relpos::tool {

const std::map<std::string, AttentionBias>& attention_bias_names() {
  static const std::map<std::string, AttentionBias> names = {{"none", AttentionBias::None},   {"t5", AttentionBias::T5},
                                                             {"distance", AttentionBias::Distance}, {"alibi", AttentionBias::Alibi},
                                                             {"shaw", AttentionBias::Shaw},   {"dense", AttentionBias::Dense},
                                                             {"kerple", AttentionBias::Kerple}};
  return names;
}

std::string attention_bias_name(AttentionBias bias) {
  for (const auto& [name, v] : attention_bias_names())
    if (v == bias) return name;
  return "?";
}

void add_attention_bias_flags(CLI::App& cmd, AttentionBiasFlags& f, AttentionParams& p) {
  std::vector<std::string> names;
  for (const auto& [name, bias] : attention_bias_names()) names.push_back(name);
  cmd.add_option("--bias", f.bias, "position bias")->check(CLI::IsMember(names));
  cmd.add_option("--table", f.table, "t5: float [num_buckets, H] .npy");
  add_number(cmd, "--max-distance", p.t5.max_distance, "t5: distance from which all keys share the last bucket");
  add_number(cmd, "--num-buckets", p.t5.num_buckets, "t5: number of buckets (default: rows of the table)");
  cmd.add_flag("--causal-buckets", f.causal_buckets, "t5: decoder buckets (default bidirectional)");
  cmd.add_flag("--flax-eps", f.flax, "t5: flaxformer/t5x log convention");
  add_number(cmd, "--bias-scale", p.t5.scale, "t5: multiplies the table values (default 1)");
  cmd.add_option("--distance-row", f.distance_row, "distance: float [H, Q + K - 1] .npy, index rp + query_offset + Q - 1");
  cmd.add_option("--slopes", f.slopes, "alibi: float [H] .npy; bias -slope * |rp| (default: alibi_slopes of H)");
  add_number(cmd, "--max-bias", f.max_bias, "alibi without --slopes: slopes 2^(-max_bias * h / H) (default 8)");
  cmd.add_flag("--no-interleave", f.no_interleave, "alibi without --slopes: meliad's rule for H not a power of two");
  add_kerple_flags(cmd, f.kerple, "kerple: ");
  cmd.add_option("--rel-keys", f.rel_keys, "shaw: float [2k + 1, D] .npy");
  cmd.add_option("--rel-values", f.rel_values, "shaw: float [2k + 1, D] .npy");
  add_number(cmd, "--max-relative-position", p.max_relative_position, "shaw: k");
  cmd.add_option("--bias-tensor", f.bias_tensor, "dense: float [H, Q, K] .npy");
}

namespace {

std::vector<float> read_input(const std::string& flag, const std::string& path, std::size_t dims, std::vector<std::uint64_t>& shape) {
  if (path.empty()) throw InvalidArgument(flag + " is required for this --bias");
  const NpyArray a = read_npy(path);
  if (a.shape.size() != dims)
    throw InvalidArgument(flag + " " + path + ": must be " + std::to_string(dims) + "-D, got " + std::to_string(a.shape.size()) +
                          " dimension(s)");
  shape = a.shape;
  return a.to_f32(flag + " " + path);
}

}  // namespace

void attention_bias_settings(const AttentionBiasFlags& f, AttentionParams& p) {
  p.bias = attention_bias_names().at(f.bias);
  p.t5.bidirectional = !f.causal_buckets;
  p.t5.log = f.flax ? T5Log::FlaxEps : T5Log::HuggingFace;
  if (p.bias == AttentionBias::Kerple) p.kerple_variant = kerple_variant(f.kerple);
}

AttentionBiasInputs read_attention_bias(const AttentionBiasFlags& f, AttentionParams& p) {
  attention_bias_settings(f, p);
  AttentionBiasInputs in;
  std::vector<std::uint64_t> s;
  switch (p.bias) {
    case AttentionBias::T5:
      in.bias = read_input("--table", f.table, 2, s);
      if (!p.t5.num_buckets || s[0] != p.t5.num_buckets) p.t5.num_buckets = dimension32("--table rows", s[0]);
      break;
    case AttentionBias::Distance: in.bias = read_input("--distance-row", f.distance_row, 2, s); break;
    case AttentionBias::Alibi:
      if (!f.slopes.empty()) {
        in.bias = read_input("--slopes", f.slopes, 1, s);
        AlibiParams given;  // the checks every given slope gets (count, finite)
        given.heads = p.heads;
        given.slopes = in.bias;
        given.validate_slopes();
      } else {  // the same slopes `relpos run alibi-slopes` writes
        AlibiParams ap;
        ap.heads = p.heads;
        ap.max_bias = f.max_bias;
        ap.rule = f.no_interleave ? AlibiSlopeRule::Geometric : AlibiSlopeRule::Interleaved;
        in.bias = alibi_slopes(ap);
      }
      break;
    case AttentionBias::Dense: in.bias = read_input("--bias-tensor", f.bias_tensor, 3, s); break;
    case AttentionBias::Kerple: {
      KerpleParams kp;
      kp.heads = p.heads;
      apply_kerple_flags(f.kerple, kp);
      in.bias = kp.r1;
      in.bias.insert(in.bias.end(), kp.r2.begin(), kp.r2.end());
      break;
    }
    case AttentionBias::Shaw:
      in.rel_keys = read_input("--rel-keys", f.rel_keys, 2, s);
      in.rel_values = read_input("--rel-values", f.rel_values, 2, s);
      break;
    case AttentionBias::None: break;
  }
  return in;
}

}  // namespace relpos::tool

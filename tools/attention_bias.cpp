// The tool's bias family descriptions (attention_bias.hpp): defaults, lookup and `--bias` flags.
#include "attention_bias.hpp"

#include <CLI/CLI.hpp>
#include <cmath>

#include "registry.hpp"

namespace relpos::tool {

std::vector<float> read_floats(const std::string& flag, const std::string& path, std::size_t dims, std::vector<std::uint64_t>& shape) {
  if (path.empty()) throw InvalidArgument(flag + " is required for this --bias");
  const NpyArray a = read_npy(path);
  if (dims && a.shape.size() != dims)
    throw InvalidArgument(flag + " " + path + ": must be " + std::to_string(dims) + "-D, got " + std::to_string(a.shape.size()) +
                          " dimension(s)");
  shape = a.shape;
  if (a.descr == "<u2") {  // bfloat16 bit patterns (as `run attention --dtype bf16` writes them)
    std::vector<float> out(a.bytes.size() / 2);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(static_cast<std::uint16_t>(a.bytes[2 * i] | (a.bytes[2 * i + 1] << 8)));
    return out;
  }
  return a.to_f32(flag + " " + path);
}

double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x)
    if (std::isfinite(v)) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

AttentionBiasTool attention_bias_tool(AttentionBias bias) {
  AttentionBiasTool t;
  t.bias = bias;
  t.add_flags = [](CLI::App&) { return std::function<void(AttentionParams&, BiasInputs&)>([](AttentionParams&, BiasInputs&) {}); };
  t.example = [](AttentionParams&, std::size_t) {};
  t.draw = [](AttentionParams&, FuzzRng&) {};
  t.random_input = [](const AttentionParams& p, const Fill& fill) { return BiasInputs{fill(p.bias_elements(), -3.0f, 3.0f), {}, {}}; };
  t.describe = [](const AttentionParams&) { return std::string(); };
  t.max_bias = [](const AttentionParams&, const BiasInputs& in, double, const Distances&) { return max_abs(in.bias); };
  t.bias_error = [](const AttentionParams&, const BiasInputs&, const Distances&) { return 0.0; };
  return t;
}

const AttentionBiasTool& bias_tool(const Registry& reg, AttentionBias bias) {
  for (const AttentionBiasTool& t : reg.attention_biases)
    if (t.bias == bias) return t;
  throw Error("internal: the tool has no description of the bias family " + std::string(attention_bias_info(bias).name));
}

std::string bias_text(const Registry& reg, const AttentionParams& p) {
  return std::string(attention_bias_info(p.bias).name) + bias_tool(reg, p.bias).describe(p);
}

AttentionBiasFlags::AttentionBiasFlags(CLI::App& cmd, const Registry& reg) {
  std::vector<std::string> names;
  for (const AttentionBiasInfo& info : attention_biases()) {
    names.emplace_back(info.name);
    const std::size_t before = cmd.get_options().size();
    read_[info.bias] = bias_tool(reg, info.bias).add_flags(cmd);
    const std::vector<CLI::Option*> all = cmd.get_options();
    flags_[info.bias].assign(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
  }
  cmd.add_option("--bias", bias_, "position bias")->check(CLI::IsMember(names));
}

AttentionBias AttentionBiasFlags::chosen() const { return attention_bias_named(bias_).value(); }  // --bias checked the name

BiasInputs AttentionBiasFlags::read(AttentionParams& p) const {
  p.bias = chosen();
  // Another family's flag would be ignored: refused, as the library refuses an input its mode does
  // not read (a --max-bias with --bias t5 is most likely a --bias left out).
  for (const auto& [bias, options] : flags_)
    for (const CLI::Option* o : options)
      if (bias != p.bias && o->count() > 0)
        throw InvalidArgument(o->get_name() + ": not read by --bias " + bias_ + " (it is --bias " + std::string(attention_bias_info(bias).name) + "'s)");
  BiasInputs in;
  read_.at(p.bias)(p, in);
  return in;
}

}  // namespace relpos::tool

#pragma once
// RoPE's frequency-scaling flags (HuggingFace's rope_scaling), shared by `run rope` and
// `run kv-append --rope`: --scaling none|linear|ntk|yarn|llama3 and its parameters.
#include <CLI/CLI.hpp>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "number_flags.hpp"
#include "relpos/relpos.hpp"

namespace relpos::tool {

struct RopeScalingFlags {
  std::string type = "none";
  bool no_truncate = false;
  // Each parameter's flag and the scalings that read it: one given with another scaling would be
  // silently ignored.
  std::vector<std::pair<const CLI::Option*, std::set<std::string>>> parameters;
  const CLI::Option* scaling = nullptr;
  const CLI::Option* factor = nullptr;
  const CLI::Option* original_max_position = nullptr;  // llama3's default 8192 where not given

  // The scaling flags given (--scaling included), by name: "" for none.
  std::string given() const {
    std::string names = scaling && scaling->count() ? scaling->get_name() : "";
    for (const auto& [o, types] : parameters)
      if (o->count()) names += (names.empty() ? "" : ", ") + o->get_name();
    return names;
  }
};

inline void add_rope_scaling_flags(CLI::App& cmd, RopeScalingFlags& f, RopeScalingParams& s) {
  f.scaling = cmd.add_option("--scaling", f.type, "frequency scaling (HuggingFace rope_scaling type)")->check(CLI::IsMember({"none", "linear", "ntk", "yarn", "llama3"}));
  auto param = [&f](const CLI::Option* o, std::set<std::string> types) { f.parameters.emplace_back(o, std::move(types)); };
  auto* factor = add_number(cmd, "--factor", s.factor, "scaling factor (>= 1; required by every scaling but none)");
  f.factor = factor;
  param(factor, {"linear", "ntk", "yarn", "llama3"});
  f.original_max_position = add_number(cmd, "--original-max-position", s.original_max_position,
                                       "ntk: max_position_embeddings; yarn, llama3: original_max_position_embeddings (llama3 default 8192)");
  param(f.original_max_position, {"ntk", "yarn", "llama3"});
  param(add_number(cmd, "--seq-len", s.seq_len, "ntk: current sequence length (default: last position + 1; required with --positions)"), {"ntk"});
  param(add_number(cmd, "--beta-fast", s.beta_fast, "yarn (default 32)"), {"yarn"});
  param(add_number(cmd, "--beta-slow", s.beta_slow, "yarn (default 1)"), {"yarn"});
  param(cmd.add_flag("--no-truncate", f.no_truncate, "yarn: do not floor/ceil the correction range"), {"yarn"});
  param(add_number(cmd, "--attention-factor", s.attention_factor, "yarn: cos/sin multiplier (default 0.1 ln(factor) + 1)"), {"yarn"});
  param(add_number(cmd, "--mscale", s.mscale, "yarn (DeepSeek): with --mscale-all-dim, attention factor from their ratio"), {"yarn"});
  param(add_number(cmd, "--mscale-all-dim", s.mscale_all_dim, "yarn (DeepSeek)"), {"yarn"});
  param(add_number(cmd, "--low-freq-factor", s.low_freq_factor, "llama3 (default 1)"), {"llama3"});
  param(add_number(cmd, "--high-freq-factor", s.high_freq_factor, "llama3 (default 4)"), {"llama3"});
}

// The scaling's type and its defaults, from the flags (its numbers were parsed into s already).
// A parameter given with a scaling that does not read it, and a scaling without its factor (which
// HuggingFace's rope_scaling requires of every type but none), are refused.
inline void apply_rope_scaling_flags(const RopeScalingFlags& f, RopeScalingParams& s) {
  static const std::map<std::string, RopeScaling> types = {{"none", RopeScaling::None}, {"linear", RopeScaling::Linear},
                                                          {"ntk", RopeScaling::DynamicNtk}, {"yarn", RopeScaling::Yarn},
                                                          {"llama3", RopeScaling::Llama3}};
  std::string ignored;
  for (const auto& [o, readers] : f.parameters)
    if (o->count() && !readers.count(f.type)) {
      std::string who;
      for (const std::string& t : readers) who += (who.empty() ? "" : ", ") + t;
      ignored += (ignored.empty() ? "" : "; ") + o->get_name() + ": not used by --scaling " + f.type + " (only by " + who + ")";
    }
  if (!ignored.empty()) throw InvalidArgument(ignored);
  if (f.type != "none" && !f.factor->count())
    throw InvalidArgument("--scaling " + f.type + ": needs --factor (HuggingFace's rope_scaling requires factor with every type but none)");
  s.type = types.at(f.type);
  s.truncate = !f.no_truncate;
  // Defaults where the flag is absent: a 0 given stays 0, which validate() refuses.
  if (s.type == RopeScaling::Llama3 && !f.original_max_position->count()) s.original_max_position = 8192;
}

}  // namespace relpos::tool

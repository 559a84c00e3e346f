#pragma once
// RoPE's frequency-scaling flags (HuggingFace's rope_scaling), shared by `run rope` and
// `run kv-append --rope`: --scaling none|linear|ntk|yarn|llama3 and its parameters.
#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "number_flags.hpp"
#include "relpos/relpos.hpp"

namespace relpos::tool {

struct RopeScalingFlags {
  std::string type = "none";
  bool no_truncate = false;
};

inline void add_rope_scaling_flags(CLI::App& cmd, RopeScalingFlags& f, RopeScalingParams& s) {
  cmd.add_option("--scaling", f.type, "frequency scaling (HuggingFace rope_scaling type)")->check(CLI::IsMember({"none", "linear", "ntk", "yarn", "llama3"}));
  add_number(cmd, "--factor", s.factor, "scaling factor (>= 1)");
  add_number(cmd, "--original-max-position", s.original_max_position,
             "ntk: max_position_embeddings; yarn, llama3: original_max_position_embeddings (llama3 default 8192)");
  add_number(cmd, "--seq-len", s.seq_len, "ntk: current sequence length (default: last position + 1; required with --positions)");
  add_number(cmd, "--beta-fast", s.beta_fast, "yarn (default 32)");
  add_number(cmd, "--beta-slow", s.beta_slow, "yarn (default 1)");
  cmd.add_flag("--no-truncate", f.no_truncate, "yarn: do not floor/ceil the correction range");
  add_number(cmd, "--attention-factor", s.attention_factor, "yarn: cos/sin multiplier (default 0.1 ln(factor) + 1)");
  add_number(cmd, "--mscale", s.mscale, "yarn (DeepSeek): with --mscale-all-dim, attention factor from their ratio");
  add_number(cmd, "--mscale-all-dim", s.mscale_all_dim, "yarn (DeepSeek)");
  add_number(cmd, "--low-freq-factor", s.low_freq_factor, "llama3 (default 1)");
  add_number(cmd, "--high-freq-factor", s.high_freq_factor, "llama3 (default 4)");
}

// The scaling's type and its defaults, from the flags (its numbers were parsed into s already).
inline void apply_rope_scaling_flags(const RopeScalingFlags& f, RopeScalingParams& s) {
  static const std::map<std::string, RopeScaling> types = {{"none", RopeScaling::None}, {"linear", RopeScaling::Linear},
                                                          {"ntk", RopeScaling::DynamicNtk}, {"yarn", RopeScaling::Yarn},
                                                          {"llama3", RopeScaling::Llama3}};
  s.type = types.at(f.type);
  s.truncate = !f.no_truncate;
  if (s.type == RopeScaling::Llama3 && s.original_max_position == 0) s.original_max_position = 8192;
  if (s.type == RopeScaling::Linear && s.original_max_position == 0) s.original_max_position = 1;
}

}  // namespace relpos::tool

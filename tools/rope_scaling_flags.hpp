#pragma once
// RoPE's frequency-scaling flags (HuggingFace's rope_scaling), shared by `run rope` and
// `run kv-append --rope`: --scaling none|linear|ntk|yarn|llama3|longrope and its parameters.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fuzz.hpp"
#include "number_flags.hpp"
#include "relpos/relpos.hpp"

namespace relpos::tool {

struct RopeScalingFlags {
  std::string type = "none";
  bool no_truncate = false;
  std::string long_factor_path, short_factor_path;  // longrope's factors, float .npy of rotary_dim / 2 values
  // Each parameter's flag and the scalings that read it: one given with another scaling would be
  // silently ignored.
  std::vector<std::pair<const CLI::Option*, std::set<std::string>>> parameters;
  const CLI::Option* scaling = nullptr;
  const CLI::Option* factor = nullptr;
  const CLI::Option* original_max_position = nullptr;  // llama3's default 8192 where not given
  const CLI::Option* long_factor = nullptr;
  const CLI::Option* short_factor = nullptr;
  const CLI::Option* seq_len = nullptr;
  const CLI::Option* attention_factor = nullptr;

  // The scaling flags given (--scaling included), by name: "" for none.
  std::string given() const {
    std::string names = scaling && scaling->count() ? scaling->get_name() : "";
    for (const auto& [o, types] : parameters)
      if (o->count()) names += (names.empty() ? "" : ", ") + o->get_name();
    return names;
  }
};

inline void add_rope_scaling_flags(CLI::App& cmd, RopeScalingFlags& f, RopeScalingParams& s) {
  f.scaling = cmd.add_option("--scaling", f.type, "frequency scaling (HuggingFace rope_scaling type)")->check(CLI::IsMember({"none", "linear", "ntk", "yarn", "llama3", "longrope"}));
  auto param = [&f](const CLI::Option* o, std::set<std::string> types) { f.parameters.emplace_back(o, std::move(types)); };
  auto* factor = add_number(cmd, "--factor", s.factor,
                            "scaling factor (>= 1; required by every scaling but none; longrope: max_position_embeddings / "
                            "original_max_position_embeddings, not needed with --attention-factor)");
  f.factor = factor;
  param(factor, {"linear", "ntk", "yarn", "llama3", "longrope"});
  f.original_max_position = add_number(cmd, "--original-max-position", s.original_max_position,
                                       "ntk: max_position_embeddings; yarn, llama3, longrope: original_max_position_embeddings "
                                       "(llama3 default 8192)");
  param(f.original_max_position, {"ntk", "yarn", "llama3", "longrope"});
  f.seq_len = add_number(cmd, "--seq-len", s.seq_len,
                         "ntk, longrope: the current sequence length (default: the last position + 1, of --position-offset "
                         "and the tokens, of --positions, or of the appended keys: HuggingFace's max(position_ids) + 1)");
  param(f.seq_len, {"ntk", "longrope"});
  param(add_number(cmd, "--beta-fast", s.beta_fast, "yarn (default 32)"), {"yarn"});
  param(add_number(cmd, "--beta-slow", s.beta_slow, "yarn (default 1)"), {"yarn"});
  param(cmd.add_flag("--no-truncate", f.no_truncate, "yarn: do not floor/ceil the correction range"), {"yarn"});
  f.attention_factor = add_number(cmd, "--attention-factor", s.attention_factor,
                                  "yarn, longrope: cos/sin multiplier (default yarn 0.1 ln(factor) + 1, longrope sqrt(1 + ln(factor) / "
                                  "ln(original_max_position)))");
  param(f.attention_factor, {"yarn", "longrope"});
  param(add_number(cmd, "--mscale", s.mscale, "yarn (DeepSeek): with --mscale-all-dim, attention factor from their ratio"), {"yarn"});
  param(add_number(cmd, "--mscale-all-dim", s.mscale_all_dim, "yarn (DeepSeek)"), {"yarn"});
  param(add_number(cmd, "--low-freq-factor", s.low_freq_factor, "llama3 (default 1)"), {"llama3"});
  param(add_number(cmd, "--high-freq-factor", s.high_freq_factor, "llama3 (default 4)"), {"llama3"});
  f.long_factor = cmd.add_option("--long-factor", f.long_factor_path,
                                 "longrope: long_factor, a float .npy of rotary_dim / 2 values (past --original-max-position)");
  param(f.long_factor, {"longrope"});
  f.short_factor = cmd.add_option("--short-factor", f.short_factor_path, "longrope: short_factor, a float .npy of rotary_dim / 2 values");
  param(f.short_factor, {"longrope"});
}

// The scaling's type and its defaults, from the flags (its numbers were parsed into s already).
// A parameter given with a scaling that does not read it, and a scaling without its factor (which
// HuggingFace's rope_scaling requires of every type but none), are refused.
inline void apply_rope_scaling_flags(const RopeScalingFlags& f, RopeScalingParams& s) {
  static const std::map<std::string, RopeScaling> types = {{"none", RopeScaling::None}, {"linear", RopeScaling::Linear},
                                                          {"ntk", RopeScaling::DynamicNtk}, {"yarn", RopeScaling::Yarn},
                                                          {"llama3", RopeScaling::Llama3}, {"longrope", RopeScaling::LongRope}};
  std::string ignored;
  for (const auto& [o, readers] : f.parameters)
    if (o->count() && !readers.count(f.type)) {
      std::string who;
      for (const std::string& t : readers) who += (who.empty() ? "" : ", ") + t;
      ignored += (ignored.empty() ? "" : "; ") + o->get_name() + ": not used by --scaling " + f.type + " (only by " + who + ")";
    }
  if (!ignored.empty()) throw InvalidArgument(ignored);
  // LongRoPE reads its factor only for the default attention factor (HuggingFace's is optional).
  const bool factor_unread = f.type == "longrope" && f.attention_factor->count();
  if (f.type != "none" && !f.factor->count() && !factor_unread)
    throw InvalidArgument("--scaling " + f.type + ": needs --factor (HuggingFace's rope_scaling requires factor with every type but none" +
                          (f.type == "longrope" ? std::string(", longrope's unless --attention-factor is given)") : std::string(")")));
  s.type = types.at(f.type);
  s.truncate = !f.no_truncate;
  // Defaults where the flag is absent: a 0 given stays 0, which validate() refuses.
  if (s.type == RopeScaling::Llama3 && !f.original_max_position->count()) s.original_max_position = 8192;
  if (s.type == RopeScaling::LongRope) {
    if (!f.long_factor->count() || !f.short_factor->count() || !f.original_max_position->count())
      throw InvalidArgument("--scaling longrope: needs --long-factor, --short-factor and --original-max-position (HuggingFace's "
                            "long_factor, short_factor and original_max_position_embeddings)");
    auto factors = [](const std::string& flag, const std::string& path) {
      const NpyArray a = read_npy(path);
      if (a.shape.size() != 1) throw InvalidArgument(flag + " " + path + ": must be 1-D [rotary_dim / 2], got " + std::to_string(a.shape.size()) + " dimensions");
      return a.to_f32(flag + " " + path);
    };
    s.long_factor = factors("--long-factor", f.long_factor_path);
    s.short_factor = factors("--short-factor", f.short_factor_path);
  }
}

// --seq-len's default where the tool holds the positions (--positions, the appended keys'):
// HuggingFace's max(position_ids) + 1. Without a position buffer the library takes position_offset
// + seq itself.
inline void default_seq_len(const RopeScalingFlags& f, RopeScalingParams& s, std::int64_t last_position) {
  if (f.seq_len->count() || !(s.type == RopeScaling::DynamicNtk || s.type == RopeScaling::LongRope)) return;
  s.seq_len = static_cast<std::uint64_t>(std::max<std::int64_t>(1, last_position + 1));
}

// A random scaling of every type for the fuzzers of `rope` and `kv-append`: the length-dependent
// ones (dynamic NTK, LongRoPE) given their seq_len where positions come from a buffer.
inline void draw_rope_scaling(FuzzRng& g, RopeScalingParams& s, std::uint32_t rot_dim, bool positions_from_buffer) {
  s.type = static_cast<RopeScaling>(g.below(6));
  if (s.type == RopeScaling::DynamicNtk && rot_dim < 4) s.type = RopeScaling::Linear;
  s.factor = g.real(1.0, 16.0);
  s.original_max_position = g.size(s.type == RopeScaling::LongRope ? 2 : 1, 32768);
  const bool by_length = s.type == RopeScaling::DynamicNtk || s.type == RopeScaling::LongRope;
  if (by_length && positions_from_buffer) s.seq_len = g.size(1, 1u << 24);
  if (s.type == RopeScaling::LongRope)
    for (std::uint32_t p = 0; p < rot_dim / 2; ++p) {
      s.long_factor.push_back(static_cast<float>(g.real(1.0, 64.0)));
      s.short_factor.push_back(static_cast<float>(g.real(0.9, 4.0)));
    }
}

}  // namespace relpos::tool

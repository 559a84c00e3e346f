#pragma once
// The KERPLE flags, shared by `run kerple-bias` and `run attention --bias kerple`:
// --variant log|power, --r1 R1.npy, --r2 R2.npy (float [H] each).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "registry.hpp"

namespace relpos::tool {

struct KerpleFlags {
  std::string variant = "log", r1, r2;
};

// `what` prefixes the help texts (e.g. "kerple: ").
inline void add_kerple_flags(CLI::App& cmd, KerpleFlags& f, const std::string& what) {
  cmd.add_option("--variant", f.variant, what + "log: -r1 * log(1 + r2 * |rp|) (default); power: -r1 * |rp|^r2")
      ->check(CLI::IsMember({"log", "power"}));
  cmd.add_option("--r1", f.r1, what + "float [H] .npy, r1 > 0 per head");
  cmd.add_option("--r2", f.r2, what + "float [H] .npy, r2 > 0 per head (<= 2 for power)");
}

// Reads the files into p.r1, p.r2 and sets p.variant (p.heads already set); checks their shape.
inline void apply_kerple_flags(const KerpleFlags& f, KerpleParams& p) {
  p.variant = f.variant == "power" ? KerpleVariant::Power : KerpleVariant::Log;
  for (auto [flag, path, values] : {std::tuple{"--r1", &f.r1, &p.r1}, {"--r2", &f.r2, &p.r2}}) {
    if (path->empty()) throw InvalidArgument(std::string(flag) + " is required for KERPLE");
    const NpyArray a = read_npy(*path);
    if (a.shape.size() != 1)
      throw InvalidArgument(std::string(flag) + " " + *path + ": must be 1-D [H], got " + std::to_string(a.shape.size()) + " dimension(s)");
    *values = a.to_f32(std::string(flag) + " " + *path);
  }
  p.validate_kernel();
}

}  // namespace relpos::tool

#pragma once
// What the tool knows of each bias family of fused attention beyond the library's registry
// (relpos::attention_biases()): its flags for `run attention` (and every command that takes a
// bias the same way), the family's parameters and inputs in check, fuzz, bench and stats cases,
// and how large its bias can be for the cases' tolerances. Each family registers one
// (tools/op_<family>.cpp; op_attention.cpp for none, distance rows and dense), and the attention
// commands enumerate them.
#include <relpos/relpos.hpp>

#include "cli_fwd.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace relpos::tool {

class FuzzRng;
struct Registry;

// The host inputs of a bias family: the bias buffer's values (AttentionBuffers::bias), or the
// rel_keys and rel_values tables of a family with rel_tables.
struct BiasInputs {
  std::vector<float> bias, rel_keys, rel_values;
};

// n random values in [lo, hi), as a case's storage holds them.
using Fill = std::function<std::vector<float>(std::size_t n, float lo, float hi)>;

// The smallest and largest |rp| over a case's queries and local keys.
struct Distances {
  std::int64_t near = 0, far = 0;
};

struct AttentionBiasTool {
  AttentionBias bias = AttentionBias::None;
  // Adds the family's flags to a command; the returned function reads their values (files
  // included) into p's family fields and `in`, once p's shape is known.
  std::function<std::function<void(AttentionParams& p, BiasInputs& in)>(CLI::App& cmd)> add_flags;
  // The family's fields of p: fixed ones for check case `index` (0 also for benchmarks and stats),
  // and random ones (after the fuzz case's queries and keys are drawn).
  std::function<void(AttentionParams& p, std::size_t index)> example;
  std::function<void(AttentionParams& p, FuzzRng& g)> draw;
  // A valid random input for p.
  std::function<BiasInputs(const AttentionParams& p, const Fill& fill)> random_input;
  // The family's part of a case's shape text (after its name; "" for none).
  std::function<std::string(const AttentionParams& p)> describe;
  // The largest |bias| a logit can hold as the kernels compute it, `qk` the largest |s·q·k| and
  // `rp` the nearest and farthest distances of the case; and the error bound of the bias the GPU
  // computes there (0: exact).
  std::function<double(const AttentionParams& p, const BiasInputs& in, double qk, const Distances& rp)> max_bias;
  std::function<double(const AttentionParams& p, const BiasInputs& in, const Distances& rp)> bias_error;
};

// A family's description with the defaults: no flags or fields of its own, inputs drawn in
// [-3, 3) (bias_elements of them), its bias as large as its largest input, exact.
AttentionBiasTool attention_bias_tool(AttentionBias bias);

// The family's description; Error for a family the tool has none of.
const AttentionBiasTool& bias_tool(const Registry& reg, AttentionBias bias);
// A case's shape text of p's family: its name and describe() ("kerple-power", "shaw,k=16").
std::string bias_text(const Registry& reg, const AttentionParams& p);

// `--bias NAME` (every family of the registry) and every family's flags, on one command.
class AttentionBiasFlags {
 public:
  AttentionBiasFlags(CLI::App& cmd, const Registry& reg);
  // Sets p.bias to the chosen family and reads its flags into p and the inputs it returns; p's
  // shape (heads, queries, keys, head_dim) must be set.
  BiasInputs read(AttentionParams& p) const;
  // The chosen family, without reading anything (a rank that gets its inputs from another).
  AttentionBias chosen() const;

 private:
  std::string bias_ = "none";
  std::map<AttentionBias, std::function<void(AttentionParams&, BiasInputs&)>> read_;
  std::map<AttentionBias, std::vector<CLI::Option*>> flags_;  // each family's own flags
};

// An .npy file of `dims` dimensions (0: any) as float32, its shape in `shape`; InvalidArgument
// naming the flag when the path is empty or the rank differs.
// float32 or float16 values, or uint16 bfloat16 bit patterns.
std::vector<float> read_floats(const std::string& flag, const std::string& path, std::size_t dims, std::vector<std::uint64_t>& shape);
double max_abs(const std::vector<float>& x);

}  // namespace relpos::tool

#pragma once
// The bias of fused attention on the command line, one definition for `run attention` and `run
// ring-attention`: the mode names, --bias and each mode's inputs and settings.
#include <map>
#include <string>
#include <vector>

#include <relpos/attention.hpp>

#include "cli_fwd.hpp"
#include "kerple_flags.hpp"

namespace relpos::tool {

// --bias NAME: the modes by name.
const std::map<std::string, AttentionBias>& attention_bias_names();
std::string attention_bias_name(AttentionBias bias);

struct AttentionBiasFlags {
  std::string bias = "none", table, distance_row, slopes, rel_keys, rel_values, bias_tensor;
  bool causal_buckets = false, flax = false, no_interleave = false;
  double max_bias = 8.0;
  KerpleFlags kerple;
};

// --bias and the inputs and settings of every mode; T5's and Shaw's numbers go straight into `p`.
void add_attention_bias_flags(CLI::App& cmd, AttentionBiasFlags& f, AttentionParams& p);

// The bias input (floats as AttentionBuffers::bias takes them) and Shaw's tables.
struct AttentionBiasInputs {
  std::vector<float> bias, rel_keys, rel_values;
};
// Sets p.bias and the settings the flags give without reading a file (T5 direction and log
// convention, the KERPLE variant).
void attention_bias_settings(const AttentionBiasFlags& f, AttentionParams& p);
// The same, then reads the inputs (T5's buckets from the table's rows), checking what is known
// before the shape (p.heads must be set): a wrong dimension count or slope names the flag.
AttentionBiasInputs read_attention_bias(const AttentionBiasFlags& f, AttentionParams& p);

}  // namespace relpos::tool

#pragma once
// Random inputs of fused attention: q, k and v rounded as their dtype stores them, the bias input
// of the mode (ALiBi's slopes and KERPLE's r1, r2 positive) and Shaw's tables.
#include <relpos/relpos.hpp>

#include <random>
#include <vector>

#include "support/test_data.hpp"

namespace relpos::test {

struct AttentionInputs {
  std::vector<float> q, k, v, bias, rel_keys, rel_values;
};

// k and v hold `kv_values` each (contiguous [B, Hkv, K, D], or a paged cache).
inline AttentionInputs random_attention_inputs(std::mt19937& rng, const AttentionParams& p, std::size_t kv_values) {
  AttentionInputs in;
  const std::size_t D = p.head_dim;
  in.q = rounded_to_storage(random_floats(rng, p.rows() * D), p.dtype);
  in.k = rounded_to_storage(random_floats(rng, kv_values), p.dtype);
  in.v = rounded_to_storage(random_floats(rng, kv_values), p.dtype);
  if (p.bias == AttentionBias::Alibi) in.bias = random_floats(rng, p.heads, 0.0f, 1.0f);
  else if (p.bias == AttentionBias::Kerple) in.bias = random_floats(rng, p.bias_elements(), 0.01f, 0.5f);
  else in.bias = random_floats(rng, p.bias_elements(), -3.0f, 3.0f);
  if (p.bias == AttentionBias::Shaw) {
    in.rel_keys = random_floats(rng, (2 * p.max_relative_position + 1) * D);
    in.rel_values = random_floats(rng, (2 * p.max_relative_position + 1) * D);
  }
  return in;
}

}  // namespace relpos::test

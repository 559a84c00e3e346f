#pragma once
// KERPLE (Chi et al., 2022, "Kernelized Relative Positional Embedding for Length Extrapolation"):
// a per-head bias of the distance |rp| from two learned parameters, in a log or a power variant.
// The materialised [heads, Q, K] bias and its in-place addition into [B, H, Q, K] logits; fused
// attention takes it as AttentionBias::Kerple. CPU reference and GPU operations share KerpleParams.
#include <cstdint>
#include <span>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Recorder;

enum class KerpleVariant : std::uint32_t {
  Log = 0,    // -r1 * log(1 + r2 * |rp|), r1 > 0, r2 > 0
  Power = 1,  // -r1 * |rp|^r2, r1 > 0, 0 < r2 <= 2
};

struct KerpleParams {
  std::uint32_t heads = 1;
  KerpleVariant variant = KerpleVariant::Log;
  std::vector<float> r1;  // [heads], each > 0 and finite
  std::vector<float> r2;  // [heads], each > 0 and finite (<= 2 for the power variant)

  // Causal (decoder): -inf for rp > 0. Symmetric (encoder): the bias of |rp| everywhere.
  bool causal = false;
  std::uint32_t queries = 1;
  std::uint32_t keys = 1;
  // Query i sits at absolute position i + query_offset; rp = j - (i + query_offset).
  std::int64_t query_offset = 0;
  std::uint32_t batch = 1;  // leading dimension of the logits (in-place add)

  // The kernel's parameters only (heads, variant, r1, r2): what fused attention needs.
  void validate_kernel() const;
  // Everything: parameters, shapes, offsets and element counts the operations index.
  void validate() const;
};

// ---- CPU reference ------------------------------------------------------------------------

// The bias of relative position rp for one head, in float64 from the float32 parameters, rounded
// once to float32 (no mask: the causal -inf is the caller's).
float kerple_bias_value(float r1, float r2, KerpleVariant variant, std::int64_t rp);
// float32 [heads, queries, keys].
std::vector<float> kerple_bias_reference(const KerpleParams& p);
// logits [batch, heads, queries, keys] += bias, in place (one float32 add per value).
void kerple_bias_add_reference(const KerpleParams& p, std::span<float> logits);

// Absolute error bound of a float32 GPU bias value of this head against kerple_bias_value: the
// GPU evaluates log and pow in float32 (docs/kerple.md derives it).
double kerple_error_bound(float r1, float r2, KerpleVariant variant, std::int64_t rp);

// ---- GPU operations -----------------------------------------------------------------------
// Record into `r`; nothing runs until it is submitted. Parameters and buffer sizes are checked
// first (InvalidArgument). Output sizes: bias H*Q*K elements of out_dtype (F32 or F16); logits
// B*H*Q*K elements of logits_dtype (F32 or F16).

void kerple_bias(Recorder& r, const KerpleParams& p, const Buffer& out, DType out_dtype = DType::F32);
void kerple_bias_add(Recorder& r, const KerpleParams& p, const Buffer& logits, DType logits_dtype = DType::F32);

}  // namespace relpos

#pragma once
// Sandwich (Chi et al., 2023, "Dissecting Transformer Length Extrapolation via the Lens of
// Receptive Field Analysis"; docs/sandwich.md): the inner product of two sinusoidal position
// embeddings of dimension d' is Σ_k cos(rp·ω_k), a bias of the relative position alone, scaled per
// head. The materialised [heads, Q, K] bias and its in-place addition into [B, H, Q, K] logits;
// fused attention takes it as AttentionBias::Sandwich. CPU reference and GPU operations share
// SandwichParams.
#include <cstdint>
#include <span>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Recorder;

struct SandwichParams {
  std::uint32_t heads = 1;
  // d': the sinusoids' dimension, even, in [2, kMaxDim]; d'/2 frequencies ω_k = 10000^(-2k/d'),
  // k = first_frequency ... first_frequency + d'/2 - 1.
  std::uint32_t dim = 0;
  // 0: k = 0 ... d'/2 - 1, the sinusoidal embedding's frequencies (Vaswani et al.). 1: k = 1 ...
  // d'/2, the sum as the paper writes it (i = 1 ... d'/2) and NeMo's SandwichRelativePositionEmbedding
  // computes it (docs/sandwich.md).
  std::uint32_t first_frequency = 0;
  std::vector<float> scale;  // [heads], finite: bias[h] = scale[h] · Σ_k cos(rp·ω_k)

  // Causal (decoder): -inf for rp > 0, like ALiBi. Otherwise the bias of every rp (it is even in rp).
  bool causal = false;
  std::uint32_t queries = 1;
  std::uint32_t keys = 1;
  // Query i sits at absolute position i + query_offset; rp = j - (i + query_offset).
  std::int64_t query_offset = 0;
  std::uint32_t batch = 1;  // leading dimension of the logits (in-place add)

  // The GPU sums the d'/2 cosines of a relative position in one loop, within half the loop bound
  // (docs/ARCHITECTURE.md, "Bounded loops").
  static constexpr std::uint32_t kMaxDim = 32768;

  // The kernel's parameters only (heads, dim, scale): what fused attention needs.
  void validate_kernel() const;
  // Everything: parameters, shapes, offsets and element counts the operations index.
  void validate() const;
};

// ---- CPU reference ------------------------------------------------------------------------

// Σ_k cos(rp·ω_k), k = first_frequency ... first_frequency + dim/2 - 1, in float64 (the angle
// reduced exactly: its phase in turns), unrounded.
double sandwich_sum(std::uint32_t dim, std::int64_t rp, std::uint32_t first_frequency = 0);
// The bias of one head at rp: scale · sandwich_sum, rounded once to float32 (no mask).
float sandwich_bias_value(float scale, std::uint32_t dim, std::int64_t rp, std::uint32_t first_frequency = 0);
// float32 [heads, queries, keys].
std::vector<float> sandwich_bias_reference(const SandwichParams& p);
// logits [batch, heads, queries, keys] += bias, in place (one float32 add per value).
void sandwich_bias_add_reference(const SandwichParams& p, std::span<float> logits);

// Absolute error bound of a float32 GPU bias value of a head with this scale against
// sandwich_bias_value, at any rp (docs/sandwich.md derives it).
double sandwich_error_bound(float scale, std::uint32_t dim);

// ---- GPU operations -----------------------------------------------------------------------
// Record into `r`; nothing runs until it is submitted. Parameters and buffer sizes are checked
// first (InvalidArgument). Output sizes: bias H*Q*K elements of out_dtype (F32 or F16); logits
// B*H*Q*K elements of logits_dtype (F32 or F16).

void sandwich_bias(Recorder& r, const SandwichParams& p, const Buffer& out, DType out_dtype = DType::F32);
void sandwich_bias_add(Recorder& r, const SandwichParams& p, const Buffer& logits, DType logits_dtype = DType::F32);

}  // namespace relpos

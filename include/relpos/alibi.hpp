#pragma once
// ALiBi (Press et al.; docs/alibi_rope.md, ALiBi): a per-head linear bias -m_h * distance. Slopes for any head
// count, the materialised [heads, Q, K] bias and its in-place addition into [B, H, Q, K] logits.
// CPU reference and GPU operations share AlibiParams.
#include <cstdint>
#include <span>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Recorder;

// How slopes are made when the head count is not a power of two.
enum class AlibiSlopeRule {
  Interleaved,  // Press et al. / BLOOM: the c = 2^floor(log2 n) slopes of c, then every other slope of 2c (default)
  Geometric,    // meliad BoundedALiBi: 2^(-max_bias * h / n) for every n, no interleaving
};

struct AlibiParams {
  std::uint32_t heads = 1;
  double max_bias = 8.0;  // slopes 2^(-max_bias * h / n)
  AlibiSlopeRule rule = AlibiSlopeRule::Interleaved;
  // Given slopes (one per head) replace the rule; empty: use the rule.
  std::vector<float> slopes;

  // Causal (decoder): bias -m * (i_abs - j) for j <= i_abs and -inf above the diagonal.
  // Symmetric (encoder): -m * |rp|.
  bool causal = true;
  std::uint32_t queries = 1;
  std::uint32_t keys = 1;
  // Query i sits at absolute position i + query_offset; rp = j - (i + query_offset).
  std::int64_t query_offset = 0;
  std::uint32_t batch = 1;  // leading dimension of the logits (in-place add)

  // The slope part only (heads, max_bias, given slopes): what alibi_slopes() needs.
  void validate_slopes() const;
  // Everything: slopes, shapes, offsets and element counts the operations index.
  void validate() const;
};

// ---- CPU reference ------------------------------------------------------------------------

// float32 [heads]: the given slopes, or the rule's, computed in double and rounded once.
std::vector<float> alibi_slopes(const AlibiParams& p);

// The bias of relative position rp for a head of slope m: -(m * |rp|) symmetric; causal
// -(m * -rp) for rp <= 0 and -inf for rp > 0. One float32 multiply, as the GPU does it.
float alibi_bias_value(float slope, std::int64_t rp, bool causal);

// float32 [heads, queries, keys].
std::vector<float> alibi_bias_reference(const AlibiParams& p);
// logits [batch, heads, queries, keys] += bias, in place.
void alibi_bias_add_reference(const AlibiParams& p, std::span<float> logits);

// ---- GPU operations -----------------------------------------------------------------------
// Record into `r`; nothing runs until it is submitted. Parameters and buffer sizes are checked
// first (InvalidArgument). Output sizes: bias H*Q*K elements of out_dtype (F32 or F16); logits
// B*H*Q*K elements of logits_dtype (F32 or F16).

void alibi_bias(Recorder& r, const AlibiParams& p, const Buffer& out, DType out_dtype = DType::F32);
void alibi_bias_add(Recorder& r, const AlibiParams& p, const Buffer& logits, DType logits_dtype = DType::F32);

}  // namespace relpos

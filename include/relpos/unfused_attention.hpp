#pragma once
// Unfused attention (docs/shaw.md, "Unfused attention") built from reusable GPU blocks: a batched matmul, a masked
// numerically safe softmax, and the pipeline softmax(q·kᵀ·scale + mask)·v that composes them.
// Storage f32 or f16, accumulation always f32. The CPU reference is the truth the GPU is tested on.
#include <cstdint>
#include <span>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Recorder;

// C[batch][m][n] (=|+=) alpha · Σ_c A[batch][m][c] · B'[batch][c][n], where B' is B (NN: B is
// [batch][k][n]) or Bᵀ (NT: B is [batch][n][k]). Every operand is strided: element (batch, row,
// col) of X lives at X_batch_stride·batch + X_row_stride·row + col (elements of that operand's
// dtype). A batch stride of 0 shares one matrix across the batch.
struct MatmulParams {
  std::uint32_t batch = 1, m = 0, n = 0, k = 0;
  bool b_transposed = false;  // true: NT (A·Bᵀ, as q·kᵀ); false: NN (A·B, as weights·v)
  bool accumulate = false;    // C += alpha·A·B' (reads C in its dtype) instead of C = alpha·A·B'
  float alpha = 1.0f;
  DType a_dtype = DType::F32, b_dtype = DType::F32, c_dtype = DType::F32;  // F32 or F16
  std::uint64_t a_batch_stride = 0, a_row_stride = 0;
  std::uint64_t b_batch_stride = 0, b_row_stride = 0;
  std::uint64_t c_batch_stride = 0, c_row_stride = 0;
  void validate() const;
  // Elements each operand's buffer must hold.
  std::uint64_t a_elements() const;
  std::uint64_t b_elements() const;
  std::uint64_t c_elements() const;
};

// Dense, contiguous [batch, m, k] · [batch, k, n] (or [batch, n, k] when b_transposed).
MatmulParams dense_matmul(std::uint32_t batch, std::uint32_t m, std::uint32_t n, std::uint32_t k, bool b_transposed);

struct UnfusedAttentionParams {
  std::uint32_t batch = 1, heads = 1, queries = 0, keys = 0, head_dim = 0;
  // Per-element loops over head_dim (Shaw's materialised embeddings) stay within the shader loop bound.
  static constexpr std::uint32_t kMaxHeadDim = 16384;
  float scale = 1.0f;  // multiplies q·kᵀ (and Shaw's relative-key term); usually 1/sqrt(head_dim)
  bool causal = false;  // key j is masked for query i when j > i + query_offset
  std::int64_t query_offset = 0;
  // Key padding: empty, or one length per batch; key j >= key_lengths[b] is masked.
  std::vector<std::uint32_t> key_lengths;
  DType dtype = DType::F32;  // storage of q, k, v and out: F32 or F16 (logits are always f32)
  void validate() const;
  bool masked(std::uint32_t b, std::uint32_t i, std::uint32_t j) const;
};

// ---- CPU reference (inputs as float; for f16 storage pass the values the halves hold) -------

std::vector<float> matmul_reference(const MatmulParams& p, std::span<const float> a, std::span<const float> b,
                                    std::span<const float> c_in = {});
// [B, H, Q, K] = scale · q·kᵀ.
std::vector<float> unfused_logits_reference(const UnfusedAttentionParams& p, std::span<const float> q, std::span<const float> k);
// Row softmax of logits with the mask applied, in place; fully masked rows become zeros.
void masked_softmax_reference(const UnfusedAttentionParams& p, std::span<float> logits);
// [B, H, Q, D] = softmax(q·kᵀ·scale + mask) · v.
std::vector<float> unfused_attention_reference(const UnfusedAttentionParams& p, std::span<const float> q, std::span<const float> k,
                                       std::span<const float> v);

// ---- GPU operations -------------------------------------------------------------------------
// q [B,H,Q,D], k and v [B,H,K,D], out [B,H,Q,D] in p.dtype; logits and weights [B,H,Q,K] f32.

void matmul(Recorder& r, const MatmulParams& p, const Buffer& a, const Buffer& b, const Buffer& c);
void unfused_logits(Recorder& r, const UnfusedAttentionParams& p, const Buffer& q, const Buffer& k, const Buffer& logits);
// In place: logits -> weights.
void masked_softmax(Recorder& r, const UnfusedAttentionParams& p, const Buffer& logits);
void unfused_output(Recorder& r, const UnfusedAttentionParams& p, const Buffer& weights, const Buffer& v, const Buffer& out);
// The whole pipeline; the [B,H,Q,K] logits live in a scratch buffer of the recording.
void unfused_attention(Recorder& r, const UnfusedAttentionParams& p, const Buffer& q, const Buffer& k, const Buffer& v,
                       const Buffer& out);

}  // namespace relpos

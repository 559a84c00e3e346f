#pragma once
// Shaw et al. relative keys and values (docs/shaw.md), as tensor2tensor's
// dot_product_attention_relative computes them: idx(i, j) = clip(j - (i + query_offset), -k, k) + k
// selects a row of rel_keys / rel_values [2k+1, head_dim], shared by every head.
#include <cstdint>
#include <span>
#include <vector>

#include "relpos/unfused_attention.hpp"
#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Recorder;

struct ShawParams {
  std::uint32_t max_relative_position = 0;  // k >= 1; the tables have 2k + 1 rows
  std::uint32_t batch = 1, heads = 1, queries = 0, keys = 0, head_dim = 0;
  // 0: first query with first key; keys - queries: tensor2tensor (last with last); keys - 1 with
  // one query: tensor2tensor's cache mode (a decoding step).
  std::int64_t query_offset = 0;
  float scale = 1.0f;  // multiplies the relative-key term (tensor2tensor scales q first)
  std::uint32_t table_rows() const { return 2 * max_relative_position + 1; }
  std::int32_t index(std::uint32_t i, std::uint32_t j) const;
  void validate() const;
};

// tensor2tensor's alignment: the last query sits with the last key.
std::int64_t t2t_query_offset(std::uint32_t queries, std::uint32_t keys);

// ---- CPU reference --------------------------------------------------------------------------

// tensor2tensor's _generate_relative_positions_matrix, literally: int32 [Q, K] (cache: [1, K]).
std::vector<std::int32_t> t2t_relative_positions_matrix(std::uint32_t length_q, std::uint32_t length_k,
                                                        std::uint32_t max_relative_position, bool cache);
// idx(i, j) for p.query_offset: int32 [Q, K].
std::vector<std::int32_t> shaw_index_reference(const ShawParams& p);

// The relative-key term [B, H, Q, K] = scale · q[b,h,i]·rel_keys[idx(i, j)], q [B, H, Q, D].
// t2t: materialised [Q, K, D] embeddings and _relative_attention_inner's transpose / reshape /
// batched matmul over query position. direct: one dot product per (i, j).
std::vector<float> shaw_logits_t2t_reference(const ShawParams& p, std::span<const float> q, std::span<const float> rel_keys);
std::vector<float> shaw_logits_direct_reference(const ShawParams& p, std::span<const float> q, std::span<const float> rel_keys);
// The relative-value term [B, H, Q, D] = Σ_j weights[b,h,i,j] · rel_values[idx(i, j)].
std::vector<float> shaw_values_t2t_reference(const ShawParams& p, std::span<const float> weights,
                                             std::span<const float> rel_values);
std::vector<float> shaw_values_direct_reference(const ShawParams& p, std::span<const float> weights,
                                                std::span<const float> rel_values);

struct ShawAttentionParams {
  UnfusedAttentionParams attention;  // attention.scale multiplies both logit terms
  std::uint32_t max_relative_position = 0;
  ShawParams shaw() const;
  void validate() const;
};

// softmax((q·kᵀ + q·rel_keys[idx]ᵀ)·scale + mask) · v + Σ_j w_ij · rel_values[idx(i, j)].
std::vector<float> shaw_attention_reference(const ShawAttentionParams& p, std::span<const float> q, std::span<const float> k,
                                            std::span<const float> v, std::span<const float> rel_keys,
                                            std::span<const float> rel_values);

// ---- GPU operations -------------------------------------------------------------------------
// Tables are float32 [2k+1, D]; logits and weights float32 [B, H, Q, K]; q and out in `dtype`.

// The cheap form: P = scale · q·rel_keysᵀ ([B, H, Q, 2k+1], scratch), then out = P[.., idx(i, j)]
// (the relative-key term alone) or logits += P[.., idx(i, j)].
void shaw_logits(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& out,
                 DType q_dtype = DType::F32);
void shaw_logits_add(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& logits,
                     DType q_dtype = DType::F32);
// The cheap form: S[b,h,i,r] = Σ_{j: idx(i,j) = r} weights (scratch), then out += S · rel_values.
void shaw_values_add(Recorder& r, const ShawParams& p, const Buffer& weights, const Buffer& rel_values, const Buffer& out,
                     DType out_dtype = DType::F32);
// tensor2tensor's materialised form on the GPU (the benchmark baseline): writes the [Q, K, D]
// embeddings (O(Q·K·D) memory, scratch) and writes (or adds into logits) their batched matmul
// with q. q is f32.
void shaw_logits_materialised(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& out);
void shaw_logits_materialised_add(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys,
                                  const Buffer& logits);
// The unfused pipeline with relative keys and values; out [B, H, Q, D] in attention.dtype.
void shaw_attention(Recorder& r, const ShawAttentionParams& p, const Buffer& q, const Buffer& k, const Buffer& v,
                    const Buffer& rel_keys, const Buffer& rel_values, const Buffer& out);

}  // namespace relpos

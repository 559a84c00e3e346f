// Fused attention's baseline (attention_unfused): the same AttentionParams run as the unfused
// pipeline of unfused_attention.cpp, the bias materialised into the [B, H, Q, K] logits, then the
// softmax and the output matmul. What the fused op is measured and tested against.
#include <string>
#include <tuple>

#include "params/checks.hpp"
#include "relpos/alibi.hpp"
#include "relpos/attention.hpp"
#include "relpos/buffer.hpp"
#include "relpos/t5.hpp"
#include "relpos/unfused_attention.hpp"

namespace relpos {

std::uint64_t attention_unfused_logits_bytes(const AttentionParams& p) {
  return p.rows() * p.keys * 4;
}

void attention_unfused(Recorder& r, const AttentionParams& p, const AttentionBuffers& b, const Buffer& logits) {
  p.validate();
  detail::require(!p.paged.enabled(), "paged.block_size", std::to_string(p.paged.block_size), "must be 0: the unfused pipeline takes contiguous k and v");
  detail::require(p.bias == AttentionBias::None || p.bias == AttentionBias::T5, "bias", std::to_string(static_cast<int>(p.bias)),
                  "the unfused pipeline covers the none and t5 modes");
  detail::require(p.kv_heads == p.heads, "kv_heads", std::to_string(p.kv_heads), "must equal heads in the unfused pipeline");
  detail::require(p.memory_prefix == 0, "memory_prefix", std::to_string(p.memory_prefix), "must be 0 in the unfused pipeline");
  detail::require(b.key_lengths == nullptr, "key_lengths", "a buffer", "are not taken by the unfused pipeline");
  detail::require(b.q && b.k && b.v && b.out && (p.bias == AttentionBias::None || b.bias), "buffers", "missing",
                  "q, k, v, out (and the T5 table) are required");
  detail::require(logits.size() >= attention_unfused_logits_bytes(p), "logits buffer", std::to_string(logits.size()) + " bytes",
                  "must hold float32 [B, H, Q, K] = " + std::to_string(attention_unfused_logits_bytes(p)) + " bytes");
  const std::uint64_t es = dtype_size(p.dtype);
  const std::uint64_t q_bytes = p.rows() * p.head_dim * es, kv_bytes = std::uint64_t{p.batch} * p.heads * p.keys * p.head_dim * es;
  for (auto [buf, need, name] : {std::tuple{b.q, q_bytes, "q"}, {b.k, kv_bytes, "k"}, {b.v, kv_bytes, "v"}, {b.out, q_bytes, "out"}})
    detail::require(buf->size() >= need, std::string(name) + " buffer", std::to_string(buf->size()) + " bytes",
                    "must hold " + std::to_string(need) + " bytes");
  if (p.bias == AttentionBias::T5)
    detail::require(b.bias->size() == p.bias_elements() * 4, "T5 table buffer", std::to_string(b.bias->size()) + " bytes",
                    "must be float32 [num_buckets, heads] = " + std::to_string(p.bias_elements() * 4) + " bytes");
  UnfusedAttentionParams u;
  u.batch = p.batch;
  u.heads = p.heads;
  u.queries = p.queries;
  u.keys = p.keys;
  u.head_dim = p.head_dim;
  u.scale = p.effective_scale();
  u.causal = p.causal;
  u.query_offset = p.query_offset;
  u.dtype = p.dtype;
  u.validate();
  T5Params t5 = p.t5_row_params();
  t5.batch = p.batch;
  if (p.bias == AttentionBias::T5) t5.validate();
  unfused_logits(r, u, *b.q, *b.k, logits);
  if (p.bias == AttentionBias::T5) t5_bias_add(r, t5, *b.bias, logits, DType::F32);
  masked_softmax(r, u, logits);
  unfused_output(r, u, logits, *b.v, *b.out);
}

}  // namespace relpos

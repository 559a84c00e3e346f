// Fused attention's baseline (attention_unfused): the same AttentionParams run as the unfused
// pipeline of unfused_attention.cpp, the bias added into the [B, H, Q, K] logits by its family's
// own op, then the softmax and the output matmul. What the fused op is measured and tested against.
#include <string>
#include <tuple>

#include "bias/bias_family.hpp"
#include "params/checks.hpp"
#include "relpos/attention.hpp"
#include "relpos/buffer.hpp"
#include "relpos/unfused_attention.hpp"
#include "vk/access.hpp"

namespace relpos {

std::uint64_t attention_unfused_logits_bytes(const AttentionParams& p) {
  return detail::saturated_product({p.rows(), p.keys, 4});
}

bool attention_unfused_takes(AttentionBias bias) {
  const detail::BiasFamily& family = detail::bias_family(bias);
  return family.info.bias == AttentionBias::None || family.add_to_logits;
}

void attention_unfused(Recorder& r, const AttentionParams& p, const AttentionBuffers& b, const Buffer& logits) {
  p.validate();
  detail::require(!p.paged.enabled(), "paged.block_size", std::to_string(p.paged.block_size), "must be 0: the unfused pipeline takes contiguous k and v");
  const detail::BiasFamily& family = detail::bias_family(p.bias);
  const bool has_bias = family.info.bias != AttentionBias::None;
  detail::require(attention_unfused_takes(p.bias), "bias", std::string(family.info.name),
                  "is not taken by the unfused pipeline (attention_unfused_takes)");
  detail::require(p.kv_heads == p.heads, "kv_heads", std::to_string(p.kv_heads), "must equal heads in the unfused pipeline");
  detail::require(p.memory_prefix == 0, "memory_prefix", std::to_string(p.memory_prefix), "must be 0 in the unfused pipeline");
  detail::require(b.key_lengths == nullptr, "key_lengths", "a buffer", "are not taken by the unfused pipeline");
  detail::require(b.q && b.k && b.v && b.out && (!has_bias || b.bias), "buffers", "missing",
                  "q, k, v, out (and the bias input) are required");
  detail::require(logits.size() >= attention_unfused_logits_bytes(p), "logits buffer", std::to_string(logits.size()) + " bytes",
                  "must hold float32 [B, H, Q, K] = " + std::to_string(attention_unfused_logits_bytes(p)) + " bytes");
  const std::uint64_t es = dtype_size(p.dtype);
  const std::uint64_t q_bytes = p.rows() * p.head_dim * es, kv_bytes = std::uint64_t{p.batch} * p.heads * p.keys * p.head_dim * es;
  for (auto [buf, need, name] : {std::tuple{b.q, q_bytes, "q"}, {b.k, kv_bytes, "k"}, {b.v, kv_bytes, "v"}, {b.out, q_bytes, "out"}})
    detail::require(buf->size() >= need, std::string(name) + " buffer", std::to_string(buf->size()) + " bytes",
                    "must hold " + std::to_string(need) + " bytes");
  if (has_bias)
    detail::require(b.bias->size() == p.bias_elements() * 4, "bias buffer", std::to_string(b.bias->size()) + " bytes",
                    "must be " + std::string(family.info.input) + " = " + std::to_string(p.bias_elements() * 4) + " bytes");
  // Checked before the first of its ops records anything.
  detail::require_own_buffers(r, {{b.q, "q buffer"},
                                  {b.k, "k buffer"},
                                  {b.v, "v buffer"},
                                  {has_bias ? b.bias : nullptr, "bias buffer"},
                                  {&logits, "logits buffer", true},
                                  {b.out, "out buffer", true}});
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
  unfused_logits(r, u, *b.q, *b.k, logits);
  if (has_bias) family.add_to_logits(r, p, *b.bias, logits);
  masked_softmax(r, u, logits);
  unfused_output(r, u, logits, *b.v, *b.out);
}

}  // namespace relpos

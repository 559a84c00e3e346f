#pragma once
// Ring and sharded attention in tests: the whole sequence's inputs on the host, each rank's pieces
// of them uploaded, its result put back into the whole; the single-device result to compare with.
#include <relpos/relpos.hpp>
#include <relpos/ring.hpp>

#include <random>
#include <vector>

#include "support/test_data.hpp"

namespace relpos::test {

struct WholeInputs {
  std::vector<float> q, k, v, bias, rel_keys, rel_values;
  AttentionHostInputs host() const { return {q, k, v, bias, rel_keys, rel_values, {}, {}, {}}; }
};

inline WholeInputs random_whole_inputs(std::mt19937& rng, const AttentionParams& p) {
  WholeInputs in;
  const std::size_t D = p.head_dim, kv = std::size_t{p.batch} * p.kv_heads * p.keys * D;
  in.q = rounded_to_storage(random_floats(rng, p.rows() * D), p.dtype);
  in.k = rounded_to_storage(random_floats(rng, kv), p.dtype);
  in.v = rounded_to_storage(random_floats(rng, kv), p.dtype);
  if (p.bias == AttentionBias::Alibi) in.bias = random_floats(rng, p.heads, 0.0f, 1.0f);
  else if (p.bias == AttentionBias::Kerple) in.bias = random_floats(rng, p.bias_elements(), 0.01f, 0.5f);
  else in.bias = random_floats(rng, p.bias_elements(), -3.0f, 3.0f);
  if (p.bias == AttentionBias::Shaw) {
    in.rel_keys = random_floats(rng, (2 * p.max_relative_position + 1) * D);
    in.rel_values = random_floats(rng, (2 * p.max_relative_position + 1) * D);
  }
  return in;
}

// The inputs of one call on the device.
struct DeviceInputs {
  Buffer q, k, v, out, lse, bias, rel_keys, rel_values;
  AttentionBuffers buffers() const {
    AttentionBuffers b{&q, &k, &v, out ? &out : nullptr, lse ? &lse : nullptr};
    if (bias) b.bias = &bias;
    if (rel_keys) {
      b.rel_keys = &rel_keys;
      b.rel_values = &rel_values;
    }
    return b;
  }
};

inline DeviceInputs upload(Context& ctx, DType dtype, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<float>& bias, const WholeInputs& whole, std::uint64_t out_values, std::uint64_t rows) {
  DeviceInputs d{make_float_buffer(ctx, q, dtype), make_float_buffer(ctx, k, dtype), make_float_buffer(ctx, v, dtype), {}, {}, {}, {}, {}};
  if (out_values) {
    d.out = Buffer(ctx, out_values * dtype_size(dtype));
    d.lse = Buffer(ctx, rows * 4);
  }
  if (!bias.empty()) d.bias = make_buffer(ctx, bias);
  if (!whole.rel_keys.empty()) {
    d.rel_keys = make_buffer(ctx, whole.rel_keys);
    d.rel_values = make_buffer(ctx, whole.rel_values);
  }
  return d;
}

inline AttentionResult single_device(Context& ctx, const AttentionParams& p, const WholeInputs& in) {
  DeviceInputs d = upload(ctx, p.dtype, in.q, in.k, in.v, in.bias, in, p.rows() * p.head_dim, p.rows());
  Recorder r(ctx);
  attention(r, p, d.buffers());
  r.submit_and_wait();
  return {download_floats(d.out, p.rows() * p.head_dim, p.dtype), d.lse.download<float>(p.rows())};
}

// Rank `rank`'s part of a ring over the whole inputs: its pieces uploaded, ring_attention, its
// results put into `whole` (out [B, H, Q, D], lse [B, H, Q], sized by the caller; ranks write
// disjoint parts).
inline RingTiming ring_rank(RingRank& rank, const RingParams& rp, const WholeInputs& in, AttentionResult& whole) {
  const AttentionParams& a = rp.attention;
  const std::uint32_t r = rank.rank();
  const auto qp = rp.query_pieces(r), kp = rp.key_pieces(r);
  const std::uint64_t D = a.head_dim, BH = std::uint64_t{a.batch} * a.heads, BHkv = std::uint64_t{a.batch} * a.kv_heads;
  std::vector<float> bias = in.bias;
  if (rp.local_bias_elements(r) != a.bias_elements())  // dense: the rows of the rank's queries
    bias = take_pieces<float>(in.bias, a.heads, a.queries, a.keys, qp);
  const std::uint32_t Qr = rp.local_queries(r);
  DeviceInputs d = upload(rank.context(), a.dtype, take_pieces<float>(in.q, BH, a.queries, D, qp), take_pieces<float>(in.k, BHkv, a.keys, D, kp),
                          take_pieces<float>(in.v, BHkv, a.keys, D, kp), bias, in, BH * Qr * D, BH * Qr);
  const RingTiming t = ring_attention(rank, rp, d.buffers());
  put_pieces<float>(download_floats(d.out, BH * Qr * D, a.dtype), whole.out, BH, a.queries, D, qp);
  put_pieces<float>(d.lse.download<float>(BH * Qr), whole.lse, BH, a.queries, 1, qp);
  return t;
}

// Rank `rank`'s part of sharded attention: its keys uploaded (the queries whole); the merged result
// written into `result` where this rank receives it.
inline RingTiming sharded_rank(RingRank& rank, const ShardedParams& sp, const WholeInputs& in, AttentionResult& result) {
  const AttentionParams& a = sp.attention;
  const std::uint32_t r = rank.rank();
  const auto kp = sp.key_pieces(r);
  const std::uint64_t D = a.head_dim, BHkv = std::uint64_t{a.batch} * a.kv_heads;
  std::vector<float> bias = in.bias;
  if (sp.local_bias_elements(r) != a.bias_elements())  // dense: the columns of the rank's keys
    bias = take_pieces<float>(in.bias, std::uint64_t{a.heads} * a.queries, a.keys, 1, kp);
  const bool receives = sp.gather == RingGather::All || r == sp.root;
  DeviceInputs d = upload(rank.context(), a.dtype, in.q, take_pieces<float>(in.k, BHkv, a.keys, D, kp), take_pieces<float>(in.v, BHkv, a.keys, D, kp),
                          bias, in, receives ? a.rows() * D : 0, a.rows());
  const RingTiming t = sharded_attention(rank, sp, d.buffers());
  if (receives) result = {download_floats(d.out, a.rows() * D, a.dtype), d.lse.download<float>(a.rows())};
  return t;
}

}  // namespace relpos::test

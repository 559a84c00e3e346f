#pragma once
// Ring and sharded attention in tests: the whole sequence's inputs on the host, each rank's pieces
// of them uploaded, its result put back into the whole; the single-device result to compare with.
#include <relpos/relpos.hpp>
#include <relpos/ring.hpp>

#include <random>
#include <vector>

#include "support/attention_inputs.hpp"
#include "support/test_data.hpp"

namespace relpos::test {

// The whole sequence's inputs on the host.
struct WholeInputs : AttentionInputs {
  AttentionHostInputs host() const { return {q, k, v, bias, rel_keys, rel_values, {}, {}, {}}; }
};

inline WholeInputs random_whole_inputs(std::mt19937& rng, const AttentionParams& p) {
  return {random_attention_inputs(rng, p, std::size_t{p.batch} * p.kv_heads * p.keys * p.head_dim)};
}

// Random ring shapes over `chunks` chunks: grouped-query heads, mostly self-attention (Q = K), at
// times more keys or more queries; causal or not; offsets 0, K - Q or small of either sign; T5 in
// either direction; KERPLE's two variants; Sandwich's dimension.
inline AttentionParams random_ring_params(std::mt19937& rng, AttentionBias bias, DType dtype, std::uint32_t chunks) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  AttentionParams p;
  p.bias = bias;
  p.dtype = dtype;
  p.batch = pick(1, 2);
  p.kv_heads = pick(1, 2);
  p.heads = p.kv_heads * pick(1, 3);
  p.keys = chunks + pick(0, 40);
  p.queries = pick(0, 3) == 0 ? chunks + pick(0, 20) : p.keys;
  p.head_dim = 8;
  p.causal = pick(0, 1);
  switch (pick(0, 3)) {
    case 0: p.query_offset = std::int64_t{p.keys} - p.queries; break;
    case 1: p.query_offset = pick(-9, 9); break;
    default: p.query_offset = 0; break;
  }
  if (pick(0, 1)) p.scale = 1.0f;
  p.t5.bidirectional = pick(0, 1);
  p.t5.num_buckets = pick(p.t5.bidirectional ? 4 : 2, 20);
  p.t5.max_distance = p.t5.max_exact() + pick(1, 30);
  p.t5.scale = pick(0, 1) ? 1.0f : 0.5f;
  p.max_relative_position = pick(1, 5);
  p.kerple_variant = pick(0, 1) ? KerpleVariant::Log : KerpleVariant::Power;
  p.sandwich_dim = 2 * pick(1, 64);
  return p;
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
// disjoint parts). Without `with_lse` the call gets no lse buffer and whole.lse is left as it is.
// `called`: the settings ring_attention is called with, where they differ from those that sized
// the pieces (a rank whose settings disagree with the others', refused before any data moves).
inline RingTiming ring_rank(RingRank& rank, const RingParams& rp, const WholeInputs& in, AttentionResult& whole, bool with_lse = true,
                            const RingParams* called = nullptr) {
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
  AttentionBuffers b = d.buffers();
  if (!with_lse) b.lse = nullptr;
  const RingTiming t = ring_attention(rank, called ? *called : rp, b);
  put_pieces<float>(download_floats(d.out, BH * Qr * D, a.output_dtype()), whole.out, BH, a.queries, D, qp);
  if (with_lse) put_pieces<float>(d.lse.download<float>(BH * Qr), whole.lse, BH, a.queries, 1, qp);
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

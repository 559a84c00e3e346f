#pragma once
// The inputs of one fused attention call in the tool (`run attention`, its check, fuzz and bench
// cases), and the case registrations of tools/attention_cases.cpp and tools/attention_benches.cpp.
#include <memory>
#include <vector>

#include "registry.hpp"

namespace relpos::tool {

// Every input of one attention call, as host floats and (once uploaded) device buffers.
struct AttentionData {
  AttentionParams p;
  std::vector<float> q, k, v;
  BiasInputs in;
  std::vector<std::uint32_t> lengths;
  std::vector<std::int32_t> block_table, cache_lengths;  // a paged cache (p.paged)
  std::vector<std::int32_t> query_lengths;               // packed queries (p.total_queries)
  std::vector<std::uint8_t> k_bytes, v_bytes;            // caches of a cache_format, in place of k and v
  Buffer bq, bk, bv, bout, blse, bbias, brk, brv, blen, btable, bclen, bqlen;

  AttentionHostInputs host() const {
    return {q, k, v, in.bias, in.rel_keys, in.rel_values, lengths, block_table, cache_lengths, query_lengths, k_bytes, v_bytes};
  }
  void upload(Context& ctx) {
    auto up = [&](const std::vector<float>& x) { return make_float_buffer(ctx, x, p.dtype); };
    bq = up(q);
    if (p.cache_format) {
      bk = make_buffer(ctx, std::span<const std::uint8_t>(k_bytes));
      bv = make_buffer(ctx, std::span<const std::uint8_t>(v_bytes));
    } else {
      bk = up(k);
      bv = up(v);
    }
    bout = Buffer(ctx, p.rows() * p.head_dim * dtype_size(p.output_dtype()));
    blse = Buffer(ctx, p.rows() * 4);
    if (!in.bias.empty()) bbias = make_buffer(ctx, in.bias);
    if (!in.rel_keys.empty()) {
      brk = make_buffer(ctx, in.rel_keys);
      brv = make_buffer(ctx, in.rel_values);
    }
    if (!lengths.empty()) blen = make_buffer(ctx, lengths);
    if (p.paged.enabled()) {
      btable = make_buffer(ctx, block_table);
      bclen = make_buffer(ctx, cache_lengths);
    }
    if (p.packed()) bqlen = make_buffer(ctx, query_lengths);
  }
  AttentionBuffers buffers() const {
    AttentionBuffers b{&bq, &bk, &bv, &bout, &blse};
    if (bbias) b.bias = &bbias;
    if (brk) {
      b.rel_keys = &brk;
      b.rel_values = &brv;
    }
    if (blen) b.key_lengths = &blen;
    if (btable) {
      b.block_table = &btable;
      b.cache_lengths = &bclen;
    }
    if (bqlen) b.query_lengths = &bqlen;
    return b;
  }
  AttentionResult download() const {
    const std::size_t n = p.rows() * p.head_dim;
    return {download_floats(bout, n, p.output_dtype()),
            blse.download<float>(p.rows())};
  }
};

// Random q, k, v (rounded to p.dtype's storage) and bias inputs for p; a paged cache is left to
// make_paged.
AttentionData random_data(const AttentionBiasTool& family, const AttentionParams& p, unsigned seed);
// A paged cache for d: the blocks the lengths need and two spare ones, taken in a shuffled order;
// table entries past a sequence's length are -1 (never read). Fills d.k and d.v.
void make_paged(AttentionData& d, const std::vector<std::uint32_t>& lengths, unsigned seed);
// d's k and v values into the bytes of its cache_format, each row with its kv head's scale.
void encode_caches(AttentionData& d);

void register_attention_checks(Registry& reg);   // `relpos check` and `relpos fuzz` cases
void register_attention_benches(Registry& reg);  // `relpos bench` cases, the decode loop's too

}  // namespace relpos::tool

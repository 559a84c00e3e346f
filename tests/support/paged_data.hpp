#pragma once
// Random inputs of paged fused attention: a cache whose blocks the sequences take in a shuffled
// order, with spare blocks of their own random values (a wrong block index reads different numbers),
// and table entries past a sequence's length left as garbage (they must never be read).
#include <relpos/relpos.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "support/attention_inputs.hpp"
#include "support/test_data.hpp"
#include "support/gpu_fixture.hpp"

namespace relpos::test {

struct PagedInputs {
  std::vector<float> q, k, v, bias, rel_keys, rel_values;
  std::vector<std::int32_t> block_table, cache_lengths;
  std::vector<std::int32_t> query_lengths;  // packed queries (p.total_queries): set by the caller
  AttentionHostInputs host() const { return {q, k, v, bias, rel_keys, rel_values, {}, block_table, cache_lengths, query_lengths}; }
};

// p.paged.block_size and max_blocks set (p.keys = their product); num_blocks is set here: the
// blocks the lengths need plus `spare`. Packed queries: p.total_queries set (q holds that many
// tokens); the caller sets query_lengths.
inline PagedInputs random_paged_inputs(std::mt19937& rng, AttentionParams& p, const std::vector<std::int32_t>& lengths,
                                       std::uint32_t spare = 3) {
  const std::uint32_t bs = p.paged.block_size;
  p.keys = p.paged.max_blocks * bs;
  std::uint32_t used = 0;
  for (std::int32_t L : lengths) used += (static_cast<std::uint32_t>(L) + bs - 1) / bs;
  p.paged.num_blocks = used + spare;
  std::vector<std::int32_t> order(p.paged.num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  PagedInputs in;
  in.cache_lengths = lengths;
  in.block_table.assign(std::size_t{p.batch} * p.paged.max_blocks, 0);
  std::uniform_int_distribution<std::int32_t> garbage(-1000, 1000);
  std::size_t next = 0;
  for (std::uint32_t b = 0; b < p.batch; ++b)
    for (std::uint32_t n = 0; n < p.paged.max_blocks; ++n)
      in.block_table[std::size_t{b} * p.paged.max_blocks + n] =
          n * bs < static_cast<std::uint32_t>(lengths[b]) ? order[next++] : garbage(rng);
  AttentionInputs a = random_attention_inputs(rng, p, p.paged.cache_elements(p.kv_heads, p.head_dim));
  in.q = std::move(a.q);
  in.k = std::move(a.k);
  in.v = std::move(a.v);
  in.bias = std::move(a.bias);
  in.rel_keys = std::move(a.rel_keys);
  in.rel_values = std::move(a.rel_values);
  return in;
}

// The inputs on the device, for attention() or a plan.
struct PagedBuffers {
  Buffer q, k, v, out, lse, bias, rel_keys, rel_values, block_table, cache_lengths, query_lengths;
  PagedBuffers(Context& ctx, const AttentionParams& p, const PagedInputs& in)
      : q(make_float_buffer(ctx, in.q, p.dtype)),
        k(make_float_buffer(ctx, in.k, p.dtype)),
        v(make_float_buffer(ctx, in.v, p.dtype)),
        out(ctx, p.rows() * p.head_dim * dtype_size(p.dtype)),
        lse(ctx, p.rows() * 4),
        block_table(make_buffer(ctx, in.block_table)),
        cache_lengths(make_buffer(ctx, in.cache_lengths)) {
    if (!in.bias.empty()) bias = make_buffer(ctx, in.bias);
    if (!in.rel_keys.empty()) {
      rel_keys = make_buffer(ctx, in.rel_keys);
      rel_values = make_buffer(ctx, in.rel_values);
    }
    if (!in.query_lengths.empty()) query_lengths = make_buffer(ctx, in.query_lengths);
  }
  AttentionBuffers buffers() const {
    AttentionBuffers b{&q, &k, &v, &out, &lse};
    if (bias) b.bias = &bias;
    if (rel_keys) {
      b.rel_keys = &rel_keys;
      b.rel_values = &rel_values;
    }
    b.block_table = &block_table;
    b.cache_lengths = &cache_lengths;
    if (query_lengths) b.query_lengths = &query_lengths;
    return b;
  }
  AttentionResult download(const AttentionParams& p) const {
    return {download_floats(out, p.rows() * p.head_dim, p.dtype), lse.download<float>(p.rows())};
  }
};

inline AttentionResult gpu_paged_attention(Context& ctx, const AttentionParams& p, const PagedInputs& in) {
  PagedBuffers b(ctx, p, in);
  run(ctx, [&](Recorder& r) { attention(r, p, b.buffers()); });
  return b.download(p);
}

}  // namespace relpos::test

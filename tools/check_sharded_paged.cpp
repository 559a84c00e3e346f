// relpos check's sharded attention over paged caches with packed queries (chunked prefill beside
// decoding, sequence-parallel): each rank's cache a slice of every sequence, against the reference
// of the whole sequences in one paged cache (ring_tool.hpp).
#include <algorithm>
#include <chrono>

#include <relpos/ring.hpp>

#include "registry.hpp"
#include "ring_tool.hpp"
#include "sharded_slices.hpp"

namespace relpos::tool {
namespace {

constexpr std::uint32_t kBlock = 16;

CheckResult check_sharded_paged(Context& ctx, const AttentionParams& shape, std::uint32_t R, const std::vector<std::int32_t>& lengths,
                                const std::vector<std::int32_t>& query_lengths, std::uint32_t slice) {
  const std::uint32_t B = static_cast<std::uint32_t>(lengths.size()), Lmax = static_cast<std::uint32_t>(*std::max_element(lengths.begin(), lengths.end()));
  AttentionParams p = shape;
  p.batch = B;
  p.queries = static_cast<std::uint32_t>(*std::max_element(query_lengths.begin(), query_lengths.end()));
  p.total_queries = 0;
  for (std::int32_t n : query_lengths) p.total_queries += static_cast<std::uint32_t>(n);
  p.keys = Lmax;
  const RingInputs in = random_ring_inputs(p, 11);  // q [total_queries, H, D], k and v [B, Hkv, Lmax, D], the bias parameters
  const std::vector<float>& q = in.q;

  // The whole sequences in one paged cache, on one device: the reference.
  AttentionParams whole = p;
  const std::uint32_t whole_blocks = (Lmax + kBlock - 1) / kBlock;
  whole.paged = {kBlock, B * whole_blocks, whole_blocks};
  whole.keys = whole_blocks * kBlock;
  std::vector<RingPiece> all(B);
  for (std::uint32_t b = 0; b < B; ++b) all[b] = {0, static_cast<std::uint32_t>(lengths[b])};
  const detail::PagedPart one = detail::paged_part(in.k, in.v, p, Lmax, all, kBlock, whole_blocks);
  const AttentionResult want =
      attention_reference(whole, {q, one.k, one.v, in.bias, in.rel_keys, in.rel_values, {}, one.table, one.lengths, query_lengths});

  AttentionResult got;
  const InProcessRingOutcome outcome =
      run_in_process_ring(std::vector<Context*>(R, &ctx), std::chrono::minutes(5), [&](std::uint32_t r, Context& rank_ctx, RingTransport& t) {
        ShardedParams sp{p, R, RingGather::Root, 0};
        AttentionParams& a = sp.attention;
        const detail::PagedPart part = detail::sharded_paged_part(in.k, in.v, p, Lmax, lengths, r, slice, kBlock, a);
        Buffer qb = make_float_buffer(rank_ctx, q, p.dtype), kb = make_float_buffer(rank_ctx, part.k, p.dtype),
               vb = make_float_buffer(rank_ctx, part.v, p.dtype), table = make_buffer(rank_ctx, part.table),
               held = make_buffer(rank_ctx, part.lengths), ql = make_buffer(rank_ctx, query_lengths), bias, rk, rv;
        Buffer out(rank_ctx, a.rows() * a.head_dim * dtype_size(a.output_dtype())), lse(rank_ctx, a.rows() * 4);
        AttentionBuffers b{&qb, &kb, &vb, r == 0 ? &out : nullptr, r == 0 ? &lse : nullptr};
        if (!in.bias.empty()) b.bias = &(bias = make_buffer(rank_ctx, in.bias));
        if (!in.rel_keys.empty()) {
          b.rel_keys = &(rk = make_buffer(rank_ctx, in.rel_keys));
          b.rel_values = &(rv = make_buffer(rank_ctx, in.rel_values));
        }
        b.block_table = &table;
        b.cache_lengths = &held;
        b.query_lengths = &ql;
        RingRank rank(rank_ctx, t);
        sharded_attention(rank, sp, b);
        if (r == 0) got = {download_floats(out, a.rows() * a.head_dim, a.output_dtype()), lse.download<float>(a.rows())};
      });
  if (!outcome.ok()) throw Error(outcome.describe());
  return {std::max(normalised_error(got.out, want.out), normalised_error(got.lse, want.lse)), p.dtype == DType::F16 ? 1e-3 : 1e-4, "max_err"};
}

}  // namespace

void add_sharded_paged_checks(Registry& reg) {
  struct Case {
    AttentionParams p;
    std::vector<std::int32_t> lengths, query_lengths;
  };
  AttentionParams t5{.heads = 4, .kv_heads = 2, .head_dim = 16, .scale = 1.0f, .causal = true, .bias = AttentionBias::T5};
  t5.t5 = {.num_buckets = 16, .max_distance = 24, .bidirectional = false};
  const AttentionParams alibi{.heads = 6, .kv_heads = 2, .head_dim = 32, .dtype = DType::F16, .causal = true, .bias = AttentionBias::Alibi};
  // 3 ranks of 48 keys a sequence: a prefill chunk longer than the last rank's slice, decodes, a
  // sequence with no query, one too short to reach every rank.
  for (const Case& c : {Case{t5, {130, 61, 40, 97, 9}, {60, 1, 0, 17, 9}}, Case{alibi, {140, 100, 3}, {1, 33, 1}}}) {
    const AttentionParams& p = c.p;
    std::string lengths;
    for (std::size_t b = 0; b < c.lengths.size(); ++b) {
      if (b) lengths += ',';
      lengths += std::to_string(c.query_lengths[b]);
      lengths += '/';
      lengths += std::to_string(c.lengths[b]);
    }
    const std::string shape = "[" + lengths + "," + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) + "," + std::to_string(p.head_dim) +
                              "] " + std::string(attention_bias_info(p.bias).name) + " " + std::string(dtype_name(p.dtype)) +
                              " R=3 sharded paged packed";
    reg.checks.push_back({"ring-attention", shape, [c](Context& ctx) { return check_sharded_paged(ctx, c.p, 3, c.lengths, c.query_lengths, 48); },
                          false});
  }
}

}  // namespace relpos::tool

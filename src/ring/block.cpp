// Ring blocks: the pieces of a layout, the attention() call of a block, its causal skip and its bias
// window; RingParams and ShardedParams checks.
#include "ring/block.hpp"

#include <string>

#include "params/checks.hpp"

namespace relpos {
namespace detail {

RingBiasInput ring_bias_input(const AttentionParams& p) {
  // The input's size at four small shapes tells its layout apart: a constant (parameters),
  // heads per query and per key (a row of queries + keys - 1), or heads * queries * keys.
  auto elements = [&](std::uint32_t q, std::uint32_t k) {
    AttentionParams a = p;
    a.paged = {};
    a.queries = q;
    a.keys = k;
    return a.bias_elements();
  };
  const std::uint64_t e11 = elements(1, 1), e21 = elements(2, 1), e12 = elements(1, 2), e22 = elements(2, 2), H = p.heads;
  if (e11 == e21 && e11 == e12 && e11 == e22) return RingBiasInput::Parameters;
  if (e11 == H && e21 == 2 * H && e12 == 2 * H && e22 == 3 * H) return RingBiasInput::DistanceRow;
  if (e11 == H && e21 == 2 * H && e12 == 2 * H && e22 == 4 * H) return RingBiasInput::Dense;
  require(false, "bias", std::string(attention_bias_info(p.bias).name),
          "has an input that is neither parameters, a per-distance row nor a dense [heads, queries, keys]: the ring cannot place it");
  return RingBiasInput::Parameters;
}

void add_region(std::vector<VkBufferCopy>& regions, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
  if (bytes == 0) return;
  if (!regions.empty() && regions.back().srcOffset + regions.back().size == src && regions.back().dstOffset + regions.back().size == dst)
    regions.back().size += bytes;
  else
    regions.push_back({src, dst, bytes});
}

RingPiece ring_chunk(std::uint32_t length, std::uint32_t chunks, std::uint32_t n) {
  const std::uint64_t first = std::uint64_t{length} * n / chunks, end = std::uint64_t{length} * (n + 1) / chunks;
  return {static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(end - first)};
}

std::uint32_t ring_lse_floats(const AttentionParams& whole) { return attention_lse_has_reference(whole) ? 2 : 1; }

AttentionMergeLayout ring_merge_layout(const AttentionParams& whole, const Buffer& in, const Buffer& in_lse, std::uint32_t parts,
                                       std::uint32_t part_stride, std::uint32_t lse_part_stride) {
  AttentionMergeLayout m{&in, &in_lse, parts, part_stride, whole.head_dim / 4, lse_part_stride, ring_lse_floats(whole), DType::F32};
  m.reference = attention_lse_has_reference(whole);  // each block's own: the merge moves to that of the largest
  m.reference_at = 1;
  m.reference_part_stride = lse_part_stride;
  return m;
}

bool ring_block_masked(const AttentionParams& whole, RingPiece q, RingPiece k) {
  // The first key against the last query: rp = k.first - (q.first + q.count - 1 + query_offset).
  return whole.causal && std::int64_t{k.first} - (std::int64_t{q.first} + q.count - 1 + whole.query_offset) > 0;
}

AttentionParams ring_block_params(const AttentionParams& whole, RingPiece q, RingPiece k, DType out_dtype) {
  AttentionParams p = whole;
  p.queries = q.count;
  p.keys = k.count;
  // Local query i is global q.first + i, local key j global k.first + j:
  // rp = (k.first + j) - (q.first + i + offset) = j - (i + offset + q.first - k.first).
  p.query_offset = whole.query_offset + std::int64_t{q.first} - k.first;
  p.key_splits = 0;
  p.out_dtype = out_dtype;
  return p;
}

std::vector<VkBufferCopy> ring_bias_regions(const AttentionParams& whole, RingBiasInput kind, RingPiece q, RingPiece k,
                                            const RingBiasWindow& dense) {
  std::vector<VkBufferCopy> regions;
  auto add = [&](std::uint64_t src, std::uint64_t dst, std::uint64_t floats) { add_region(regions, src * 4, dst * 4, floats * 4); };
  const std::uint64_t H = whole.heads;
  if (kind == RingBiasInput::DistanceRow) {
    // The block's row is laid out for its own offset: its index rp + offset_b + q.count - 1 is the
    // whole row's rp + offset + queries - 1 minus (queries - q.count - q.first + k.first).
    const std::uint64_t whole_len = std::uint64_t{whole.queries} + whole.keys - 1, len = std::uint64_t{q.count} + k.count - 1;
    const std::uint64_t start = std::uint64_t{whole.queries} - q.count - q.first + k.first;
    for (std::uint64_t h = 0; h < H; ++h) add(h * whole_len + start, h * len, len);
  } else if (kind == RingBiasInput::Dense) {
    for (std::uint64_t h = 0; h < H; ++h)
      for (std::uint64_t i = 0; i < q.count; ++i)
        add((h * dense.rows + dense.row0 + i) * dense.cols + dense.col0, (h * q.count + i) * k.count, k.count);
  }
  return regions;
}

}  // namespace detail

using detail::require;
using detail::require_f32_or_f16;

std::string_view ring_layout_name(RingLayout layout) { return layout == RingLayout::Zigzag ? "zigzag" : "contiguous"; }

std::optional<RingLayout> ring_layout_from_name(std::string_view name) {
  if (name == "contiguous") return RingLayout::Contiguous;
  if (name == "zigzag") return RingLayout::Zigzag;
  return std::nullopt;
}

namespace {

std::uint32_t ring_chunks(const RingParams& p) { return p.layout == RingLayout::Zigzag ? 2 * p.ranks : p.ranks; }

void require_ranks(std::uint32_t ranks) {
  require(ranks >= 1 && ranks <= RingParams::kMaxRanks, "ranks", std::to_string(ranks),
          "must be in [1, " + std::to_string(RingParams::kMaxRanks) + "]");
}

// Before a rank's pieces are cut: ranks outside their range are the fault, not the rank (and
// zigzag's 2 * ranks chunks would wrap to none); the ranks there are spelled out, since a bare
// `rank = 1: must be < ranks = 1` reads like a misprint. `name`: "rank", or the root's.
void require_rank(std::uint32_t rank, std::uint32_t ranks, const char* name = "rank") {
  require_ranks(ranks);
  require(rank < ranks, name, std::to_string(rank),
          "must be < ranks = " + std::to_string(ranks) +
              (ranks == 1 ? std::string(" (ranks are numbered from 0: a ring of one rank has rank 0 only)")
                          : " (ranks are numbered 0 .. " + std::to_string(ranks - 1) + ")"));
}

std::vector<RingPiece> pieces_of(const RingParams& p, std::uint32_t length, std::uint32_t rank) {
  require_rank(rank, p.ranks);
  const std::uint32_t n = ring_chunks(p);
  if (p.layout == RingLayout::Zigzag) return {detail::ring_chunk(length, n, rank), detail::ring_chunk(length, n, n - 1 - rank)};
  return {detail::ring_chunk(length, n, rank)};
}

std::uint32_t total(const std::vector<RingPiece>& pieces) {
  std::uint32_t n = 0;
  for (const RingPiece& p : pieces) n += p.count;
  return n;
}

// What neither ring nor sharded attention takes.
void require_ring_attention(const AttentionParams& a) {
  require(a.memory_prefix == 0, "memory_prefix", std::to_string(a.memory_prefix), "must be 0 in ring and sharded attention");
  require(a.key_splits == 0, "key_splits", std::to_string(a.key_splits),
          "must be 0 in ring and sharded attention (each block chooses its own splits)");
  require_f32_or_f16(a.dtype, "dtype");
  require_f32_or_f16(a.output_dtype(), "out_dtype");
}

}  // namespace

void RingParams::validate() const {
  require_ranks(ranks);
  require(layout == RingLayout::Contiguous || layout == RingLayout::Zigzag, "layout", std::to_string(static_cast<std::uint32_t>(layout)),
          "must be contiguous or zigzag");
  // What ring attention never takes, named as such before the attention's own checks (which
  // would ask for what goes with it: packed queries for a paged cache).
  require(!attention.packed(), "total_queries", std::to_string(attention.total_queries),
          "must be 0 in ring attention (packed queries over a paged cache are sharded attention's: sharded_attention)");
  require(!attention.paged.enabled(), "paged.block_size", std::to_string(attention.paged.block_size),
          "must be 0 in ring attention (a paged cache is for sharded decoding: sharded_attention)");
  require(!attention.cache_format, "cache_format", attention.cache_format ? std::string(cache_format_name(*attention.cache_format)) : "",
          "must be unset in ring attention (the chunks travel as dtype values; sharded_attention takes any cache format)");
  attention.validate();
  require_ring_attention(attention);
  const std::uint32_t n = ring_chunks(*this);
  const std::string why = " (ranks = " + std::to_string(ranks) + ", " + std::string(ring_layout_name(layout)) + ": " + std::to_string(n) +
                          " chunks, each with at least one)";
  require(attention.queries >= n, "queries", std::to_string(attention.queries), "must be >= " + std::to_string(n) + why);
  require(attention.keys >= n, "keys", std::to_string(attention.keys), "must be >= " + std::to_string(n) + why);
  detail::ring_bias_input(attention);
}

std::vector<RingPiece> RingParams::query_pieces(std::uint32_t rank) const { return pieces_of(*this, attention.queries, rank); }
std::vector<RingPiece> RingParams::key_pieces(std::uint32_t rank) const { return pieces_of(*this, attention.keys, rank); }
std::uint32_t RingParams::local_queries(std::uint32_t rank) const { return total(query_pieces(rank)); }
std::uint32_t RingParams::local_keys(std::uint32_t rank) const { return total(key_pieces(rank)); }

std::uint64_t RingParams::local_bias_elements(std::uint32_t rank) const {
  if (detail::ring_bias_input(attention) != detail::RingBiasInput::Dense) return attention.bias_elements();
  return detail::saturated_product({attention.heads, local_queries(rank), attention.keys});
}

void ShardedParams::validate() const {
  require_rank(root, ranks, "root");
  require(gather == RingGather::Root || gather == RingGather::All, "gather", std::to_string(static_cast<std::uint32_t>(gather)),
          "must be root or all");
  attention.validate();
  require_ring_attention(attention);
  const detail::RingBiasInput kind = detail::ring_bias_input(attention);
  if (attention.paged.enabled())
    require(kind == detail::RingBiasInput::Parameters, "bias", std::string(attention_bias_info(attention.bias).name),
            "must come as parameters with a paged cache in sharded attention (no distance rows or dense bias)");
  else
    require(attention.keys >= ranks, "keys", std::to_string(attention.keys),
            "must be >= ranks = " + std::to_string(ranks) + " (every rank holds at least one key)");
}

std::vector<RingPiece> ShardedParams::key_pieces(std::uint32_t rank) const {
  require_rank(rank, ranks);
  if (attention.paged.enabled()) return {{0, attention.keys}};
  return {detail::ring_chunk(attention.keys, ranks, rank)};
}

std::uint64_t ShardedParams::local_bias_elements(std::uint32_t rank) const {
  if (detail::ring_bias_input(attention) != detail::RingBiasInput::Dense) return attention.bias_elements();
  return detail::saturated_product({attention.heads, attention.queries, total(key_pieces(rank))});
}

}  // namespace relpos

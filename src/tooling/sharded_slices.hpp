#pragma once
// Sharded attention's paged caches cut from whole sequences, for relpos check's cases and the
// tests: rank r holds, of every sequence, the slice of `slice` keys that ends r·slice keys before
// the sequence's end (fewer, or none, where the sequence is shorter), in a paged cache of its own
// whose query_offset is r·slice (docs/ring_attention.md, "Paged caches").
#include <algorithm>
#include <cstdint>
#include <vector>

#include <relpos/attention.hpp>
#include <relpos/ring.hpp>

namespace relpos::detail {

// Rank `rank`'s keys of a sequence of `length`: [first, first + count).
inline RingPiece sharded_slice(std::int32_t length, std::uint32_t slice, std::uint32_t rank) {
  const std::int64_t end = std::int64_t{length} - std::int64_t{rank} * slice, first = std::max<std::int64_t>(0, end - slice);
  return end <= 0 ? RingPiece{} : RingPiece{static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(end - first)};
}

// A paged cache in blocks of `block_size` (max_blocks a sequence, handed out in reverse order so
// that the table is not the identity) holding, of each sequence b, pieces[b] of its keys and values
// (whole_k, whole_v: [batch, kv_heads, whole_keys, head_dim]); its block table and lengths.
struct PagedPart {
  std::vector<float> k, v;
  std::vector<std::int32_t> table, lengths;
};
inline PagedPart paged_part(const std::vector<float>& whole_k, const std::vector<float>& whole_v, const AttentionParams& shape,
                            std::uint32_t whole_keys, const std::vector<RingPiece>& pieces, std::uint32_t block_size, std::uint32_t max_blocks) {
  const std::uint32_t B = shape.batch, Hkv = shape.kv_heads, D = shape.head_dim, blocks = B * max_blocks;
  PagedPart c;
  c.k.assign(std::size_t{blocks} * block_size * Hkv * D, 0.0f);
  c.v = c.k;
  for (std::uint32_t b = 0; b < B; ++b) {
    for (std::uint32_t n = 0; n < max_blocks; ++n) c.table.push_back(static_cast<std::int32_t>(blocks - 1 - (b * max_blocks + n)));
    c.lengths.push_back(static_cast<std::int32_t>(pieces[b].count));
    for (std::uint32_t j = 0; j < pieces[b].count; ++j)
      for (std::uint32_t h = 0; h < Hkv; ++h) {
        const std::size_t block = static_cast<std::size_t>(c.table[b * max_blocks + j / block_size]);
        const std::size_t to = ((block * block_size + j % block_size) * Hkv + h) * D;
        const std::size_t from = ((std::size_t{b} * Hkv + h) * whole_keys + pieces[b].first + j) * D;
        std::copy_n(whole_k.begin() + from, D, c.k.begin() + to);
        std::copy_n(whole_v.begin() + from, D, c.v.begin() + to);
      }
  }
  return c;
}

// Rank `rank`'s cache of the sequences of `lengths` (keys of `whole_k`, `whole_v` as above), and its
// call's paged cache, keys and query_offset set in `a`.
inline PagedPart sharded_paged_part(const std::vector<float>& whole_k, const std::vector<float>& whole_v, const AttentionParams& shape,
                                    std::uint32_t whole_keys, const std::vector<std::int32_t>& lengths, std::uint32_t rank, std::uint32_t slice,
                                    std::uint32_t block_size, AttentionParams& a) {
  const std::uint32_t max_blocks = (slice + block_size - 1) / block_size;
  a.paged = {block_size, shape.batch * max_blocks, max_blocks};
  a.keys = max_blocks * block_size;
  a.query_offset = std::int64_t{rank} * slice;
  std::vector<RingPiece> mine(shape.batch);
  for (std::uint32_t b = 0; b < shape.batch; ++b) mine[b] = sharded_slice(lengths[b], slice, rank);
  return paged_part(whole_k, whole_v, shape, whole_keys, mine, block_size, max_blocks);
}

}  // namespace relpos::detail

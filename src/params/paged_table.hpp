#pragma once
// The block-table check that fused attention and kv_append share: the table's and the lengths'
// sizes, each sequence's length in range, and every entry the op follows a block of the cache.
#include <cstdint>
#include <span>

#include "relpos/attention.hpp"

namespace relpos::detail {

// Sequence b holds cache_lengths[b] keys. An op that reads the cache (`appended` empty) follows
// the entries of every block those keys occupy; one that appends `appended[b]` keys to sequence b
// (batch counts, each >= 0) follows only those of the blocks the new keys land in, and each length
// must leave room for them.
void check_paged_table(const PagedKv& paged, std::uint32_t batch, std::span<const std::int32_t> block_table,
                       std::span<const std::int32_t> cache_lengths, std::span<const std::int32_t> appended = {});

}  // namespace relpos::detail

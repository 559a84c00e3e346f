#pragma once
// What a ring or sharded attention computes on one device: blocks of queries against keys, each an
// attention() call placed at the two pieces' true global positions, with its bias cut out of the
// rank's bias input.
#include <vulkan/vulkan_core.h>

#include <cstdint>
#include <vector>

#include "ops/attention_launch.hpp"
#include "relpos/attention.hpp"
#include "relpos/ring.hpp"

namespace relpos::detail {

// How a bias input relates to the shape, read from AttentionParams::bias_elements() alone, so that
// a bias family added later is placed by its input's layout and the ring needs no change:
enum class RingBiasInput {
  Parameters,   // the same floats for any shape (none, T5's table, ALiBi's slopes, KERPLE, Shaw)
  DistanceRow,  // [heads, queries + keys - 1], indexed by rp + query_offset + queries - 1
  Dense,        // [heads, queries, keys]
};
// InvalidArgument naming the bias when its input is none of these.
RingBiasInput ring_bias_input(const AttentionParams& p);

// Appends a copy region of `bytes`, joined to the last one where both ranges continue it.
void add_region(std::vector<VkBufferCopy>& regions, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes);

// Chunk n of `chunks` over `length` positions.
RingPiece ring_chunk(std::uint32_t length, std::uint32_t chunks, std::uint32_t n);

// True when the causal mask hides every key of `k` from every query of `q` (the block is skipped).
bool ring_block_masked(const AttentionParams& whole, RingPiece q, RingPiece k);

// The attention() call of queries `q` against keys `k` of `whole`: their counts, and the query
// offset that puts both at their global positions (rp = key - query is the whole call's).
AttentionParams ring_block_params(const AttentionParams& whole, RingPiece q, RingPiece k, DType out_dtype);

// Where the block's bias comes from in the rank's bias input: the local dense bias is
// [heads, rows, cols] with the block's queries at rows [row0, row0 + q.count) and its keys at
// columns [col0, col0 + k.count); the distance row is the whole call's. Returns the copy regions
// (bytes) that cut the block's bias input out of it, adjacent regions joined; empty for
// parameters (the input serves every block as it is).
struct RingBiasWindow {
  std::uint32_t rows = 0, cols = 0, row0 = 0, col0 = 0;
};
std::vector<VkBufferCopy> ring_bias_regions(const AttentionParams& whole, RingBiasInput kind, RingPiece q, RingPiece k,
                                            const RingBiasWindow& dense);

// Floats of a row of a block's lse (record_attention_with_lse_reference): 2 where the bias mode
// keeps a reference (the lse relative to it, then it), else 1.
std::uint32_t ring_lse_floats(const AttentionParams& whole);
// The merge of `parts` blocks' float32 results: part n's rows at word n * part_stride (D4 words a
// row), its lse rows (ring_lse_floats) at float n * lse_part_stride, each row's reference, where
// the mode keeps one, after its lse.
AttentionMergeLayout ring_merge_layout(const AttentionParams& whole, const Buffer& in, const Buffer& in_lse, std::uint32_t parts,
                                       std::uint32_t part_stride, std::uint32_t lse_part_stride);

}  // namespace relpos::detail

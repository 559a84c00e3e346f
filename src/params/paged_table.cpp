// The block-table check of paged caches (paged_table.hpp).
#include "params/paged_table.hpp"

#include <string>

#include "params/checks.hpp"

namespace relpos::detail {
namespace {
std::string str(std::uint64_t v) { return std::to_string(v); }
}  // namespace

void check_paged_table(const PagedKv& pk, std::uint32_t batch, std::span<const std::int32_t> block_table,
                       std::span<const std::int32_t> cache_lengths, std::span<const std::int32_t> appended) {
  const std::uint64_t capacity = std::uint64_t{pk.max_blocks} * pk.block_size;
  require(block_table.size() == std::uint64_t{batch} * pk.max_blocks, "block_table", str(block_table.size()) + " values",
          "must hold batch * max_blocks = " + str(std::uint64_t{batch} * pk.max_blocks));
  require(cache_lengths.size() == batch, "cache_lengths", str(cache_lengths.size()) + " values", "must hold batch = " + str(batch));
  const bool append = !appended.empty();
  for (std::uint32_t b = 0; b < batch; ++b) {
    const std::int32_t L = cache_lengths[b];
    const std::uint64_t n_new = append ? static_cast<std::uint64_t>(appended[b]) : 0;
    require(L >= 0 && static_cast<std::uint64_t>(L) + n_new <= capacity, "cache_lengths[" + str(b) + "]", std::to_string(L),
            append ? "must be in [0, max_blocks * block_size - " + str(n_new) + " new keys = " + str(capacity - n_new) + "]"
                   : "must be in [0, max_blocks * block_size = " + str(capacity) + "]");
    const std::uint64_t first = append ? static_cast<std::uint64_t>(L) / pk.block_size : 0;
    const std::uint64_t end = append && n_new == 0 ? first : (static_cast<std::uint64_t>(L) + n_new + pk.block_size - 1) / pk.block_size;
    for (std::uint64_t n = first; n < end; ++n) {
      const std::int32_t e = block_table[b * std::uint64_t{pk.max_blocks} + n];
      const std::string why = append ? "sequence " + str(b) + "'s new keys land in blocks " + str(first) + ".." + str(end - 1) + " of its row"
                                     : "sequence " + str(b) + " holds " + std::to_string(L) + " keys: blocks 0.." + str(end - 1) +
                                           " of its row are read";
      require(e >= 0 && static_cast<std::uint32_t>(e) < pk.num_blocks, "block_table[" + str(b) + "][" + str(n) + "]", std::to_string(e),
              "must be in [0, num_blocks = " + str(pk.num_blocks) + ") (" + why + ")");
    }
  }
}

}  // namespace relpos::detail

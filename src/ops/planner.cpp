#include "ops/planner.hpp"

#include "relpos/error.hpp"

namespace relpos::detail {

std::vector<ElementChunk> element_chunks(const DeviceLimits& lim, std::uint64_t total, std::uint32_t elem_bytes,
                                         std::uint64_t elems_per_group) {
  // A chunk starts on a whole quad of elements at an offset the device can bind.
  std::uint64_t granule = std::max<std::uint64_t>({4, lim.min_storage_buffer_offset_alignment / elem_bytes, 1});
  std::uint64_t by_range = lim.max_storage_buffer_range / elem_bytes;
  std::uint64_t by_groups = static_cast<std::uint64_t>(lim.max_workgroup_count[0]) * elems_per_group;
  std::uint64_t per_chunk = std::min(by_range, by_groups) / granule * granule;
  if (per_chunk == 0) throw Error("internal: device limits too small for one chunk of elements");
  std::vector<ElementChunk> out;
  for (std::uint64_t first = 0; first < total; first += per_chunk) out.push_back({first, std::min(per_chunk, total - first)});
  return out;
}

}  // namespace relpos::detail

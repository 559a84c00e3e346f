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

std::uint64_t largest_fitting_chunk(const DeviceLimits& lim, std::uint64_t first, std::uint64_t total, const std::string& unit,
                                    const std::string& hint, const std::function<std::string(std::uint64_t, std::uint64_t)>& misfit) {
  const std::string one = misfit(first, first + 1);
  require(one.empty(), one + " buffer", unit,
          "needs a binding larger than maxStorageBufferRange = " + std::to_string(lim.max_storage_buffer_range) + " bytes; " + hint);
  // Doubling steps, then bisection: O(log) calls of misfit.
  std::uint64_t good = first + 1, bad = total + 1, step = 1;
  while (good < total) {
    const std::uint64_t next = std::min(total, good + step);
    if (!misfit(first, next).empty()) {
      bad = next;
      break;
    }
    good = next;
    step *= 2;
  }
  while (bad - good > 1) {
    const std::uint64_t mid = good + (bad - good) / 2;
    if (misfit(first, mid).empty()) good = mid;
    else bad = mid;
  }
  return good;
}

}  // namespace relpos::detail

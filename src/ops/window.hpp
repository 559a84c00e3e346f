#pragma once
// A range of tensor elements bound as a storage-buffer window: the binding starts at an offset
// the device can bind (aligned down), and `base` is where the range starts inside it. Lets an op
// split work at any element without the element being aligned, within maxStorageBufferRange.
#include <cstdint>
#include <string>

#include "reference/checks.hpp"
#include "vk/dispatch.hpp"

namespace relpos::detail {

struct Window {
  BufferSpan span;
  std::uint32_t base = 0;  // element index of `first` inside the binding
};

// Elements of `elem_bytes` that any window can hold, whatever slack its alignment costs.
inline std::uint64_t window_capacity(const DeviceLimits& lim, std::uint32_t elem_bytes) {
  return (lim.max_storage_buffer_range - lim.min_storage_buffer_offset_alignment) / elem_bytes;
}

// Elements [first, end) of `buffer`; end - first must be <= window_capacity().
inline Window window(const DeviceLimits& lim, const Buffer& buffer, std::uint64_t first, std::uint64_t end,
                     std::uint32_t elem_bytes) {
  const std::uint64_t align = lim.min_storage_buffer_offset_alignment;
  const std::uint64_t offset = first * elem_bytes / align * align;
  return {{&buffer, offset, end * elem_bytes - offset}, static_cast<std::uint32_t>((first * elem_bytes - offset) / elem_bytes)};
}

// InvalidArgument unless `buffer` holds `elements` of `elem_bytes`.
inline void require_buffer(const Buffer& buffer, std::uint64_t elements, std::uint32_t elem_bytes, const std::string& name,
                           const std::string& shape) {
  const std::uint64_t need = elements * elem_bytes;
  require(buffer.size() >= need, name + " buffer", std::to_string(buffer.size()) + " bytes",
          "must hold " + shape + " = " + std::to_string(elements) + " elements of " + std::to_string(elem_bytes) +
              " bytes (" + std::to_string(need) + " bytes)");
}

}  // namespace relpos::detail

#pragma once
// The planner: how an op's work is cut into what one dispatch and one binding can take, from the
// device's limits (maxStorageBufferRange, minStorageBufferOffsetAlignment,
// maxComputeWorkGroupCount) and the op's tile sizes. Every op plans its chunks, windows and
// dispatch grids with these functions; none computes an aligned offset or a chunk size itself.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "vk/dispatch.hpp"

namespace relpos::detail {

inline std::uint32_t div_up(std::uint64_t a, std::uint64_t b) { return static_cast<std::uint32_t>((a + b - 1) / b); }

// ---- dispatch grids -------------------------------------------------------------------------

// Splits a 1-D grid of `total_groups` workgroups into dispatches of at most
// maxComputeWorkGroupCount[0]: f(first_group, groups) per dispatch.
template <class F>
void for_each_group_range(const DeviceLimits& limits, std::uint64_t total_groups, F&& f) {
  const std::uint64_t max = limits.max_workgroup_count[0];
  for (std::uint64_t first = 0; first < total_groups; first += max)
    f(first, static_cast<std::uint32_t>(std::min(max, total_groups - first)));
}

// ---- flat element ranges --------------------------------------------------------------------

// [first, first + count) of a flat element range.
struct ElementChunk {
  std::uint64_t first;
  std::uint64_t count;
};

// Splits `total` elements of `elem_bytes` each into chunks that one binding can cover
// (maxStorageBufferRange, offsets aligned for binding, whole quads) and one dispatch of
// workgroups that each cover `elems_per_group` elements can reach (maxComputeWorkGroupCount).
std::vector<ElementChunk> element_chunks(const DeviceLimits& limits, std::uint64_t total, std::uint32_t elem_bytes,
                                         std::uint64_t elems_per_group);

// ---- whole rows -----------------------------------------------------------------------------

// Rows of `row_bytes` per chunk when chunks of whole rows are bound at their first row: as many as
// one binding holds (and `max_rows`, what the grid reaches), rounded down so that every chunk
// starts at a bindable offset. 0: not even one aligned chunk fits (take another path).
inline std::uint64_t whole_rows_per_chunk(const DeviceLimits& lim, std::uint64_t row_bytes, std::uint64_t max_rows = UINT64_MAX) {
  const std::uint64_t align = lim.min_storage_buffer_offset_alignment;
  const std::uint64_t align_rows = align / std::gcd(row_bytes, align);
  return std::min(lim.max_storage_buffer_range / row_bytes, max_rows) / align_rows * align_rows;
}

// ---- windows at any element -----------------------------------------------------------------

// A range of tensor elements bound as a storage-buffer window: the binding starts at an offset
// the device can bind (aligned down), and `base` is where the range starts inside it. Lets an op
// split work at any element without the element being aligned, within maxStorageBufferRange.
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

// InvalidArgument unless the buffer an op binds whole exists, holds `want` bytes (or more, where
// `larger` allows) and fits one binding. `what()` describes the layout; messages are built only on
// failure (a plan's step checks are part of its recording time).
template <class What>
void require_bound_whole(const DeviceLimits& lim, const Buffer* b, std::uint64_t want, bool larger, const char* name, What&& what) {
  if (!b) require(false, name, "null", "is required (" + what() + ")");
  if (larger ? b->size() < want : b->size() != want)
    require(false, name, std::to_string(b->size()) + " bytes",
            (larger ? "must hold at least " : "must be ") + what() + " = " + std::to_string(want) + " bytes");
  if (b->capacity() > lim.max_storage_buffer_range)
    require(false, name, std::to_string(b->capacity()) + " bytes",
            "must fit one storage buffer binding (maxStorageBufferRange = " + std::to_string(lim.max_storage_buffer_range) +
                " bytes): it is bound whole");
}


// The offset at or below `byte` that a binding may start at.
inline std::uint64_t bindable_offset(const DeviceLimits& lim, std::uint64_t byte) {
  return byte / lim.min_storage_buffer_offset_alignment * lim.min_storage_buffer_offset_alignment;
}

// InvalidArgument unless `values` 32-bit values fit one binding: `name` is the parameter product
// they come from (e.g. "heads * (queries + keys - 1)"), `what` (optional) says what they are.
inline void require_binding(const DeviceLimits& lim, std::uint64_t values, const std::string& name, const std::string& what = "") {
  require(values * 4 <= lim.max_storage_buffer_range, name, std::to_string(values),
          (what.empty() ? "" : what + " ") + "must fit one storage buffer binding of the device (" +
              std::to_string(lim.max_storage_buffer_range / 4) + " values)");
}

// ---- bindings shifted to a bindable offset ----------------------------------------------------

// The bytes [first, end) of a buffer, bound from an offset the device accepts (aligned to 16 bytes
// at least, so vec4 words stay whole); shift is that offset in `unit`-byte words, what the shader
// subtracts from its global word index. fits: the binding is within maxStorageBufferRange.
struct Bound {
  BufferSpan span;
  std::uint32_t shift = 0;
  bool fits = true;
};

// The offset a binding of the bytes [first, ...) starts at, and its size to `end`.
inline std::pair<std::uint64_t, std::uint64_t> bound_bytes(const DeviceLimits& lim, std::uint64_t first, std::uint64_t end) {
  const std::uint64_t align = std::max<std::uint64_t>(lim.min_storage_buffer_offset_alignment, 16);
  const std::uint64_t off = first / align * align;
  return {off, std::max<std::uint64_t>(end - off, 4)};
}

// Whether bind_range(first, end) fits: what planning needs before any buffer exists.
inline bool bind_range_fits(const DeviceLimits& lim, std::uint64_t first, std::uint64_t end) {
  return bound_bytes(lim, first, end).second <= lim.max_storage_buffer_range;
}

inline Bound bind_range(const DeviceLimits& lim, const Buffer& buf, std::uint64_t first, std::uint64_t end, std::uint32_t unit) {
  const auto [off, bytes] = bound_bytes(lim, first, end);
  return {{&buf, off, bytes}, static_cast<std::uint32_t>(off / unit), bytes <= lim.max_storage_buffer_range};
}

// Chunks of units (rows, slabs) whose bindings all fit: the largest end in (first, total] for which
// misfit(first, end) is empty (misfit names the binding that does not fit, and only grows with
// end). Throws InvalidArgument, naming that binding and `unit` and ending with `hint`, when a single
// unit does not fit.
std::uint64_t largest_fitting_chunk(const DeviceLimits& lim, std::uint64_t first, std::uint64_t total, const std::string& unit,
                                    const std::string& hint, const std::function<std::string(std::uint64_t, std::uint64_t)>& misfit);

}  // namespace relpos::detail

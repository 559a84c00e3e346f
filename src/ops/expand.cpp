#include "ops/expand.hpp"

#include <numeric>
#include <string>

#include "reference/checks.hpp"
#include "relpos_push/expand.h"
#include "vk/dispatch.hpp"

namespace relpos::detail {
namespace {
constexpr std::uint32_t kGroup = 64;
constexpr std::uint32_t kQuadsPerInvocation = 4;  // flat path
// Diagonal steps per invocation on the whole-quad path: stores per source load.
constexpr std::uint32_t kDiagonal = 16;
// Neighbouring diagonals per invocation: each store of a step is this many vectors long.
constexpr std::uint32_t kUnroll = 2;
// Invocations along x of the whole-vector path, whose workgroups are `vec` rows of them: 256 in all
// where the device allows it (lavapipe pays per workgroup), else what fits (128 is guaranteed).
std::uint32_t rows_group(const DeviceLimits& lim, std::uint32_t vec) {
  if (lim.max_workgroup_size[1] < vec) return 0;
  return std::min<std::uint32_t>({256 / vec, lim.max_workgroup_invocations / vec, lim.max_workgroup_size[0]});
}
}  // namespace

ExpandMode expand_mode(DType dtype, bool add) {
  if (dtype == DType::F16) return add ? ExpandMode::AddF16 : ExpandMode::WriteF16;
  if (add && dtype != DType::F32) throw InvalidArgument("logits dtype = " + std::string(dtype_name(dtype)) + ": must be f32 or f16");
  return add ? ExpandMode::AddF32 : ExpandMode::Copy32;
}

std::uint32_t expand_elem_bytes(ExpandMode mode) {
  return (mode == ExpandMode::WriteF16 || mode == ExpandMode::AddF16) ? 2 : 4;
}

void check_expand(const DeviceLimits& lim, const ExpandShape& s, const Buffer& out, ExpandMode mode) {
  const std::uint32_t elem_bytes = expand_elem_bytes(mode);
  const std::uint64_t total = checked_elements({s.rows, s.keys}, "output elements");
  const std::uint64_t row_len = static_cast<std::uint64_t>(s.queries) + s.keys - 1;
  require(out.size() >= total * elem_bytes, "output buffer", std::to_string(out.size()) + " bytes",
          "must hold " + std::to_string(total) + " elements of " + std::to_string(elem_bytes) + " bytes = " +
              std::to_string(total * elem_bytes) + " bytes");
  require(row_len * s.heads * 4 <= lim.max_storage_buffer_range, "heads * (queries + keys - 1)",
          std::to_string(row_len * s.heads), "must fit one storage buffer binding of the device (" +
              std::to_string(lim.max_storage_buffer_range / 4) + " values)");
}

void expand_distance(Recorder& r, const ExpandShape& s, const Buffer& distance_rows, const Buffer& out, ExpandMode mode) {
  check_expand(r.context().limits(), s, out, mode);
  const std::uint32_t elem_bytes = expand_elem_bytes(mode);
  const std::uint64_t total = std::uint64_t{s.rows} * s.keys;
  const std::uint64_t row_len = static_cast<std::uint64_t>(s.queries) + s.keys - 1;
  require(distance_rows.size() >= row_len * s.heads * 4, "per-distance rows buffer", std::to_string(distance_rows.size()) + " bytes",
          "must hold heads * (queries + keys - 1) 32-bit values");
  const auto& lim = r.context().limits();
  const std::vector<std::uint32_t> spec = {kGroup, static_cast<std::uint32_t>(mode), kQuadsPerInvocation};
  push::ExpandPush pc{};
  pc.keys = s.keys;
  pc.queries = s.queries;
  pc.heads = s.heads;
  pc.row_len = static_cast<std::uint32_t>(row_len);

  // Whole 16-byte vectors per row (VEC = 4 f32/i32 or 8 f16 values): chunks of whole rows at
  // bindable offsets, read from shifted copies along diagonals (expand_distance_rows.comp).
  const bool f16 = mode == ExpandMode::WriteF16 || mode == ExpandMode::AddF16;
  const std::uint32_t vec = f16 ? 8 : 4;
  const std::uint64_t row_bytes = std::uint64_t{s.keys} * elem_bytes;
  const std::uint32_t group_x = rows_group(lim, vec);
  const std::uint64_t lanes_x = (s.keys / vec + kDiagonal - 1 + kUnroll - 1) / kUnroll;
  const std::uint64_t groups_x = (lanes_x + group_x - 1) / group_x;
  const std::uint64_t rows_per_tile = std::uint64_t{vec} * kDiagonal;
  std::uint64_t rows_per_chunk = std::min<std::uint64_t>(lim.max_storage_buffer_range / row_bytes,
                                                         std::uint64_t{lim.max_workgroup_count[1]} * rows_per_tile);
  const std::uint64_t align_rows = lim.min_storage_buffer_offset_alignment / std::gcd(row_bytes, lim.min_storage_buffer_offset_alignment);
  rows_per_chunk = rows_per_chunk / align_rows * align_rows;
  const bool half_copies = mode == ExpandMode::WriteF16;  // ADD_F16 adds f32 values, rounding once
  const std::uint64_t shifted_len = (row_len + vec - 1) / vec * vec;
  const std::uint64_t shifted_bytes = std::uint64_t{s.heads} * vec * shifted_len * (half_copies ? 2 : 4);
  if (s.keys % vec == 0 && group_x > 0 && rows_per_chunk > 0 && groups_x <= lim.max_workgroup_count[0] &&
      shifted_bytes <= lim.max_storage_buffer_range) {
    pc.shifted_len = static_cast<std::uint32_t>(shifted_len);
    Buffer& shifted = scratch(r, shifted_bytes, MemoryUse::Device);
    const std::uint64_t words = shifted_bytes / 4;
    push::ExpandPush sp = pc;
    sp.count = static_cast<std::uint32_t>(words);
    for_each_group_range(lim, div_up(words, kGroup), [&](std::uint64_t first_group, std::uint32_t groups) {
      sp.first_row = static_cast<std::uint32_t>(first_group * kGroup);
      dispatch(r, "expand_shift", {kGroup, half_copies ? 1u : 0u, vec}, {{&distance_rows}, {&shifted}}, sp, groups);
    });
    barrier(r);
    for (std::uint64_t first = 0; first < s.rows; first += rows_per_chunk) {
      const std::uint64_t rows = std::min(rows_per_chunk, s.rows - first);
      pc.first_row = static_cast<std::uint32_t>(first);
      pc.count = static_cast<std::uint32_t>(rows * s.keys);
      dispatch(r, "expand_distance_rows", {group_x, static_cast<std::uint32_t>(mode), kDiagonal, vec, kUnroll},
               {{&shifted}, {&out, first * row_bytes, rows * row_bytes}}, pc, static_cast<std::uint32_t>(groups_x),
               div_up(rows, rows_per_tile));
    }
    return;
  }
  // Any shape: flat quads, chunks at any element.
  const std::uint64_t per_group = std::uint64_t{kGroup} * kQuadsPerInvocation * 4;
  for (const ElementChunk& c : element_chunks(lim, total, elem_bytes, per_group)) {
    pc.first_row = static_cast<std::uint32_t>(c.first / s.keys);
    pc.first_col = static_cast<std::uint32_t>(c.first % s.keys);
    pc.count = static_cast<std::uint32_t>(c.count);
    dispatch(r, "expand_distance", spec, {{&distance_rows}, {&out, c.first * elem_bytes, c.count * elem_bytes}}, pc,
             div_up(c.count, per_group));
  }
}

}  // namespace relpos::detail

#include "ops/expand.hpp"

#include <cstdlib>
#include <string>
#include <thread>

#include "params/checks.hpp"
#include "relpos_contract/expand.h"
#include "relpos_push/expand.h"
#include "ops/planner.hpp"
#include "vk/access.hpp"
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

contract::ExpandDistanceSpec flat_spec(ExpandMode mode) {
  return {.WG_X = kGroup, .MODE = static_cast<std::uint32_t>(mode), .QUADS = kQuadsPerInvocation};
}
contract::ExpandDistanceRowsSpec rows_spec(std::uint32_t group_x, ExpandMode mode, std::uint32_t vec) {
  return {.WG_X = group_x, .MODE = static_cast<std::uint32_t>(mode), .DIAG = kDiagonal, .VEC = vec, .UNROLL = kUnroll, .WG_Y = vec};
}
contract::ExpandShiftSpec shift_spec(bool half, std::uint32_t copies) { return {.WG_X = kGroup, .HALF = half ? 1u : 0u, .VEC = copies}; }

// Bytes of `copies` shifted copies of each head's row, `shifted_len` values each, in f16 (`half`)
// or 32-bit values.
std::uint64_t shifted_rows_bytes(const ExpandShape& s, std::uint32_t copies, std::uint64_t shifted_len, bool half) {
  return std::uint64_t{s.heads} * copies * shifted_len * (half ? 2 : 4);
}

// Those copies, made by expand_shift.comp: copy c of head h holds row[h][x + c] at x, rounded to
// f16 once per distance where `half`. Ends with the barrier that makes them readable.
const Buffer& shifted_rows(Recorder& r, const ExpandShape& s, const Buffer& distance_rows, std::uint32_t copies,
                           std::uint64_t shifted_len, bool half, const ExpandResources& res) {
  const std::uint64_t bytes = shifted_rows_bytes(s, copies, shifted_len, half);
  if (res.shifted && res.shifted->size() < bytes) throw Error("internal: a plan's shifted rows buffer is too small");
  const Buffer& shifted = res.shifted ? *res.shifted : scratch(r, bytes, MemoryUse::Device);
  push::ExpandPush sp{};
  sp.queries = s.queries;
  sp.keys = s.keys;
  sp.heads = s.heads;
  sp.row_len = static_cast<std::uint32_t>(std::uint64_t{s.queries} + s.keys - 1);
  sp.shifted_len = static_cast<std::uint32_t>(shifted_len);
  const std::uint64_t words = bytes / 4;
  sp.count = static_cast<std::uint32_t>(words);
  for_each_group_range(r.context().limits(), div_up(words, kGroup), [&](std::uint64_t first_group, std::uint32_t groups) {
    sp.first_row = static_cast<std::uint32_t>(first_group * kGroup);
    dispatch(r, res.sets, ShaderId::expand_shift, shift_spec(half, copies), contract::ExpandShiftBindings{.ROWS = {&distance_rows}, .SHIFTED = {&shifted}},
             sp, groups);
  });
  barrier(r);
  return shifted;
}

// Transfer copies, where they pay (DistanceExpansion::Auto): on CPU devices a copy region is a
// memcpy on the queue thread, about 0.35 us of overhead plus ~10 GB/s, against ~2 GB/s per
// thread for the shader's stores (lavapipe, 2-core VM: docs/ARCHITECTURE.md). Rows from 1 KiB;
// from about 4 threads the shader's parallel stores catch up with the one copying thread.
constexpr std::uint64_t kCopyMinRowBytes = 1024;
constexpr std::uint32_t kCopyMaxThreads = 4;
// Regions per vkCmdCopyBuffer. The validation layer's checks of one command grow with the square
// of its regions (16384 rows: 12.6 s in commands of 4096, 0.14 s in commands of 32); lavapipe runs
// commands of 32 as fast as one large one.
constexpr std::size_t kRegionsPerCommand = 32;

// The threads llvmpipe runs shaders on: LP_NUM_THREADS, else the host's CPUs.
std::uint32_t cpu_device_threads() {
  if (const char* e = std::getenv("LP_NUM_THREADS")) return std::max(1, std::atoi(e));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool expand_by_copies(const Context& ctx, const ExpandShape& s, const Buffer& out, ExpandMode mode) {
  if ((mode != ExpandMode::Copy32 && mode != ExpandMode::WriteF16) || !out.transfer_writable()) return false;
  switch (ctx.tuning().distance_expansion) {
    case DistanceExpansion::Shader: return false;
    case DistanceExpansion::Copies: return true;
    case DistanceExpansion::Auto: break;
  }
  return ctx.device_info().type == DeviceType::Cpu && std::uint64_t{s.keys} * expand_elem_bytes(mode) >= kCopyMinRowBytes &&
         cpu_device_threads() <= kCopyMaxThreads;
}

// Output row r = (b, h, i) is the window at Q - 1 - i of head h's row: one copy region per row,
// from the rows themselves (32-bit values) or from their f16 rounding.
void copy_windows(Recorder& r, const ExpandShape& s, const Buffer& distance_rows, const Buffer& out, ExpandMode mode,
                  const ExpandResources& res) {
  const std::uint64_t row_len = static_cast<std::uint64_t>(s.queries) + s.keys - 1;
  const Buffer* src = &distance_rows;
  std::uint64_t pitch = row_len;  // source elements from one head's row to the next
  std::uint64_t elem_bytes = 4;
  if (mode == ExpandMode::WriteF16) {
    // One unshifted copy per head, rounded to f16; an even pitch keeps each 32-bit word of halves
    // within one head.
    pitch = (row_len + 1) / 2 * 2;
    elem_bytes = 2;
    src = &shifted_rows(r, s, distance_rows, 1, pitch, true, res);
  }
  std::vector<VkBufferCopy> regions;
  regions.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(s.rows, kRegionsPerCommand)));
  const std::uint64_t row_bytes = std::uint64_t{s.keys} * elem_bytes;
  for (std::uint64_t row = 0; row < s.rows; ++row) {
    const std::uint64_t i = row % s.queries, h = (row / s.queries) % s.heads;
    regions.push_back({(h * pitch + s.queries - 1 - i) * elem_bytes, row * row_bytes, row_bytes});
    if (regions.size() == kRegionsPerCommand) {
      copy_regions(r, *src, out, regions);
      regions.clear();
    }
  }
  copy_regions(r, *src, out, regions);
}

}  // namespace

std::uint64_t expand_scratch_bytes(const ExpandShape& s) {
  // The whole-vector path's VEC copies: 16 bytes per distance (4 f32 or 8 f16 values), 32 for an
  // f16 add (8 f32 values); the f16 copy path's one rounded copy takes less.
  const std::uint64_t row_len = std::uint64_t{s.queries} + s.keys - 1;
  return std::uint64_t{s.heads} * (row_len + 8) * 32;
}

void prepare_expand_pipelines(Context& ctx, ExpandMode mode) {
  Device& d = *device_of(ctx);
  const bool f16 = mode == ExpandMode::WriteF16 || mode == ExpandMode::AddF16;
  const std::uint32_t vec = f16 ? 8 : 4;
  d.pipeline(ShaderId::expand_distance, flat_spec(mode));
  if (const std::uint32_t group_x = rows_group(ctx.limits(), vec)) d.pipeline(ShaderId::expand_distance_rows, rows_spec(group_x, mode, vec));
  d.pipeline(ShaderId::expand_shift, shift_spec(mode == ExpandMode::WriteF16, vec));
  if (mode == ExpandMode::WriteF16) d.pipeline(ShaderId::expand_shift, shift_spec(true, 1));
}

ExpandMode expand_mode(DType dtype, bool add) {
  require_f32_or_f16(dtype, add ? "logits dtype" : "out dtype");
  if (dtype == DType::F16) return add ? ExpandMode::AddF16 : ExpandMode::WriteF16;
  return add ? ExpandMode::AddF32 : ExpandMode::Copy32;
}

std::uint32_t expand_elem_bytes(ExpandMode mode) {
  return (mode == ExpandMode::WriteF16 || mode == ExpandMode::AddF16) ? 2 : 4;
}

void check_expand(Recorder& r, const ExpandShape& s, const Buffer& out, ExpandMode mode) {
  require_own_buffer(r, &out, mode == ExpandMode::Copy32 || mode == ExpandMode::WriteF16 ? "out buffer" : "logits buffer");
  const DeviceLimits& lim = r.context().limits();
  const std::uint32_t elem_bytes = expand_elem_bytes(mode);
  const std::uint64_t total = checked_elements({s.rows, s.keys}, "output elements");
  const std::uint64_t row_len = static_cast<std::uint64_t>(s.queries) + s.keys - 1;
  require(out.size() >= total * elem_bytes, "output buffer", std::to_string(out.size()) + " bytes",
          "must hold " + std::to_string(total) + " elements of " + std::to_string(elem_bytes) + " bytes = " +
              std::to_string(total * elem_bytes) + " bytes");
  require_binding(lim, row_len * s.heads, "heads * (queries + keys - 1)", "the per-distance rows");
}

void expand_distance(Recorder& r, const ExpandShape& s, const Buffer& distance_rows, const Buffer& out, ExpandMode mode,
                     const ExpandResources& res) {
  check_expand(r, s, out, mode);
  const std::uint32_t elem_bytes = expand_elem_bytes(mode);
  const std::uint64_t total = std::uint64_t{s.rows} * s.keys;
  const std::uint64_t row_len = static_cast<std::uint64_t>(s.queries) + s.keys - 1;
  require(distance_rows.size() >= row_len * s.heads * 4, "per-distance rows buffer", std::to_string(distance_rows.size()) + " bytes",
          "must hold heads * (queries + keys - 1) 32-bit values");
  if (expand_by_copies(r.context(), s, out, mode)) {
    copy_windows(r, s, distance_rows, out, mode, res);
    return;
  }
  const auto& lim = r.context().limits();
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
  const std::uint64_t rows_per_chunk = whole_rows_per_chunk(lim, row_bytes, std::uint64_t{lim.max_workgroup_count[1]} * rows_per_tile);
  const bool half_copies = mode == ExpandMode::WriteF16;  // ADD_F16 adds f32 values, rounding once
  const std::uint64_t shifted_len = (row_len + vec - 1) / vec * vec;
  if (s.keys % vec == 0 && group_x > 0 && rows_per_chunk > 0 && groups_x <= lim.max_workgroup_count[0] &&
      shifted_rows_bytes(s, vec, shifted_len, half_copies) <= lim.max_storage_buffer_range) {
    pc.shifted_len = static_cast<std::uint32_t>(shifted_len);
    const Buffer& shifted = shifted_rows(r, s, distance_rows, vec, shifted_len, half_copies, res);
    for (std::uint64_t first = 0; first < s.rows; first += rows_per_chunk) {
      const std::uint64_t rows = std::min(rows_per_chunk, s.rows - first);
      pc.first_row = static_cast<std::uint32_t>(first);
      pc.count = static_cast<std::uint32_t>(rows * s.keys);
      dispatch(r, res.sets, ShaderId::expand_distance_rows, rows_spec(group_x, mode, vec),
               contract::ExpandDistanceRowsBindings{.SHIFTED = {&shifted}, .OUT = {&out, first * row_bytes, rows * row_bytes}}, pc,
               static_cast<std::uint32_t>(groups_x), div_up(rows, rows_per_tile));
    }
    return;
  }
  // Any shape: flat quads, chunks at any element.
  const std::uint64_t per_group = std::uint64_t{kGroup} * kQuadsPerInvocation * 4;
  for (const ElementChunk& c : element_chunks(lim, total, elem_bytes, per_group)) {
    pc.first_row = static_cast<std::uint32_t>(c.first / s.keys);
    pc.first_col = static_cast<std::uint32_t>(c.first % s.keys);
    pc.count = static_cast<std::uint32_t>(c.count);
    dispatch(r, res.sets, ShaderId::expand_distance, flat_spec(mode),
             contract::ExpandDistanceBindings{.ROWS = {&distance_rows}, .OUT = {&out, c.first * elem_bytes, c.count * elem_bytes}}, pc,
             div_up(c.count, per_group));
  }
}

}  // namespace relpos::detail

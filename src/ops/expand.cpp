#include "ops/expand.hpp"

#include <string>

#include "reference/checks.hpp"
#include "relpos_push/expand.h"
#include "vk/dispatch.hpp"

namespace relpos::detail {
namespace {
constexpr std::uint32_t kGroup = 64;
constexpr std::uint32_t kQuadsPerInvocation = 4;
}  // namespace

ExpandMode expand_mode(DType dtype, bool add) {
  if (dtype == DType::F16) return add ? ExpandMode::AddF16 : ExpandMode::WriteF16;
  if (add && dtype != DType::F32) throw InvalidArgument("logits dtype = " + std::string(dtype_name(dtype)) + ": must be f32 or f16");
  return add ? ExpandMode::AddF32 : ExpandMode::Copy32;
}

void expand_distance(Recorder& r, const ExpandShape& s, const Buffer& distance_rows, const Buffer& out, ExpandMode mode) {
  const std::uint32_t elem_bytes = (mode == ExpandMode::WriteF16 || mode == ExpandMode::AddF16) ? 2 : 4;
  const std::uint64_t total = checked_elements({s.rows, s.keys}, "output elements");
  const std::uint64_t row_len = static_cast<std::uint64_t>(s.queries) + s.keys - 1;
  require(distance_rows.size() >= row_len * s.heads * 4, "per-distance rows buffer", std::to_string(distance_rows.size()) + " bytes",
          "must hold heads * (queries + keys - 1) 32-bit values");
  require(out.size() >= total * elem_bytes, "output buffer", std::to_string(out.size()) + " bytes",
          "must hold " + std::to_string(total) + " elements of " + std::to_string(elem_bytes) + " bytes = " +
              std::to_string(total * elem_bytes) + " bytes");
  const auto& lim = r.context().limits();
  require(row_len * s.heads * 4 <= lim.max_storage_buffer_range, "heads * (queries + keys - 1)",
          std::to_string(row_len * s.heads), "must fit one storage buffer binding of the device (" +
              std::to_string(lim.max_storage_buffer_range / 4) + " values)");
  const std::uint64_t per_group = std::uint64_t{kGroup} * kQuadsPerInvocation * 4;
  for (const ElementChunk& c : element_chunks(lim, total, elem_bytes, per_group)) {
    push::ExpandPush pc{};
    pc.keys = s.keys;
    pc.queries = s.queries;
    pc.heads = s.heads;
    pc.row_len = static_cast<std::uint32_t>(row_len);
    pc.first_row = static_cast<std::uint32_t>(c.first / s.keys);
    pc.first_col = static_cast<std::uint32_t>(c.first % s.keys);
    pc.count = static_cast<std::uint32_t>(c.count);
    dispatch(r, "expand_distance", {kGroup, static_cast<std::uint32_t>(mode), kQuadsPerInvocation},
             {{&distance_rows}, {&out, c.first * elem_bytes, c.count * elem_bytes}}, pc, div_up(c.count, per_group));
  }
}

}  // namespace relpos::detail

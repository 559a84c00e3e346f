#include "tooling/ceiling.hpp"

#include <algorithm>
#include <string>

#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos_push/fill.h"
#include "ops/planner.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {
// The fastest configuration measured on lavapipe (256 invocations, 16 quads each: about twice the
// rate of 64 x 4 there); a ceiling must be the best the device does, or ratios flatter the ops.
std::uint32_t group_size(Recorder& r) { return std::min<std::uint32_t>(256, r.context().limits().max_workgroup_invocations); }
constexpr std::uint32_t kQuads = 16;
}  // namespace

void fill_u32(Recorder& r, const Buffer& out, std::uint64_t bytes, std::uint32_t value) {
  detail::require(bytes % 16 == 0 && bytes <= out.size(), "bytes", std::to_string(bytes),
                  "must be a multiple of 16 and at most the buffer size " + std::to_string(out.size()));
  const auto op = detail::begin_op(r);
  const std::uint32_t group = group_size(r);
  const std::uint64_t per_group = std::uint64_t{group} * kQuads * 4;
  for (const auto& c : detail::element_chunks(r.context().limits(), bytes / 4, 4, per_group)) {
    push::FillPush pc{static_cast<std::uint32_t>(c.count / 4), value};
    detail::dispatch(r, detail::ShaderId::fill, {group, kQuads}, {{&out, c.first * 4, c.count * 4}}, pc, detail::div_up(c.count, per_group));
  }
}

void copy_u32(Recorder& r, const Buffer& src, const Buffer& dst, std::uint64_t bytes) {
  detail::require(bytes % 16 == 0 && bytes <= src.size() && bytes <= dst.size(), "bytes", std::to_string(bytes),
                  "must be a multiple of 16 and at most both buffer sizes");
  const auto op = detail::begin_op(r);
  const std::uint32_t group = group_size(r);
  const std::uint64_t per_group = std::uint64_t{group} * kQuads * 4;
  for (const auto& c : detail::element_chunks(r.context().limits(), bytes / 4, 4, per_group)) {
    push::FillPush pc{static_cast<std::uint32_t>(c.count / 4), 0};
    detail::dispatch(r, detail::ShaderId::copy, {group, kQuads}, {{&src, c.first * 4, c.count * 4}, {&dst, c.first * 4, c.count * 4}}, pc,
                     detail::div_up(c.count, per_group));
  }
}

void fill_u32_transfer(Recorder& r, const Buffer& out, std::uint64_t bytes, std::uint32_t value) {
  detail::require(bytes % 4 == 0 && bytes > 0 && bytes <= out.size(), "bytes", std::to_string(bytes),
                  "must be a positive multiple of 4 and at most the buffer size " + std::to_string(out.size()));
  const auto op = detail::begin_op(r);
  detail::fill_words(r, out, 0, bytes, value);
}

void copy_transfer(Recorder& r, const Buffer& src, const Buffer& dst, std::uint64_t bytes) {
  detail::require(bytes % 4 == 0 && bytes > 0 && bytes <= src.size() && bytes <= dst.size(), "bytes", std::to_string(bytes),
                  "must be a positive multiple of 4 and at most both buffer sizes");
  const auto op = detail::begin_op(r);
  detail::copy_regions(r, src, dst, {VkBufferCopy{0, 0, bytes}});
}

}  // namespace relpos

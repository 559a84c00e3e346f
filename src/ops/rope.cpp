// RoPE on the GPU: one shader over rectangles of rows (see relpos_push/rope.h). The host computes
// the frequency table with the CPU reference's rope_frequencies(); the shader computes the angles
// and their sin and cos itself, once per position and unit, and applies them to every head.
#include <algorithm>
#include <cstring>
#include <string>

#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "ops/rope_invocations.hpp"
#include "ops/rope_record.hpp"
#include "relpos/rope.hpp"
#include "relpos_push/loop_bound.h"
#include "relpos_contract/rope.h"
#include "relpos_push/rope.h"
#include "ops/planner.hpp"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

using detail::require;

constexpr std::uint32_t kGroupInvocations = 64;

// The rows as a p x l grid: (b * seq + s, h) for BSHD, (s, b * heads + h) for BHSD (strides in elements).
struct Grid {
  std::uint64_t p_count, l_count, p_stride, l_stride;
};

Grid grid_of(const RopeParams& p) {
  const std::uint64_t d = p.head_dim;
  if (p.layout == RopeLayout::BSHD) return {std::uint64_t{p.batch} * p.seq, p.heads, std::uint64_t{p.heads} * d, d};
  return {p.seq, std::uint64_t{p.batch} * p.heads, d, std::uint64_t{p.seq} * d};
}

void check_buffers(const RopeParams& p, const Buffer& x, const Buffer* out, DType dtype, const Buffer* positions) {
  p.validate(dtype);
  const std::uint64_t need = p.elements() * dtype_size(dtype);
  require(x.size() >= need, "x buffer", std::to_string(x.size()) + " bytes",
          "must hold batch * seq * heads * head_dim = " + std::to_string(p.elements()) + " values of " +
              std::string(dtype_name(dtype)) + " = " + std::to_string(need) + " bytes");
  if (out)
    require(out->size() >= need, "output buffer", std::to_string(out->size()) + " bytes", "must hold " + std::to_string(need) + " bytes");
  if (positions) {
    const std::uint64_t n = std::uint64_t{p.batch} * p.seq;
    require(positions->size() == n * 4, "positions buffer", std::to_string(positions->size()) + " bytes",
            "must be int32 [batch, seq] = " + std::to_string(n * 4) + " bytes");
  }
}

}  // namespace

namespace detail {

void record_rope(Recorder& r, const RopeParams& p, const Buffer& x, const Buffer* out, DType dtype, const Buffer* positions,
                 const RopePlanResources& plan) {
  const RopeFrequencies fr = rope_frequencies(p, positions != nullptr);
  if (!plan.prepare_only) {
    // In place (no out, or out = x), x is written; else out, which may not share x's bytes.
    const bool rotates_x = out == nullptr || out == &x;
    require_own_buffers(r, {{&x, "x buffer", rotates_x}, {rotates_x ? nullptr : out, "out buffer", true}, {positions, "positions buffer"}});
    check_buffers(p, x, out, dtype, positions);
  }
  const auto& lim = r.context().limits();
  const std::uint32_t e = dtype_size(dtype), d = p.rot_dim(), dim = p.head_dim;
  const bool in_place = out == nullptr || out == &x;
  const bool quad = d % 8 == 0 && dim % 4 == 0;
  const bool wide = dtype == DType::F16 && d % 16 == 0 && dim % 8 == 0;  // 16-byte words of eight halves
  require(dim <= detail::window_capacity(lim, e), "head_dim", std::to_string(dim), "one row must fit a storage buffer binding of the device");
  require(!positions || plan.prepare_only || positions->size() <= lim.max_storage_buffer_range, "batch * seq",
          std::to_string(std::uint64_t{p.batch} * p.seq), "positions must fit one storage buffer binding of the device");

  push::RopePush pc{};
  pc.units = wide ? d / 16 : quad ? d / 8 : 1;
  pc.tail_units = quad && !in_place ? (dim - d) / (wide ? 8 : 4) : 0;
  pc.half_dim = d / 2;
  pc.head_dim = dim;
  pc.rot_dim = d;
  const std::uint32_t units = pc.units + pc.tail_units;
  std::uint32_t wg_x = 1;
  while (wg_x < units && wg_x < kGroupInvocations) wg_x *= 2;
  const std::uint32_t wg_y = kGroupInvocations / wg_x;
  require(units <= std::uint64_t{lim.max_workgroup_count[0]} * wg_x, "head_dim", std::to_string(dim),
          "needs more workgroups per row than the device dispatches");

  const Grid g = grid_of(p);
  const bool bshd = p.layout == RopeLayout::BSHD;
  pc.p_mod = !positions && bshd ? p.seq : 0;
  pc.l_div = positions && !bshd ? p.heads : 0;
  pc.l_mul = positions && !bshd ? p.seq : 0;
  pc.position_offset = static_cast<std::int32_t>(p.position_offset);
  pc.use_positions = positions ? 1 : 0;
  pc.scale = p.inverse ? 1.0f / fr.attention_factor : fr.attention_factor;
  pc.sin_sign = p.inverse ? -1.0f : 1.0f;
  pc.p_stride = static_cast<std::uint32_t>(g.p_stride);
  pc.l_stride = static_cast<std::uint32_t>(g.l_stride);

  const std::uint64_t row_iterations = detail::rope_row_iterations(quad, in_place, d, dim);
  require(row_iterations <= RELPOS_MAX_LOOP_ITERATIONS, "head_dim", std::to_string(dim) + " (rotary_dim " + std::to_string(d) + ")",
          "the element-wise path (rotary_dim % 8 != 0 or head_dim % 4 != 0) loops over rotary_dim / 2 pairs, plus out of place "
          "head_dim - rotary_dim pass-through features, per row: " + std::to_string(row_iterations - 1) +
              " must be < " + std::to_string(RELPOS_MAX_LOOP_ITERATIONS) + ", the bound on one shader invocation's loop iterations");
  const std::uint64_t l_per = detail::rope_l_per_invocation(units, g.p_count, g.l_count, row_iterations);
  pc.l_per_invocation = static_cast<std::uint32_t>(l_per);

  // Rectangles of np x nl rows whose bound span ((np-1) * p_stride + (nl-1) * l_stride + head_dim
  // elements) fits one binding and whose grid fits one dispatch.
  const std::uint64_t span_max = detail::window_capacity(lim, e);
  auto np_for = [&](std::uint64_t nl) -> std::uint64_t {
    const std::uint64_t fixed = (nl - 1) * g.l_stride + dim;
    return fixed > span_max ? 0 : (span_max - fixed) / g.p_stride + 1;
  };
  std::uint64_t nl = std::min(g.l_count, std::uint64_t{lim.max_workgroup_count[2]} * l_per);
  if (np_for(nl) == 0) nl = (span_max - dim) / g.l_stride + 1;
  const std::uint64_t np = std::min({g.p_count, np_for(nl), std::uint64_t{lim.max_workgroup_count[1]} * wg_y});

  const contract::RopeSpec spec{.WG_X = wg_x,
                                .WG_Y = wg_y,
                                .F16 = dtype == DType::F16 ? 1u : 0u,
                                .GPTJ = p.style == RopeStyle::GptJ ? 1u : 0u,
                                .QUAD = quad ? 1u : 0u,
                                .IN_PLACE = in_place ? 1u : 0u,
                                .WIDE = wide ? 1u : 0u,
                                .L_POSITIONS = pc.l_div != 0 ? 1u : 0u,
                                .TAIL = pc.tail_units != 0 ? 1u : 0u};
  const Buffer& dst = in_place ? x : *out;
  if (plan.prepare_only) {
    detail::device_of(r.context())->pipeline(ShaderId::rope, spec);
    return;
  }
  // The op's barrier first: a plan's update below overwrites the table an earlier step of the same
  // recording reads (recorded before it, the write raced those reads on a GPU).
  const auto op = detail::begin_op(r);
  // A plan's frequencies travel in the command buffer (a pending step keeps its own); otherwise a
  // host buffer no submitted work uses yet.
  const Buffer* freq = plan.frequencies;
  if (freq) {
    std::vector<std::uint32_t> words(fr.inv_freq.size());
    std::memcpy(words.data(), fr.inv_freq.data(), words.size() * 4);
    detail::update_words(r, *freq, 0, words);
    detail::barrier(r);  // the update before the shader's reads
  } else {
    Buffer& host = detail::scratch(r, fr.inv_freq.size() * 4, MemoryUse::Host);
    std::memcpy(host.host_pointer(), fr.inv_freq.data(), fr.inv_freq.size() * 4);
    freq = &host;
  }
  for (std::uint64_t p0 = 0; p0 < g.p_count; p0 += np)
    for (std::uint64_t l0 = 0; l0 < g.l_count; l0 += nl) {
      const std::uint64_t pn = std::min(np, g.p_count - p0), ln = std::min(nl, g.l_count - l0);
      const std::uint64_t first = (p0 * g.p_stride + l0 * g.l_stride) * e;
      const std::uint64_t bound = detail::bindable_offset(lim, first);
      const std::uint64_t bytes = first - bound + ((pn - 1) * g.p_stride + (ln - 1) * g.l_stride + dim) * e;
      pc.p_first = static_cast<std::uint32_t>(p0);
      pc.p_count = static_cast<std::uint32_t>(pn);
      pc.l_first = static_cast<std::uint32_t>(l0);
      pc.l_count = static_cast<std::uint32_t>(ln);
      pc.base = static_cast<std::uint32_t>((first - bound) / e);
      detail::dispatch(r, plan.sets, ShaderId::rope, spec,
                       contract::RopeBindings{
                           .INV_FREQ = {freq}, .X_IN = {&x, bound, bytes}, .OUT = {&dst, bound, bytes}, .POSITIONS = {positions ? positions : freq}},
                       pc, detail::div_up(units, wg_x), detail::div_up(pn, wg_y), detail::div_up(ln, l_per));
    }
}

}  // namespace detail

void rope(Recorder& r, const RopeParams& p, const Buffer& x, DType dtype, const Buffer* positions) {
  detail::record_rope(r, p, x, nullptr, dtype, positions, {});
}

void rope_into(Recorder& r, const RopeParams& p, const Buffer& x, const Buffer& out, DType dtype, const Buffer* positions) {
  detail::record_rope(r, p, x, &out, dtype, positions, {});
}

}  // namespace relpos
